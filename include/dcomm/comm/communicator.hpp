// Communicator: one rank's membership in a group, and the public calls. It owns the bootstrap
// (store, roster, socket mesh, proxy thread, UCX and verbs links), the worker that runs
// asynchronous calls, and the pieces a reader can name: what the ranks agreed at set-up
// (comm/facts.hpp), the links to the peers (comm/link_table.hpp), the dispatch from a call to
// its algorithm (comm/dispatch.hpp), the abort fan-out (comm/abort_fanout.hpp) and the tuning
// of the cost model (comm/tuning.hpp).
//
// Threads: every rank must make the same calls, in the same order, with the same counts,
// types, ops and roots (as with NCCL and MPI). One communicator is used by one thread at a
// time; different communicators are independent and may be used concurrently. Blocking
// calls return when this rank's part is done and its buffers may be reused. *_async calls
// return a Work handle at once; they run in call order on a worker thread.
//
// Failure: a call that fails after data started moving (timeout, dead peer, mismatch)
// aborts the communicator: every peer is told why, and every later call on any rank returns
// that error at once. Argument errors fail only the caller's call and abort nothing.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <concepts>
#include <fstream>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "dcomm/algo/p2p.hpp"
#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/bootstrap/roster.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/comm/abort_fanout.hpp"
#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/dispatch.hpp"
#include "dcomm/comm/exchange_calls.hpp"
#include "dcomm/comm/facts.hpp"
#include "dcomm/comm/link_table.hpp"
#include "dcomm/comm/host_tuning.hpp"
#include "dcomm/comm/links.hpp"
#include "dcomm/comm/membership.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/comm/tuning.hpp"
#include "dcomm/comm/work.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/host_reducer.hpp"
#include "dcomm/transport/inproc.hpp"
#include "dcomm/transport/mesh.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/shm.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
template <class S, class R>
concept SameElement = std::same_as<std::remove_const_t<S>, R>;
}  // namespace detail

class Communicator : public ExchangeCalls<Communicator>, public MembershipCalls<Communicator> {
 public:
  // ---- creation -------------------------------------------------------------------------
  // From the launcher's environment: torchrun, mpirun (OpenMPI) or srun (Slurm); see
  // bootstrap/launcher.hpp and docs/environment.md.
  static Result<std::unique_ptr<Communicator>> from_env() {
    auto config = Config::from_env();
    if (!config.ok()) return config.status();
    auto launch = detect_launch();
    if (!launch.ok()) return launch.status();
    std::shared_ptr<StoreServer> server;
    if (launch->host_store) {
      // On the rendezvous address itself (the interface the other ranks reach), not on every
      // interface of the host.
      auto s = detail::serve_store(detail::bind_host_for(launch->rendezvous.host), launch->rendezvous.port,
                                   launch->port_span, launch->access);
      if (!s.ok())
        return s.status().with_context(detail::cat(launch->launcher, " rank 0 cannot serve the rendezvous on port ",
                                                   launch->rendezvous.port,
                                                   " (set DCOMM_COMM_ID=host:port to a free port)"));
      server = detail::claim_store((*s)->address().port);
    } else if (launch->nonce) {
      server = detail::claim_store(launch->rendezvous);
    }
    auth::note_unauthenticated(launch->access.secret, launch->rank, detail::cat(launch->launcher, " start").c_str());
    static std::atomic<int> env_count{0};
    std::string prefix = launch->nonce ? detail::hex16(launch->nonce) : detail::cat("env", env_count++);
    return create(launch->rank, launch->size, launch->rendezvous, prefix, *config, server, launch->access,
                  launch->port_span);
  }

  // NCCL style: every rank passes the same id (made by UniqueId::create on one of them).
  static Result<std::unique_ptr<Communicator>> init(int rank, int size, const UniqueId& id) {
    auto config = Config::from_env();
    if (!config.ok()) return config.status();
    return init(rank, size, id, *config);
  }
  static Result<std::unique_ptr<Communicator>> init(int rank, int size, const UniqueId& id, const Config& config) {
    return create(rank, size, id.address, detail::hex16(id.nonce), config, detail::claim_store(id.address),
                  {id.secret, {}});
  }

  // `size` ranks as threads of this process (tests; one process driving several devices).
  // Each returned communicator must then be driven by its own thread.
  static Result<std::vector<std::unique_ptr<Communicator>>> create_local(int size) {
    auto config = Config::from_env();
    if (!config.ok()) return config.status();
    return create_local(size, *config);
  }
  static Result<std::vector<std::unique_ptr<Communicator>>> create_local(int size, const Config& config) {
    if (size < 1) return invalid_argument("create_local: size ", size, " must be at least 1");
    auto id = UniqueId::create();
    if (!id.ok()) return id.status();
    std::vector<std::unique_ptr<Communicator>> comms(static_cast<size_t>(size));
    std::vector<Status> errors(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        auto c = init(r, size, *id, config);
        if (c.ok()) comms[static_cast<size_t>(r)] = std::move(*c);
        else errors[static_cast<size_t>(r)] = c.status();
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (!e.ok()) return e;
    return comms;
  }

  ~Communicator() {
    executor_.shutdown();
    // A clean goodbye only from a healthy communicator: after an abort, peers must learn the
    // abort's cause (sent over the control sockets), not that this rank left.
    if (!abort_->aborted()) links_.close_all();
    if (transports_.proxy) transports_.proxy->stop(config_.timeout);
    fanout_.leave();
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // ---- what this rank is -----------------------------------------------------------------
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // among ranks on this host
  int local_size() const { return local_size_; }
  // About rank r; out-of-range ranks get an empty PeerInfo (rank -1), "none" and false.
  const PeerInfo& peer(int r) const {
    static const PeerInfo kNone;
    return r >= 0 && r < size_ ? peers_[static_cast<size_t>(r)] : kNone;
  }
  bool same_host(int r) const { return peer(r).rank >= 0 && peer(r).host_id == peer(rank_).host_id; }
  const char* transport_to(int r) const { return r < 0 || r >= size_ ? "none" : links_.transport_name(r); }
  const Config& config() const { return config_; }
  const JobSecret& secret() const { return access_.secret; }  // what authenticates its connections
  // The deadline of every later wait (torch's setTimeout); between calls, never during one.
  void set_timeout(std::chrono::milliseconds timeout) { config_.timeout = timeout; }
  // The algorithm a collective of this shape runs here, and why (as DCOMM_DEBUG_SUBSYS=TUNING
  // logs it): the same on every rank. kSingleCopyIfRegistered still falls back to the ring
  // when some rank's buffers are not from mem_alloc.
  Choice algorithm_for(OpKind kind, size_t count, DataType type, bool in_place) const {
    return choose_for(facts_, config_, {kind, count, size_of(type), size_, in_place, facts_.hosts});
  }
  // The ring order: the rank at each position of rings, chains and trees (topo/order.hpp).
  const std::vector<int>& ring_order() const { return facts_.order; }
  // What the ranks agreed at set-up (hosts, ring order, single copy, link model).
  const SetupFacts& facts() const { return facts_; }
  // Staging memory (FIFOs) this rank holds now, in bytes. Links are connected on first use,
  // so this grows with the set of peers a program talks to: 2 links for rings and chains.
  size_t staging_bytes() const { return links_.staging_bytes(); }
  bool aborted() const { return abort_->aborted(); }
  // Collective, between calls: releases the links' own FIFOs (shared-memory files, heap) and the
  // scratch and the broadcast staging block on every rank (what mem_stats() calls suspendable);
  // calls fail until resume(), which reconnects the same links. ncclCommSuspend/Resume map onto
  // these.
  Status suspend() {
    if (suspended_) return make_error(ErrorCode::kUnsupported, "suspend on rank ", rank_, ": already suspended");
    DCOMM_RETURN_IF_ERROR(barrier().with_context("suspend"));  // no peer is still in a call with this rank
    dropped_ = links_.release_own(detail::cat(prefix_, "e", ++epoch_));
    std::vector<char>().swap(scratch_);
    staging_.release();
    suspended_ = true;
    return {};
  }
  Status resume() {
    if (!suspended_) return make_error(ErrorCode::kUnsupported, "resume on rank ", rank_, ": not suspended");
    DCOMM_RETURN_IF_ERROR(links_.connect(dropped_).with_context(detail::cat("resume on rank ", rank_)));
    suspended_ = false;
    return {};
  }
  bool suspended() const { return suspended_; }
  MemStats mem_stats() const {
    return {links_.staging_bytes(false) + scratch_.capacity() + staging_.bytes(), links_.staging_bytes(true),
            suspended_};
  }
  // Aborts this communicator on every rank: pending and later calls fail with `why`.
  void abort(const std::string& why) { abort_now(detail::cat("rank ", rank_, " called abort(): ", why)); }
  // Split, revoke, shrink and grow: comm/membership.hpp.

  // ---- collectives, raw form (counts in elements; the exchanges: comm/exchange_calls.hpp) --
  Status all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
    return execute({OpKind::kAllReduce, send, recv, count, type, op});
  }
  Work all_reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
    return execute_async({OpKind::kAllReduce, send, recv, count, type, op});
  }
  // send holds size()*recv_count elements; recv gets this rank's reduced block.
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
    return execute({OpKind::kReduceScatter, send, recv, recv_count, type, op});
  }
  Work reduce_scatter_async(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
    return execute_async({OpKind::kReduceScatter, send, recv, recv_count, type, op});
  }
  // recv holds size()*send_count elements, rank r's block at r*send_count. In place when
  // send == recv + rank()*send_count.
  Status all_gather(const void* send, void* recv, size_t send_count, DataType type) {
    return execute({OpKind::kAllGather, send, recv, send_count, type});
  }
  Work all_gather_async(const void* send, void* recv, size_t send_count, DataType type) {
    return execute_async({OpKind::kAllGather, send, recv, send_count, type});
  }
  // send is read on the root only; in place when send == recv.
  Status broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
    return execute({OpKind::kBroadcast, send, recv, count, type, ReduceOp::kSum, root});
  }
  Work broadcast_async(const void* send, void* recv, size_t count, DataType type, int root) {
    return execute_async({OpKind::kBroadcast, send, recv, count, type, ReduceOp::kSum, root});
  }
  // recv is written on the root only (and may be null elsewhere).
  Status reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
    return execute({OpKind::kReduce, send, recv, count, type, op, root});
  }
  Work reduce_async(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
    return execute_async({OpKind::kReduce, send, recv, count, type, op, root});
  }
  // Point-to-point. A lone blocking send may wait until the peer receives; to exchange with
  // a peer, put both sides in one p2p() batch (NCCL's group) or use send_recv().
  Status send(const void* buf, size_t count, DataType type, int peer) {
    return p2p({P2POp::send(buf, count, type, peer)});
  }
  Status recv(void* buf, size_t count, DataType type, int peer) { return p2p({P2POp::recv(buf, count, type, peer)}); }
  Status send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf, size_t recv_count, int src,
                   DataType type) {
    return p2p({P2POp::send(send_buf, send_count, type, dst), P2POp::recv(recv_buf, recv_count, type, src)});
  }
  Status p2p(std::vector<P2POp> ops) { return execute(OpDesc::point_to_point(std::move(ops))); }
  Work p2p_async(std::vector<P2POp> ops) { return execute_async(OpDesc::point_to_point(std::move(ops))); }
  Status barrier() { return execute({OpKind::kBarrier}); }
  Work barrier_async() { return execute_async({OpKind::kBarrier}); }

  // ---- collectives, typed form: the data type comes from the span (any extent) ------------
  template <class S, size_t SE, class R, size_t RE>
  requires detail::SameElement<S, R> Status all_reduce(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op) {
    if (send.size() != recv.size()) return size_error("all_reduce", send.size(), recv.size());
    return all_reduce(send.data(), recv.data(), recv.size(), data_type_of<R>, op);
  }
  template <class T, size_t E>
  Status all_reduce(std::span<T, E> data, ReduceOp op) {
    return all_reduce(data.data(), data.data(), data.size(), data_type_of<T>, op);
  }
  template <class T, size_t E>
  Work all_reduce_async(std::span<T, E> data, ReduceOp op) {
    return all_reduce_async(data.data(), data.data(), data.size(), data_type_of<T>, op);
  }
  template <class S, size_t SE, class R, size_t RE>
  requires detail::SameElement<S, R> Status reduce_scatter(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op) {
    if (send.size() != recv.size() * static_cast<size_t>(size_))
      return size_error("reduce_scatter", send.size(), recv.size() * static_cast<size_t>(size_));
    return reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of<R>, op);
  }
  template <class S, size_t SE, class R, size_t RE>
  requires detail::SameElement<S, R> Status all_gather(std::span<S, SE> send, std::span<R, RE> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size_))
      return size_error("all_gather", send.size() * static_cast<size_t>(size_), recv.size());
    return all_gather(send.data(), recv.data(), send.size(), data_type_of<R>);
  }
  template <class S, size_t SE, class R, size_t RE>
  requires detail::SameElement<S, R> Work all_gather_async(std::span<S, SE> send, std::span<R, RE> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size_))
      return Work::completed(size_error("all_gather", send.size() * static_cast<size_t>(size_), recv.size()));
    return all_gather_async(send.data(), recv.data(), send.size(), data_type_of<R>);
  }
  template <class T, size_t E>
  Status broadcast(std::span<T, E> data, int root) {
    return broadcast(data.data(), data.data(), data.size(), data_type_of<T>, root);
  }
  template <class S, size_t SE, class R, size_t RE>
  requires detail::SameElement<S, R> Status reduce(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op,
                                                   int root) {
    if (rank_ == root && send.size() != recv.size()) return size_error("reduce", send.size(), recv.size());
    return reduce(send.data(), recv.data(), send.size(), data_type_of<R>, op, root);
  }
  template <class T, size_t E>
  Status send(std::span<T, E> data, int peer) {
    return send(data.data(), data.size(), data_type_of<std::remove_const_t<T>>, peer);
  }
  template <class T, size_t E>
  Status recv(std::span<T, E> data, int peer) {
    return recv(data.data(), data.size(), data_type_of<T>, peer);
  }

 private:
  friend class MembershipCalls<Communicator>;
  Communicator() = default;

  void abort_now(const std::string& message) {
    // The reason first, when this is the abort that tells the peers (not one after an earlier).
    if (abort_->abort(make_error(ErrorCode::kAborted, message)))
      if (auto* proxy = transports_.proxy.get()) proxy->wait_abort_sent(std::chrono::seconds(1));
  }

  static Status size_error(const char* op, size_t send, size_t recv) {
    return invalid_argument(op, ": the send span implies ", send, " elements but the receive span has ", recv);
  }

  static Result<std::unique_ptr<Communicator>> create(int rank, int size, const SocketAddress& rendezvous,
                                                      const std::string& prefix, const Config& config,
                                                      std::shared_ptr<StoreServer> server, const StoreAccess& access,
                                                      int port_span = 1) {
    if (size < 1) return invalid_argument("communicator size ", size, " must be at least 1");
    if (rank < 0 || rank >= size) return invalid_argument("rank ", rank, " is out of range for ", size, " ranks");
    std::unique_ptr<Communicator> c(new Communicator());
    c->access_ = access;
    Status s = c->bootstrap(rank, size, rendezvous, port_span, prefix, config, std::move(server));
    if (!s.ok()) {
      // A rank that gave up first is the cause (this one may only have tripped over what it
      // left, a FIFO it removed, say); else this rank's failure is, and the others, which may
      // be waiting for it in set-up, learn it from the store at once.
      if (c->store_ && s.code() != ErrorCode::kAborted)
        if (Status first = c->setup_abort(); !first.ok()) s = first;
      s = s.with_context(detail::cat("init of rank ", rank, " of ", size));
      if (c->store_ && s.code() != ErrorCode::kAborted)
        c->store_->set(prefix + "/abort", detail::cat("rank ", rank, " gave up during set-up: ", s.message())).ignore();
      c->linger_for_peers();
      return s;
    }
    return c;
  }

  Status bootstrap(int rank, int size, const SocketAddress& rendezvous, int port_span, const std::string& prefix,
                   const Config& config, std::shared_ptr<StoreServer> server) {
    rank_ = rank, size_ = size, prefix_ = prefix, config_ = config, server_ = std::move(server);
    config_.slots = fifo_slots(config, size);  // deeper at scale, for the double tree
    config_.small_slots = std::max(config_.small_slots, config_.slots);
    auto store = StoreClient::connect(rendezvous, config.timeout, access_, port_span);
    if (!store.ok()) return store.status();
    store_ = std::move(*store);
    store_->set_abort_key(prefix + "/abort");

    std::string ip = config.socket_ifname.empty() ? store_->local_address() : "";
    if (!config.socket_ifname.empty()) {
      auto i = interface_ip(config.socket_ifname);
      if (!i.ok()) return i.status();
      ip = *i;
    }
    // The mesh listens on the address it publishes, not on every interface.
    auto listener = listen_on({ip, 0});
    if (!listener.ok()) return listener.status();
    auto spare = hold_spare_port(ip);
    if (!spare.ok()) return spare.status();
    PeerInfo self = make_self_info(rank, detail::cat(ip, ":", bound_port(listener->fd())), *spare);
    auto peers = exchange_roster(*store_, prefix, size, self);
    if (!peers.ok()) return peers.status();
    peers_ = std::move(*peers);
    for (const auto& p : peers_) {
      if (p.host_id != self.host_id) continue;
      if (p.rank < rank) ++local_rank_;
      ++local_size_;
    }
    number_hosts(facts_, peers_, config_);
    auto kinds = choose_transports(rank_, peers_, config_);
    if (!kinds.ok()) return kinds.status();
    kinds_ = std::move(*kinds);
    resolve_auto_spin(config_, local_size_, kinds_);

    DCOMM_RETURN_IF_ERROR(agree_facts(facts_, {rank_, local_size_, peers_, kinds_, *store_, prefix_, config_}));
    auto sweep =
        agree_host_tuning(config_, {rank_, size_, *store_, prefix_, facts_.single_copy, peers_, facts_.link.load});
    if (!sweep.ok()) return sweep.status();

    DCOMM_RETURN_IF_ERROR(build_transports(transports_, rank, peers_, kinds_, *store_, prefix, config_,
                                           {*listener, std::hash<std::string>{}(prefix), access_.secret, abort_,
                                            [this]() -> Status { return setup_abort(); }}));
    links_.init({rank_, &peers_, &kinds_, &config_, store_.get(), prefix_, abort_, &call_stamp_, &fanout_},
                transports_.table(rank_, kinds_));
    fanout_.join(prefix_, rank_, &peers_, abort_, transports_.proxy.get());
    fanout_.tell_store(store_->server_address(), access_, store_->abort_key());
    abort_->set_hook([this](const Status& why) { fanout_.fan_out(why); });
    // The ring neighbours are connected now, so setup problems (a full /dev/shm) surface here.
    const int next = facts_.at_position(facts_.pos + 1), prev = facts_.at_position(facts_.pos - 1);
    if (size > 1) DCOMM_RETURN_IF_ERROR(links_.connect({next, prev}));
    DCOMM_LOG(kInfo, kSubsysInit, rank_, "rank ", rank_, " of ", size_, " ready (local rank ", local_rank_, " of ",
              local_size_, "); next rank ", next, " via ", transport_to(next));
    if (rank_ == 0) {
      std::string ring;
      for (int r : facts_.order) ring += detail::cat(" ", r);
      DCOMM_LOG(kInfo, kSubsysInit, rank_, "ring order (ranks by host, NUMA node, device):", ring);
    }
    const RunCollective forced = [this](const OpDesc& d, std::optional<Algorithm> a) { return run(d, a); };
    Status tuned = tune_link_model(facts_.link, rank_, size_, forced);
    if (tuned.ok() && *sweep) tuned = tune_shape(config_, facts_, rank_, **sweep, forced);
    choices_.clear();  // chosen with the link model and thresholds before tuning
    return tuned;
  }

  Status execute(const OpDesc& d) {
    detail::CallGuard guard(in_call_);
    if (!guard.entered()) return guard.refusal(to_string(d.kind), rank_);
    DCOMM_RETURN_IF_ERROR(precheck(d));
    return executor_.run_blocking([this, &d] { return run(d); });
  }
  Work execute_async(OpDesc d) {
    detail::CallGuard guard(in_call_);
    if (!guard.entered()) return Work::completed(guard.refusal(to_string(d.kind), rank_));
    Status s = precheck(d);
    if (!s.ok()) return Work::completed(s);
    return executor_.submit([this, d = std::move(d)] { return run(d); });
  }
  // A failed set-up on the rank that serves the store: the other ranks learn why from it, so
  // it stays up until they have left it (at most 2 s).
  void linger_for_peers() {
    if (!server_) return;
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (server_->counters().clients > (store_ ? 1u : 0u) && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // A rank that gave up during set-up left its reason in the store (ok when none did, or
  // when the store cannot say).
  Status setup_abort() {
    auto set = store_->check(prefix_ + "/abort");
    if (!set.ok() || !*set) return {};
    auto why = store_->get(prefix_ + "/abort");
    return make_error(ErrorCode::kAborted, why.ok() ? *why : why.status().message());
  }
  Status precheck(const OpDesc& d) const {
    Status s = validate(d, rank_, size_);
    if (s.ok() && abort_->aborted()) s = abort_->status().with_context("the communicator was aborted earlier");
    if (s.ok() && suspended_)
      s = make_error(ErrorCode::kUnsupported, "the communicator is suspended; resume() it first");
    if (!s.ok()) return s.with_context(detail::cat(to_string(d.kind), " on rank ", rank_));
    return {};
  }

  // Runs one call on this thread; a failure once data may have moved aborts the communicator.
  // Resource refusals (kOutOfResources: the staging bound, a full /dev/shm) come before this
  // rank sends anything, so they fail the call and abort nothing.
  // forced: the algorithm, instead of the choice (tuning.hpp's measurements).
  Status run(const OpDesc& d, std::optional<Algorithm> forced = std::nullopt) {
    Status s = dispatch(d, forced);
    abort_->end_call();
    if (s.ok()) return s;
    if (auto* proxy = transports_.proxy.get(); proxy && s.code() == ErrorCode::kTimeout)
      s = proxy->blame_silent_peers(s, config_.timeout);
    s = s.with_context(detail::cat(to_string(d.kind), " on rank ", rank_));
    if (!abort_->aborted() && s.code() != ErrorCode::kOutOfResources) abort_->abort(s);
    if (abort_->aborted() && transports_.proxy) transports_.proxy->quiesce();  // no wire reads the buffers after
    return s;
  }

  // A call begins: peers that ask see its stamp, and the proxy polls until it ends.
  void begin_call(const CallStamp& stamp) {
    call_stamp_ = stamp;
    abort_->publish_call(call_stamp_, true);
    if (transports_.proxy) transports_.proxy->call_began();
  }
  Status dispatch(const OpDesc& d, std::optional<Algorithm> forced) {
    if (abort_->aborted()) return abort_->status();
    if (d.kind == OpKind::kPointToPoint) {
      DCOMM_RETURN_IF_ERROR(links_.connect_missing(d.p2p.size(), [&](size_t i) { return d.p2p[i].peer; }));
      DCOMM_LOG(kTrace, kSubsysP2P, rank_, "batch of ", d.p2p.size(), " send/recv");
      begin_call(call_stamp(OpKind::kPointToPoint, DataType::kUint8, ReduceOp::kSum, d.p2p.size(), 0, 0));
      // Where every rank can read every other, a message may go single copy, its receiver
      // copying from the sender's buffer (algorithm_choice.hpp's pull_rule).
      const PullRule pull = facts_.single_copy ? pull_rule(config_, size_, facts_.link) : PullRule{};
      return run_p2p(d.p2p, rank_, links_.by_rank(), config_, /*message_stamps=*/true, &scratch_, pull);
    }
    // Every slot of this call carries its stamp; the collectives are numbered alike on every rank.
    begin_call(call_stamp(d.kind, d.type, d.op, d.count, d.root, call_seq_++));
    if (d.kind == OpKind::kBarrier) {
      uint8_t token = 0, out = 0;
      return dispatch_collective(context(), {OpKind::kAllReduce, &token, &out, 1, DataType::kUint8, ReduceOp::kMax},
                                 std::nullopt);
    }
    return dispatch_collective(context(), d, forced);
  }
  DispatchContext context() { return {rank_, facts_, config_, links_, scratch_, choices_, staging_}; }

  std::vector<char> scratch_;  // working memory of the schedules over all peers, reused
  ChoiceCache choices_;        // the algorithm chosen for recent call shapes
  StagingBlock staging_;       // what a broadcast root stages for its peers to map
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 0;
  std::string prefix_;
  Config config_;
  std::shared_ptr<StoreServer> server_;  // keeps a store hosted here alive for splits
  std::unique_ptr<StoreClient> store_;
  std::vector<PeerInfo> peers_;
  std::vector<TransportChoice> kinds_;
  std::shared_ptr<AbortState> abort_ = std::make_shared<AbortState>();
  HostTransports transports_;  // the transports and the proxy thread (comm/links.hpp)
  SetupFacts facts_;           // what the ranks agreed at set-up (comm/facts.hpp)
  LinkTable links_;            // the links to the peers (comm/link_table.hpp)
  AbortFanout fanout_;         // how an abort reaches every rank, and who is in which call (comm/abort_fanout.hpp)
  bool suspended_ = false;
  int epoch_ = 0;                     // suspensions so far: later links connect under a new key prefix
  std::vector<int> dropped_;          // the links suspend() released, for resume()
  StoreAccess access_;                // the job secret and tag every connection of this communicator uses
  CallStamp call_stamp_;              // the call in progress, as its slots carry it (PeerPort reads it)
  uint32_t call_seq_ = 0;             // collectives so far: the same count on every rank
  std::atomic<bool> in_call_{false};  // a thread is inside a call (detail::CallGuard)
  Executor executor_;                 // last: its worker is joined before anything it uses is destroyed
};

DCOMM_NAMESPACE_END
