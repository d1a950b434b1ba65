// Communicator: one rank's membership in a group. It owns the bootstrap (store and roster),
// the transports to each peer, the proxy thread, the staging FIFOs and the worker that runs
// asynchronous calls; it checks each call's arguments and picks the algorithm.
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

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "dcomm/algo/chain.hpp"
#include "dcomm/algo/direct.hpp"
#include "dcomm/algo/hierarchical.hpp"
#include "dcomm/algo/ordered.hpp"
#include "dcomm/algo/p2p.hpp"
#include "dcomm/algo/recursive.hpp"
#include "dcomm/algo/ring.hpp"
#include "dcomm/algo/single_copy.hpp"
#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/bootstrap/roster.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/links.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/comm/work.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/prims/primitives.hpp"
#include "dcomm/reduce/host_reducer.hpp"
#include "dcomm/topo/order.hpp"
#include "dcomm/transport/inproc.hpp"
#include "dcomm/transport/mesh.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/shm.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// Ranks of one communicator that are threads of this process, by the communicator's key,
// so an abort reaches them without a socket.
struct LocalGroups {
  std::mutex mu;
  std::map<std::string, std::map<int, std::weak_ptr<AbortState>>> groups;
};
inline LocalGroups& local_groups() {
  static LocalGroups g;
  return g;
}

template <class S, class R>
concept SameElement = std::same_as<std::remove_const_t<S>, R>;

// One thread at a time in a communicator's calls: a second thread that enters while a call is
// in progress gets an error that says so, instead of corrupting the first call. One atomic
// exchange on entry, one store on the way out.
class CallGuard {
 public:
  explicit CallGuard(std::atomic<bool>& busy) : busy_(busy), entered_(!busy.exchange(true, std::memory_order_acquire)) {}
  ~CallGuard() {
    if (entered_) busy_.store(false, std::memory_order_release);
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;
  bool entered() const { return entered_; }
  static Status refusal(const char* what, int rank) {
    return invalid_argument(what, " on rank ", rank, ": another thread is inside a call on this communicator; a ",
                            "communicator is driven by one thread at a time (use one communicator per thread, or "
                            "the *_async calls from one thread)");
  }

 private:
  std::atomic<bool>& busy_;
  bool entered_;
};
}  // namespace detail

class Communicator {
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
                                                   launch->rendezvous.port, " (set DCOMM_COMM_ID=host:port to a free port)"));
      server = detail::claim_store((*s)->address().port);
    } else if (launch->nonce) {
      server = detail::claim_store(launch->rendezvous);
    }
    auth::note_unauthenticated(launch->access.secret, launch->rank, detail::cat(launch->launcher, " start").c_str());
    static std::atomic<int> env_count{0};
    std::string prefix = launch->nonce ? hex(launch->nonce) : detail::cat("env", env_count++);
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
    return create(rank, size, id.address, hex(id.nonce), config, detail::claim_store(id.address), {id.secret, {}});
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

  // MPI_Comm_split / ncclCommSplit: collective over this communicator. Ranks with the same
  // color form a new communicator, ordered by (key, old rank). A negative color joins
  // none and yields a null pointer.
  Result<std::unique_ptr<Communicator>> split(int color, int key) {
    int32_t mine[2] = {color, key};
    std::vector<int32_t> all(2 * static_cast<size_t>(size_));
    Status s = all_gather(mine, all.data(), 2, DataType::kInt32);
    if (!s.ok()) return s.with_context("split");
    int seq = split_count_++;
    if (color < 0) return std::unique_ptr<Communicator>();
    std::vector<std::pair<int, int>> members;  // (key, old rank)
    for (int r = 0; r < size_; ++r)
      if (all[2 * static_cast<size_t>(r)] == color) members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
    std::sort(members.begin(), members.end());
    int new_rank = static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(key, rank_)) - members.begin());
    std::string prefix = detail::cat(prefix_, "s", seq, "c", color);
    return create(new_rank, static_cast<int>(members.size()), store_->server_address(), prefix, config_, server_, access_);
  }

  ~Communicator() {
    executor_.shutdown();
    // A clean goodbye only from a healthy communicator: after an abort, peers must learn the
    // abort's cause (sent over the control sockets), not that this rank left.
    if (!abort_->aborted())
      for (auto& p : ports_)
        if (p) p->connection().close();
    if (proxy_) proxy_->stop(config_.timeout);
    std::lock_guard<std::mutex> lock(detail::local_groups().mu);
    auto& groups = detail::local_groups().groups;
    if (auto it = groups.find(prefix_); it != groups.end()) {
      it->second.erase(rank_);
      if (it->second.empty()) groups.erase(it);
    }
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
  const char* transport_to(int r) const {
    if (r < 0 || r >= size_) return "none";
    return transports_[static_cast<size_t>(r)] ? transports_[static_cast<size_t>(r)]->name() : "self";
  }
  const Config& config() const { return config_; }
  // The algorithm a collective of this shape runs here, and why (as DCOMM_DEBUG_SUBSYS=TUNING
  // logs it): the same on every rank. kSingleCopyIfRegistered still falls back to the ring
  // when some rank's buffers are not from mem_alloc.
  Choice algorithm_for(OpKind kind, size_t count, DataType type, bool in_place) const {
    return choose({kind, count, size_of(type), size_, in_place, hosts_});
  }
  // The ring order: the rank at each position of rings, chains and trees (topo/order.hpp).
  const std::vector<int>& ring_order() const { return order_; }
  // Staging memory (FIFOs) this rank holds now, in bytes. Links are connected on first use,
  // so this grows with the set of peers a program talks to: 2 links for rings and chains.
  size_t staging_bytes() const {
    size_t total = 0;
    for (const auto& p : ports_)
      if (p) total += p->connection().staging_bytes();
    return total;
  }
  bool aborted() const { return abort_->aborted(); }
  // Aborts this communicator on every rank: pending and later calls fail with `why`.
  void abort(const std::string& why) { abort_->abort(make_error(ErrorCode::kAborted, "rank ", rank_, " called abort(): ", why)); }

  // ---- collectives, raw form (counts in elements) -----------------------------------------
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
  Status send(const void* buf, size_t count, DataType type, int peer) { return p2p({P2POp::send(buf, count, type, peer)}); }
  Status recv(void* buf, size_t count, DataType type, int peer) { return p2p({P2POp::recv(buf, count, type, peer)}); }
  Status send_recv(const void* send_buf, size_t send_count, int dst, void* recv_buf, size_t recv_count, int src,
                   DataType type) {
    return p2p({P2POp::send(send_buf, send_count, type, dst), P2POp::recv(recv_buf, recv_count, type, src)});
  }
  Status p2p(std::vector<P2POp> ops) { return execute(p2p_desc(std::move(ops))); }
  Work p2p_async(std::vector<P2POp> ops) { return execute_async(p2p_desc(std::move(ops))); }
  Status barrier() { return execute({OpKind::kBarrier}); }
  Work barrier_async() { return execute_async({OpKind::kBarrier}); }

  // ---- collectives, typed form: the data type comes from the span (any extent) ------------
  template <class S, size_t SE, class R, size_t RE>
    requires detail::SameElement<S, R>
  Status all_reduce(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op) {
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
    requires detail::SameElement<S, R>
  Status reduce_scatter(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op) {
    if (send.size() != recv.size() * static_cast<size_t>(size_))
      return size_error("reduce_scatter", send.size(), recv.size() * static_cast<size_t>(size_));
    return reduce_scatter(send.data(), recv.data(), recv.size(), data_type_of<R>, op);
  }
  template <class S, size_t SE, class R, size_t RE>
    requires detail::SameElement<S, R>
  Status all_gather(std::span<S, SE> send, std::span<R, RE> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size_))
      return size_error("all_gather", send.size() * static_cast<size_t>(size_), recv.size());
    return all_gather(send.data(), recv.data(), send.size(), data_type_of<R>);
  }
  template <class S, size_t SE, class R, size_t RE>
    requires detail::SameElement<S, R>
  Work all_gather_async(std::span<S, SE> send, std::span<R, RE> recv) {
    if (recv.size() != send.size() * static_cast<size_t>(size_))
      return Work::completed(size_error("all_gather", send.size() * static_cast<size_t>(size_), recv.size()));
    return all_gather_async(send.data(), recv.data(), send.size(), data_type_of<R>);
  }
  template <class T, size_t E>
  Status broadcast(std::span<T, E> data, int root) {
    return broadcast(data.data(), data.data(), data.size(), data_type_of<T>, root);
  }
  template <class S, size_t SE, class R, size_t RE>
    requires detail::SameElement<S, R>
  Status reduce(std::span<S, SE> send, std::span<R, RE> recv, ReduceOp op, int root) {
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
  Communicator() = default;

  static std::string hex(uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return buf;
  }
  static Status size_error(const char* op, size_t send, size_t recv) {
    return invalid_argument(op, ": the send span implies ", send, " elements but the receive span has ", recv);
  }
  static OpDesc p2p_desc(std::vector<P2POp> ops) {
    OpDesc d{OpKind::kPointToPoint};
    d.p2p = std::move(ops);
    return d;
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
    PeerInfo self = make_self_info(rank, detail::cat(ip, ":", bound_port(listener->fd())));
    auto peers = exchange_roster(*store_, prefix, size, self);
    if (!peers.ok()) return peers.status();
    peers_ = std::move(*peers);
    for (const auto& p : peers_) {
      if (p.host_id != self.host_id) continue;
      if (p.rank < rank) ++local_rank_;
      ++local_size_;
    }
    // Hosts numbered in order of their first rank (DCOMM_TEST_RANKS_PER_HOST and
    // DCOMM_TEST_CYCLIC_HOSTS pretend).
    std::vector<std::string> hosts;
    for (const auto& p : peers_) {
      std::string id = config_.test_ranks_per_host > 0 ? std::to_string(p.rank / config_.test_ranks_per_host)
                       : config_.test_cyclic_hosts > 0 ? std::to_string(p.rank % config_.test_cyclic_hosts)
                                                       : p.host_id;
      auto at = std::find(hosts.begin(), hosts.end(), id);
      if (at == hosts.end()) at = hosts.insert(at, id);
      host_of_.push_back(static_cast<int>(at - hosts.begin()));
    }
    hosts_ = host_of_.empty() ? 1 : *std::max_element(host_of_.begin(), host_of_.end()) + 1;
    DCOMM_RETURN_IF_ERROR(choose_transports());
    if (config_.spin_iterations < 0) {
      cpu_set_t cpus;
      CPU_ZERO(&cpus);
      int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
      config_.spin_iterations = local_size_ > cores ? 16 : 2000;
    }

    DCOMM_RETURN_IF_ERROR(agree_on_host_facts());

    MeshPlan plan{std::vector<bool>(static_cast<size_t>(size)), std::vector<int>(static_cast<size_t>(size))};
    bool need_proxy = false;
    for (int p = 0; p < size; ++p) {
      size_t up = static_cast<size_t>(p);
      plan.control[up] = p != rank && peers_[up].process_id != self.process_id;
      plan.data_sockets[up] = kinds_[up] == TransportChoice::kTcp ? config.sockets_per_peer : 0;
      need_proxy |= plan.control[up] || proxied(kinds_[up]);
    }
    uint64_t nonce = std::hash<std::string>{}(prefix);
    auto mesh = build_mesh(rank, nonce, peers_, plan, *listener, config.timeout, access_.secret,
                           [this]() -> Status { return setup_abort(); });
    if (!mesh.ok()) return mesh.status();
    if (need_proxy) {
      proxy_ = std::make_unique<Proxy>(rank, peers_, abort_);
      std::vector<ProxyLink*> links(static_cast<size_t>(size), nullptr);
      for (int p = 0; p < size; ++p) {
        size_t up = static_cast<size_t>(p);
        if (mesh->control[up].valid()) proxy_->add_control(p, std::move(mesh->control[up]));
        if (plan.data_sockets[up])
          links[up] = proxy_->add_link(std::make_unique<TcpLink>(p, std::move(mesh->data[up]), config));
      }
      tcp_ = std::make_unique<ProxiedTransport>("tcp", proxy_.get(), std::move(links));
      const LinkContext links_ctx{rank_, peers_, kinds_, *store_, prefix_, config_, *proxy_};
      auto ucx = make_ucx_links(links_ctx);
      if (!ucx.ok()) return ucx.status();
      auto verbs = make_verbs_links(links_ctx);
      if (!verbs.ok()) return verbs.status();
      ucx_ = std::move(*ucx), verbs_ = std::move(*verbs);
      proxy_->start();
    }
    for (int p = 0; p < size; ++p) {
      size_t up = static_cast<size_t>(p);
      if (p == rank) continue;
      transports_[up] = kinds_[up] == TransportChoice::kInproc ? static_cast<Transport*>(&inproc_)
                        : kinds_[up] == TransportChoice::kShm  ? static_cast<Transport*>(&shm_)
                        : kinds_[up] == TransportChoice::kUcx  ? static_cast<Transport*>(ucx_.get())
                        : kinds_[up] == TransportChoice::kVerbs ? static_cast<Transport*>(verbs_.get())
                                                               : static_cast<Transport*>(tcp_.get());
    }
    {
      std::lock_guard<std::mutex> lock(detail::local_groups().mu);
      detail::local_groups().groups[prefix_][rank_] = abort_;
    }
    abort_->set_hook([this](const Status& why) { on_abort(why); });
    // The ring neighbours are connected now, so setup problems (a full /dev/shm) surface here.
    const int next = at_position(pos_ + 1), prev = at_position(pos_ - 1);
    if (size > 1) DCOMM_RETURN_IF_ERROR(connect_peers({next, prev}));
    DCOMM_LOG(kInfo, kSubsysInit, rank_, "rank ", rank_, " of ", size_, " ready (local rank ", local_rank_, " of ",
              local_size_, "); next rank ", next, " via ", transport_to(next));
    if (rank_ == 0) {
      std::string ring;
      for (int r : order_) ring += detail::cat(" ", r);
      DCOMM_LOG(kInfo, kSubsysInit, rank_, "ring order (ranks by host, NUMA node, device):", ring);
    }
    return tune_link_model();
  }

  // DCOMM_LINK_MODEL=measure: time the ring at start (8 B and 4 MiB all_reduce, 4 MiB
  // all_gather) and fit the cost model's step latency and per-byte costs to it; every rank
  // takes the largest (slowest) value of each, so all agree. DCOMM_LINK_MODEL_FILE=f reads
  // them from f when f was written for the same ranks per core, else measures and writes f.
  Status tune_link_model() {
    const std::string mode = env_or("DCOMM_LINK_MODEL", "default"), file = env_or("DCOMM_LINK_MODEL_FILE");
    if (mode != "default" && mode != "measure")
      return invalid_argument("DCOMM_LINK_MODEL='", mode, "' is not one of default, measure");
    if (size_ < 2 || (mode == "default" && file.empty())) return {};
    const double load = link_.alpha_us / LinkModel{}.alpha_us;  // for_load's factor: identifies the setting
    double fit[3] = {0, 0, 0};  // alpha_us, beta_us_per_byte, gamma_us_per_byte
    bool loaded = false;
    if (!file.empty()) {
      std::ifstream in(file);
      std::string line;
      std::getline(in, line);
      if (auto f = parse_link_model(line); f && std::abs(f->load - load) < 1e-9) {
        fit[0] = f->alpha_us, fit[1] = f->beta_us_per_byte, fit[2] = f->gamma_us_per_byte;
        loaded = true;
      }
    }
    // Every rank must agree whether to measure: the file may exist on some hosts only.
    uint8_t need = loaded ? 0 : 1, any_need = 0;
    DCOMM_RETURN_IF_ERROR(all_reduce(&need, &any_need, 1, DataType::kUint8, ReduceOp::kMax));
    if (any_need) DCOMM_RETURN_IF_ERROR(measure_link(fit));
    double agreed[3];
    DCOMM_RETURN_IF_ERROR(all_reduce(fit, agreed, 3, DataType::kFloat64, ReduceOp::kMax));
    link_.alpha_us = agreed[0], link_.beta_us_per_byte = agreed[1], link_.gamma_us_per_byte = agreed[2];
    if (any_need && !file.empty() && rank_ == 0) {
      std::ofstream(file) << format_link_model({load, agreed[0], agreed[1], agreed[2]});
    }
    DCOMM_LOG(kInfo, kSubsysTuning, rank_, any_need ? "measured" : "loaded", " link model: step ", link_.alpha_us,
              " us, ", 1e-3 / link_.beta_us_per_byte, " GB/s a link, reduction ", 1e-3 / link_.gamma_us_per_byte, " GB/s");
    return {};
  }
  Status measure_link(double fit[3]) {
    const auto saved = config_.algo;
    config_.algo[algo_index(OpKind::kAllReduce)] = "ring";
    config_.algo[algo_index(OpKind::kAllGather)] = "ring";
    const size_t big = 4u << 20;
    std::vector<char> in(big, 0), out(big, 0);  // the all_gather's output is `big` too (big / size per rank)
    // The best of three means: start-up noise (ranks still starting) only slows a run down.
    auto mean_us = [&](int iters, auto&& call) -> Result<double> {
      DCOMM_RETURN_IF_ERROR(call());  // warm-up
      double best = 1e300;
      for (int round = 0; round < 3; ++round) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) DCOMM_RETURN_IF_ERROR(call());
        best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
      }
      return best;
    };
    auto small = mean_us(100, [&] { return all_reduce(in.data(), out.data(), 2, DataType::kFloat32, ReduceOp::kSum); });
    auto reduce = mean_us(2, [&] { return all_reduce(in.data(), out.data(), big / 4, DataType::kFloat32, ReduceOp::kSum); });
    auto gather = mean_us(2, [&] { return all_gather(in.data(), out.data(), big / static_cast<size_t>(size_), DataType::kUint8); });
    config_.algo = saved;
    for (const Status& s : {small.status(), reduce.status(), gather.status()})
      if (!s.ok()) return s.with_context("measuring the links (DCOMM_LINK_MODEL)");
    const double n = size_, S = static_cast<double>(big);
    fit[0] = *small / (2 * (n - 1));                                            // ring: 2(n-1) steps
    fit[1] = std::max(1e-9, (*gather - (n - 1) * fit[0]) / ((n - 1) / n * S));  // all_gather: bytes only
    fit[2] = std::max(1e-9, (*reduce - 2 * (n - 1) * fit[0] - 2 * (n - 1) / n * S * fit[1]) / ((n - 1) / n * S));
    return {};
  }

  Status choose_transports() {
    auto kinds = dcomm::choose_transports(rank_, peers_, config_);
    if (!kinds.ok()) return kinds.status();
    kinds_ = std::move(*kinds);
    transports_.assign(static_cast<size_t>(size_), nullptr);
    ports_.resize(static_cast<size_t>(size_));
    return {};
  }

  // Rings, chains and trees run over positions in this order (topo/order.hpp).
  void set_order(std::vector<int> order) {
    order_ = std::move(order);
    pos_of_ = positions_of(order_);
    pos_ = pos_of_[static_cast<size_t>(rank_)];
    host_at_.resize(order_.size());
    for (size_t p = 0; p < order_.size(); ++p) host_at_[p] = host_of_[static_cast<size_t>(order_[p])];
  }
  int at_position(int p) const { return order_[static_cast<size_t>(detail::mod(p, size_))]; }

  // Facts every rank must agree on, collected through the store: whether single copy works
  // (every rank on this host, over shared memory or threads, and able to read every other;
  // each rank probes its peers) and the most ranks per core on any host (the cost model's link
  // parameters depend on it).
  Status agree_on_host_facts() {
    if (size_ < 2) {
      set_order({0});
      return {};
    }
    bool ok = config_.cma_bytes != 0 || config_.cma_reduce_bytes != 0;
    for (int p = 0; p < size_ && ok; ++p) {
      if (p == rank_) continue;
      const PeerInfo& peer = peers_[static_cast<size_t>(p)];
      bool same_process = peer.process_id == peers_[static_cast<size_t>(rank_)].process_id;
      ok = !proxied(kinds_[static_cast<size_t>(p)]) &&
           can_read_process(peer.pid, same_process, peer.probe_addr);
    }
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    const int load_milli = local_size_ * 1000 / std::max(cores, 1);
    DCOMM_RETURN_IF_ERROR(store_->set(detail::cat(prefix_, "/facts/", rank_),
                                      detail::cat(ok ? 1 : 0, " ", load_milli, " ", numa_node_of_this_thread())));
    single_copy_ = true;
    int max_load_milli = 0;
    std::vector<RankPlace> places(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      auto v = store_->get(detail::cat(prefix_, "/facts/", p));
      if (!v.ok()) return v.status();
      int verdict = 0, load = 0, numa = -1;
      if (std::sscanf(v->c_str(), "%d %d %d", &verdict, &load, &numa) != 3)
        return make_error(ErrorCode::kInternal, "rank ", p, " published unreadable host facts '", *v, "'");
      single_copy_ = single_copy_ && verdict == 1;
      max_load_milli = std::max(max_load_milli, load);
      places[static_cast<size_t>(p)].host = host_of_[static_cast<size_t>(p)];
      places[static_cast<size_t>(p)].numa = numa;
    }
    set_order(dcomm::ring_order(places));
    link_ = LinkModel::for_load(max_load_milli / 1000.0);
    DCOMM_LOG(kInfo, kSubsysInit, rank_, "single-copy (cross-memory attach) ", single_copy_ ? "on" : "off",
              "; up to ", max_load_milli / 1000.0, " ranks per core: step latency modelled as ", link_.alpha_us, " us");
    return {};
  }

  // Prepares every link first, then connects each: see Transport::prepare.
  Status connect_peers(std::vector<int> want) {
    std::erase_if(want, [&](int p) { return p == rank_ || ports_[static_cast<size_t>(p)]; });
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    // Every link holds about one FIFO here (TCP: two); refuse before allocating past the bound.
    size_t per_link = fifo_bytes(config_.slot_bytes, static_cast<size_t>(config_.slots));
    size_t after = staging_bytes();
    for (int p : want) after += per_link * (proxied(kinds_[static_cast<size_t>(p)]) ? 2 : 1);
    if (!want.empty() && after > config_.max_staging_bytes)
      return make_error(ErrorCode::kOutOfResources, "connecting to ", want.size(), " more peer(s) would raise this rank's ",
                        "staging memory to ", after >> 20, " MiB, over DCOMM_MAX_STAGING_BYTES (",
                        config_.max_staging_bytes >> 20, " MiB); raise it, or lower DCOMM_SLOT_BYTES / DCOMM_SLOTS");
    auto ctx = [&](int p) {
      return ConnectContext{rank_, &peers_[static_cast<size_t>(rank_)], &peers_[static_cast<size_t>(p)], &config_,
                            store_.get(), prefix_, abort_};
    };
    for (int p : want)
      DCOMM_RETURN_IF_ERROR(transports_[static_cast<size_t>(p)]->prepare(ctx(p)).with_context(
          detail::cat("connecting to ", peers_[static_cast<size_t>(p)].describe())));
    for (int p : want) {
      auto conn = transports_[static_cast<size_t>(p)]->connect(ctx(p));
      if (!conn.ok()) return conn.status();
      const PeerInfo& peer = peers_[static_cast<size_t>(p)];
      ports_[static_cast<size_t>(p)] = std::make_unique<PeerPort>(
          std::move(*conn), &peer, abort_.get(), &config_,
          peer.process_id == peers_[static_cast<size_t>(rank_)].process_id, &call_stamp_, rank_, &directory_);
      DCOMM_LOG(kInfo, kSubsysTransport, rank_, "connected to ", peers_[static_cast<size_t>(p)].describe(), " via ",
                transports_[static_cast<size_t>(p)]->name());
    }
    return {};
  }

  void on_abort(const Status& why) {
    DCOMM_LOG(kWarn, kSubsysInit, rank_, "communicator aborted: ", why.message());
    if (proxy_) proxy_->broadcast_abort(why);
    std::vector<std::shared_ptr<AbortState>> local;
    {
      std::lock_guard<std::mutex> lock(detail::local_groups().mu);
      for (auto& [r, weak] : detail::local_groups().groups[prefix_])
        if (auto a = weak.lock(); a && r != rank_) local.push_back(a);
    }
    for (auto& a : local)
      a->abort(make_error(remote_abort_code(why.code()), peers_[static_cast<size_t>(rank_)].describe(),
                          " aborted the communicator: ", why.message()),
               /*notify_peers=*/false);
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
    if (!s.ok()) return s.with_context(detail::cat(to_string(d.kind), " on rank ", rank_));
    return {};
  }

  // Runs one call on this thread; a failure once data may have moved aborts the communicator.
  // Resource refusals (kOutOfResources: the staging bound, a full /dev/shm) come before this
  // rank sends anything, so they fail the call and abort nothing.
  Status run(const OpDesc& d) {
    Status s = dispatch(d);
    abort_->end_call();
    if (s.ok()) return s;
    if (s.code() == ErrorCode::kTimeout) s = blame_silent_peers(s);
    if (!abort_->aborted() && s.code() != ErrorCode::kOutOfResources)
      abort_->abort(s.with_context(detail::cat(to_string(d.kind), " on rank ", rank_)));
    return s.with_context(detail::cat(to_string(d.kind), " on rank ", rank_));
  }

  // A wait reached its deadline. The peer it waited for may itself be waiting for a rank that
  // stopped (SIGSTOP, a hang, a dead host): the ranks whose heartbeats stopped are the ones to
  // name, and every survivor sees the same silence, so all name the same ranks.
  Status blame_silent_peers(const Status& timeout) const {
    if (!proxy_) return timeout;
    const auto silence = std::chrono::milliseconds(
        std::max<long long>(4 * kHeartbeatMs, std::min<long long>(config_.timeout.count() / 2, 5000)));
    const auto stale = proxy_->stale_peers(silence);
    if (stale.empty()) return timeout;
    std::string who;
    for (const auto& [p, ms] : stale)
      who += detail::cat(who.empty() ? "" : "; ", peers_[static_cast<size_t>(p)].describe(), ": nothing from it for ", ms,
                         " ms");
    return make_error(ErrorCode::kPeerFailure, stale.size() == 1 ? "a rank stopped responding (" : "ranks stopped responding (",
                      who, "): stopped, hung or cut off; while this rank waited: ", timeout.message());
  }

  Status dispatch(const OpDesc& d) {
    if (abort_->aborted()) return abort_->status();
    if (d.kind == OpKind::kPointToPoint) {
      std::vector<int> peers;
      for (const auto& op : d.p2p) peers.push_back(op.peer);
      DCOMM_RETURN_IF_ERROR(connect_peers(peers));
      DCOMM_LOG(kTrace, kSubsysP2P, rank_, "batch of ", d.p2p.size(), " send/recv");
      call_stamp_ = call_stamp(OpKind::kPointToPoint, DataType::kUint8, ReduceOp::kSum, d.p2p.size(), 0, 0);
      abort_->publish_call(call_stamp_, true);
      return run_p2p(d.p2p, rank_, port_table(), config_, /*message_stamps=*/true);
    }
    // Every slot of this call carries its stamp; the collectives are numbered alike on every rank.
    call_stamp_ = call_stamp(d.kind, d.type, d.op, d.count, d.root, call_seq_++);
    abort_->publish_call(call_stamp_, true);
    if (d.kind == OpKind::kBarrier) {
      uint8_t token = 0, out = 0;
      return run_collective({OpKind::kAllReduce, &token, &out, 1, DataType::kUint8, ReduceOp::kMax});
    }
    return run_collective(d);
  }

  Status run_collective(const OpDesc& d) {
    auto reducer = make_host_reducer(d.type, d.op, size_);
    if (!reducer.ok()) return reducer.status();
    const size_t eb = reducer->elem_bytes;
    const CallShape shape{d.kind, d.count, eb, size_, in_place(d, eb), hosts_};
    const Choice choice = choose(shape);
    const Algorithm algorithm = choice.algorithm;
    DCOMM_LOG(kTrace, kSubsysColl, rank_, to_string(d.kind), " count ", d.count, " ", to_string(d.type), " ",
              to_string(d.op), " root ", d.root, shape.in_place ? " in place" : "", " via ", to_string(algorithm));
    if (Logger::instance().enabled(LogLevel::kInfo, kSubsysTuning)) log_tuning(shape, choice);
    switch (algorithm) {
      case Algorithm::kRing: break;
      case Algorithm::kDirect:
        DCOMM_RETURN_IF_ERROR(connect_all());
        return direct_all_reduce(all_ports_, rank_, *reducer, d.send, d.recv, d.count);
      case Algorithm::kOrdered:
        DCOMM_RETURN_IF_ERROR(connect_all());
        if (d.kind == OpKind::kReduceScatter)
          return ordered_reduce_scatter(all_ports_, rank_, *reducer, d.send, d.recv, d.count, scratch_, config_);
        if (d.kind == OpKind::kReduce)
          return ordered_reduce(all_ports_, rank_, d.root, *reducer, d.send, d.recv, d.count, scratch_, config_);
        return ordered_all_reduce(all_ports_, rank_, *reducer, d.send, d.recv, d.count, scratch_, config_);
      case Algorithm::kSingleCopy:
      case Algorithm::kSingleCopyIfRegistered: {
        DCOMM_RETURN_IF_ERROR(connect_all());
        if (d.kind == OpKind::kAllGather) return single_copy_all_gather(all_ports_, rank_, d.send, d.recv, d.count * eb);
        if (d.kind == OpKind::kBroadcast)
          return single_copy_broadcast(all_ports_, rank_, d.root, d.send, d.recv, d.count * eb);
        const bool only_if_registered = algorithm == Algorithm::kSingleCopyIfRegistered;
        auto ran = d.kind == OpKind::kReduceScatter
                       ? single_copy_reduce_scatter(all_ports_, rank_, *reducer, d.send, d.recv, d.count,
                                                    only_if_registered)
                       : single_copy_all_reduce(all_ports_, rank_, *reducer, d.send, d.recv, d.count,
                                                only_if_registered);
        if (!ran.ok() || *ran) return ran.status();
        DCOMM_LOG(kTrace, kSubsysColl, rank_, "not every buffer is from mem_alloc: ring instead");
        break;
      }
      default: {  // the schedules over all peers (algo/recursive.hpp), in the ring order
        DCOMM_RETURN_IF_ERROR(connect_all());
        const PeerSet ps{ordered_ports_, pos_, config_};
        const int root = pos_of_[static_cast<size_t>(d.root)];
        switch (d.kind) {
          case OpKind::kAllReduce:
            if (algorithm == Algorithm::kHierarchical)
              return hierarchical_all_reduce(ps, host_at_, *reducer, d.send, d.recv, d.count, scratch_);
            if (algorithm == Algorithm::kRecursiveDoubling)
              return recursive_doubling_all_reduce(ps, *reducer, d.send, d.recv, d.count, scratch_);
            if (algorithm == Algorithm::kDoubleTree)
              return double_tree_all_reduce(ps, *reducer, d.send, d.recv, d.count, scratch_);
            if (algorithm == Algorithm::kRabenseifner)
              return rabenseifner_all_reduce(ps, *reducer, d.send, d.recv, d.count);
            return tree_all_reduce(ps, *reducer, d.send, d.recv, d.count, scratch_);
          case OpKind::kReduceScatter:
            return halving_reduce_scatter(ps, order_, *reducer, d.send, d.recv, d.count, scratch_);
          case OpKind::kAllGather:  // its blocks are the output's: in rank order
            return doubling_all_gather({all_ports_, rank_, config_}, d.send, d.recv, d.count * eb);
          case OpKind::kBroadcast: return tree_broadcast(ps, root, d.send, d.recv, d.count * eb);
          case OpKind::kReduce: return tree_reduce(ps, *reducer, root, d.send, d.recv, d.count, scratch_);
          default: return make_error(ErrorCode::kInternal, "no ", to_string(algorithm), " for ", to_string(d.kind));
        }
      }
    }
    // The ring and the chains run over positions; a block of reduce_scatter / all_gather
    // belongs to the rank at its position.
    PeerPort* next = size_ > 1 ? ports_[static_cast<size_t>(at_position(pos_ + 1))].get() : nullptr;
    PeerPort* prev = size_ > 1 ? ports_[static_cast<size_t>(at_position(pos_ - 1))].get() : nullptr;
    Primitives prims(prev, next, *reducer, stream_output(shape, config_));
    RingBuffers b{static_cast<const char*>(d.send), static_cast<char*>(d.recv), d.count, order_.data()};
    const int root = pos_of_[static_cast<size_t>(d.root)];
    switch (d.kind) {
      case OpKind::kAllReduce: return ring_all_reduce(prims, pos_, size_, b);
      case OpKind::kReduceScatter: return ring_reduce_scatter(prims, pos_, size_, b);
      case OpKind::kAllGather: return ring_all_gather(prims, pos_, size_, b);
      case OpKind::kBroadcast: return chain_broadcast(prims, pos_, size_, root, b);
      case OpKind::kReduce: return chain_reduce(prims, pos_, size_, root, b);
      default: return make_error(ErrorCode::kInternal, "unhandled operation");
    }
  }

  Choice choose(const CallShape& shape) const { return choose_algorithm(shape, config_, single_copy_, link_); }

  // DCOMM_DEBUG_SUBSYS=TUNING: the choice and every candidate's predicted time.
  void log_tuning(const CallShape& shape, const Choice& choice) const {
    std::string line;
    for (Algorithm a : candidates(shape, config_, single_copy_))
      line += detail::cat(" ", to_string(a), "=", predict_us(a, shape, link_), "us");
    DCOMM_LOG(kInfo, kSubsysTuning, rank_, to_string(shape.kind), " ", shape.bytes(), " bytes on ", shape.ranks,
              " ranks: ", to_string(choice.algorithm), " (", choice.reason, "); predicted:", line);
  }

  // In place as every rank sees it alike: reduce_scatter's output is block `rank` of its
  // input, all_gather's input is block `rank` of its output (so only rank 0's pointers are
  // equal), the others share one buffer.
  bool in_place(const OpDesc& d, size_t eb) const {
    const size_t block = static_cast<size_t>(rank_) * d.count * eb;
    if (d.kind == OpKind::kReduceScatter) return static_cast<const char*>(d.send) + block == d.recv;
    if (d.kind == OpKind::kAllGather) return static_cast<const char*>(d.recv) + block == d.send;
    return d.send == d.recv;
  }

  // Connects every peer once, for the algorithms that talk to all of them.
  Status connect_all() {
    if (!all_ports_.empty()) return {};
    std::vector<int> all(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) all[static_cast<size_t>(p)] = p;
    DCOMM_RETURN_IF_ERROR(connect_peers(all));
    all_ports_ = port_table();
    ordered_ports_.resize(all_ports_.size());
    for (size_t p = 0; p < all_ports_.size(); ++p) ordered_ports_[p] = all_ports_[static_cast<size_t>(order_[p])];
    return {};
  }
  std::vector<PeerPort*> port_table() const {
    std::vector<PeerPort*> ports(static_cast<size_t>(size_));
    for (size_t p = 0; p < ports.size(); ++p) ports[p] = ports_[p].get();
    return ports;
  }

  std::vector<char> scratch_;  // working memory of the schedules over all peers, reused
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 0;
  std::string prefix_;
  Config config_;
  std::shared_ptr<StoreServer> server_;  // keeps a store hosted here alive for splits
  std::unique_ptr<StoreClient> store_;
  std::vector<PeerInfo> peers_;
  std::vector<TransportChoice> kinds_;
  std::shared_ptr<AbortState> abort_ = std::make_shared<AbortState>();
  InprocTransport inproc_;
  ShmTransport shm_;
  std::unique_ptr<Proxy> proxy_;
  std::unique_ptr<ProxiedTransport> tcp_;
  std::unique_ptr<ProxiedTransport> ucx_;
  std::unique_ptr<ProxiedTransport> verbs_;
  std::vector<Transport*> transports_;
  std::vector<std::unique_ptr<PeerPort>> ports_;
  std::vector<PeerPort*> all_ports_;  // every peer's port, once an all-peer algorithm connected them
  std::vector<PeerPort*> ordered_ports_;  // the same by position in the ring order
  std::vector<int> host_of_;          // host index of each rank, numbered by first rank
  std::vector<int> order_, pos_of_;   // position -> rank and rank -> position (topo/order.hpp)
  std::vector<int> host_at_;          // host index at each position
  int pos_ = 0;                       // this rank's position
  int hosts_ = 1;
  LinkModel link_;                    // the cost model's link parameters (agree_on_host_facts)
  bool single_copy_ = false;          // every rank can read every other's memory (agree_on_host_facts)
  int split_count_ = 0;
  StoreAccess access_;                // the job secret and tag every connection of this communicator uses
  CallStamp call_stamp_;              // the call in progress, as its slots carry it (PeerPort reads it)
  uint32_t call_seq_ = 0;             // collectives so far: the same count on every rank
  std::atomic<bool> in_call_{false};  // a thread is inside a call (detail::CallGuard)
  // Which call a peer is in, for a wait on it that stalls: threads of this process are looked
  // up directly, other processes asked over the control sockets.
  struct Directory final : CallDirectory {
    Communicator* c;
    explicit Directory(Communicator* comm) : c(comm) {}
    std::optional<AbortState::CallInfo> call_of(int peer, std::chrono::milliseconds within) override {
      if (peer < 0 || peer >= c->size_) return std::nullopt;
      if (c->peers_[static_cast<size_t>(peer)].process_id == c->peers_[static_cast<size_t>(c->rank_)].process_id) {
        std::lock_guard<std::mutex> lock(detail::local_groups().mu);
        auto& group = detail::local_groups().groups[c->prefix_];
        auto it = group.find(peer);
        if (it == group.end()) return std::nullopt;
        auto state = it->second.lock();
        return state ? std::optional(state->current_call()) : std::nullopt;
      }
      return c->proxy_ ? c->proxy_->query_call(peer, within) : std::nullopt;
    }
  } directory_{this};
  Executor executor_;  // last: its worker is joined before anything it uses is destroyed
};

DCOMM_NAMESPACE_END
