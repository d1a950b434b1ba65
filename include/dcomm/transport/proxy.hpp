// The proxy: one progress thread per communicator rank that has peers in other processes.
//
// - It watches a control socket to every such peer (transport/control.hpp). A peer that goes
//   away without saying goodbye has died: the proxy aborts the communicator naming it, so every
//   wait on this rank fails at once. When this rank aborts, the proxy tells every peer why (an
//   "abort" message), and they abort too: a failure anywhere is reported on every survivor.
//   Heartbeats (kHeartbeatMs) tell which peers are alive: a wait that reaches its deadline
//   blames a peer gone silent, not the live neighbour that waited for it (stale_peers()).
// - It moves the slots of links to peers in other processes (ProxyLink,
//   transport/proxy_link.hpp) between local FIFOs and a wire: TCP sockets
//   (transport/tcp_link.hpp), a UCX endpoint (transport/ucx.hpp) or an RDMA queue pair
//   (transport/verbs.hpp). A rank thread never blocks in a wire's call, and a ring of sends
//   cannot deadlock on full kernel buffers.
// - While the rank is in a call it polls without sleeping (yielding between turns) until nothing
//   has moved for DCOMM_PROXY_SPIN_US, as NCCL's proxy does; idle, it sleeps in poll() on its
//   sockets and an eventfd that the rank's notify() writes.
// - Stopping, it closes the wires whose close the peer must answer (UCX) first, says goodbye,
//   and answers the peers' until each has said goodbye too; then it closes the others.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/transport/control.hpp"
#include "dcomm/transport/proxy_link.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

class Proxy {
 public:
  Proxy(int rank, std::vector<PeerInfo> peers, std::shared_ptr<AbortState> abort,
        std::chrono::microseconds spin = std::chrono::microseconds(0))
      : rank_(rank),
        peers_(std::move(peers)),
        abort_(std::move(abort)),
        spin_(spin),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    controls_.resize(peers_.size());
    last_heard_ = std::vector<std::atomic<long long>>(peers_.size());
    lost_ = std::vector<std::atomic<bool>>(peers_.size());
    queries_.resize(peers_.size());
  }
  ~Proxy() {
    stop(std::chrono::milliseconds(0));
    ::close(wake_fd_);
  }

  void add_control(int peer, Socket s) {
    controls_[static_cast<size_t>(peer)].sock = std::move(s);
    last_heard_[static_cast<size_t>(peer)].store(now_ms(), std::memory_order_relaxed);
  }
  // Before start(): the proxy moves this link's slots from then on.
  template <class Link>
  Link* add_link(std::unique_ptr<Link> link) {
    Link* raw = link.get();
    raw->rank = rank_;
    raw->info = &peers_[static_cast<size_t>(raw->peer)];
    raw->abort = abort_;
    // A survivor leaving after its call failed breaks its wires; its abort (who died) came first.
    raw->read_controls = [this] {
      if (std::this_thread::get_id() == thread_.get_id()) poll_controls();
    };
    if (raw->max_sleep_ms() >= 0) max_sleep_ms_ = std::min(max_sleep_ms_, raw->max_sleep_ms());
    links_.push_back(std::move(link));
    return raw;
  }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  // A call failed on the aborted communicator: no link moves again (ProxyLink::quiesce).
  void quiesce() {
    for (auto& l : links_) l->quiesce();
  }

  // The rank has begun a call: the proxy polls from now on (it wakes if it sleeps), so the
  // call's first message, sent or received, pays no wake-up either. Nothing when it moves no
  // data (only control connections: peers on this host over shared memory).
  void call_began() {
    if (spin_.count() == 0 || links_.empty()) return;
    poked_.store(true, std::memory_order_relaxed);
    notify();
  }
  // Wakes the thread if it sleeps; cheap when it does not.
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      uint64_t one = 1;
      if (write(wake_fd_, &one, sizeof one) < 0) {}
    }
  }
  // Which call `peer` is in, asked over its control socket (waits up to `within` for the
  // answer); nothing when the peer has no control socket or does not answer.
  std::optional<AbortState::CallInfo> query_call(int peer, std::chrono::milliseconds within) {
    const size_t p = static_cast<size_t>(peer);
    std::unique_lock<std::mutex> lock(query_mu_);
    if (p >= queries_.size()) return std::nullopt;
    const uint64_t before = queries_[p].answers;
    queries_[p].wanted = true;
    lock.unlock();
    sleeping_.store(true);  // force the wake-up
    notify();
    lock.lock();
    if (!query_cv_.wait_for(lock, within, [&] { return queries_[p].answers != before; })) return std::nullopt;
    return queries_[p].answer;
  }

  // Called from the communicator's abort hook: tell every peer why (the code, then the text).
  void broadcast_abort(const Status& why) {
    set_abort_message(why);
    send_abort_.store(true);
    sleeping_.store(true);  // force the eventfd write
    notify();
  }
  // Until the abort broadcast is written to every peer's control socket (at most `within`): a
  // process that exits right after aborting must not leave its peers only a closed socket.
  void wait_abort_sent(std::chrono::milliseconds within) const {
    for (Deadline d(within); !abort_flushed_.load() && !d.expired();)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Sends what is still queued for TCP peers (bounded by `flush`), says goodbye to every peer
  // and joins the thread.
  void stop(std::chrono::milliseconds flush) {
    if (!thread_.joinable()) return;
    flush_ms_ = flush.count();
    stopping_.store(true);
    sleeping_.store(true);
    notify();
    thread_.join();
  }

 private:
  struct Control {
    Socket sock;
    std::string in;
    bool said_bye = false;
  };

 public:
  // Peers whose control connection closed without a goodbye: they died, or their host went.
  std::vector<int> lost_peers() const {
    std::vector<int> lost;
    for (size_t p = 0; p < lost_.size(); ++p)
      if (lost_[p].load(std::memory_order_acquire)) lost.push_back(static_cast<int>(p));
    return lost;
  }
  // Peers in other processes from which nothing (heartbeats included) has come for `silence`:
  // stopped, hung, or their host gone (the communicator's timeout names these).
  std::vector<std::pair<int, long long>> stale_peers(std::chrono::milliseconds silence) const {
    std::vector<std::pair<int, long long>> out;
    const long long now = now_ms();
    for (size_t p = 0; p < last_heard_.size(); ++p) {
      const long long heard = last_heard_[p].load(std::memory_order_relaxed);
      if (heard > 0 && now - heard > silence.count()) out.emplace_back(static_cast<int>(p), now - heard);
    }
    return out;
  }
  // A wait reached its deadline (`timeout`, the communicator's). The peer it waited for may
  // itself be waiting for a rank that stopped (SIGSTOP, a hang, a dead host): the ranks whose
  // heartbeats stopped are the ones to name, and every survivor sees the same silence, so all
  // name the same ranks.
  Status blame_silent_peers(const Status& timeout, std::chrono::milliseconds deadline) const {
    const auto silence = std::chrono::milliseconds(
        std::max<long long>(4LL * kHeartbeatMs, std::min<long long>(deadline.count() / 2, 5000)));
    const auto stale = stale_peers(silence);
    if (stale.empty()) return timeout;
    std::string who;
    for (const auto& [p, ms] : stale)
      who += detail::cat(who.empty() ? "" : "; ", peers_[static_cast<size_t>(p)].describe(), ": nothing from it for ",
                         ms, " ms");
    return make_error(ErrorCode::kPeerFailure,
                      stale.size() == 1 ? "a rank stopped responding (" : "ranks stopped responding (", who,
                      "): stopped, hung or cut off; while this rank waited: ", timeout.message());
  }

 private:
  static long long now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
  }
  // Heartbeats, as often as kHeartbeatMs; a send that would block is skipped (the peer is not
  // reading: it will hear the next one, or it is the one that stopped).
  void heartbeat(long long now) {
    if (now - last_beat_ < kHeartbeatMs) return;
    last_beat_ = now;
    static const std::string beat = control_frame(ControlType::kHeartbeat);
    for (auto& c : controls_)
      if (c.sock.valid()) (void)::send(c.sock.fd(), beat.data(), beat.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void run() {
    std::vector<pollfd> fds;
    Clock::time_point stop_began{};
    Clock::time_point last_moved = Clock::now(), last_controls{};
    bool stop_seen = false;
    for (;;) {
      bool progress = pump_links();
      if (send_abort_.exchange(false)) send_control_all(ControlType::kAbort);
      heartbeat(now_ms());
      send_queries();
      if (stopping_.load()) {
        if (!stop_seen) {
          stop_seen = true, stop_began = Clock::now();
          for (auto& l : links_) l->stopping = true;
        }
        bool drained = true;
        for (auto& l : links_) drained &= l->drained();
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stop_began).count();
        if (drained || abort_->aborted() || waited >= flush_ms_) break;
      }
      if (progress || poked_.exchange(false, std::memory_order_relaxed)) {
        last_moved = Clock::now();
        continue;
      }
      if (const Clock::time_point now = Clock::now(); busy(now - last_moved)) {
        // Control sockets carry only goodbyes, aborts and heartbeats: a look each millisecond.
        if (now - last_controls >= std::chrono::milliseconds(1)) poll_controls(), last_controls = now;
        sched_yield();
        continue;
      }
      sleeping_.store(true, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      bool late = pump_links();
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& c : controls_)
        if (c.sock.valid()) fds.push_back({c.sock.fd(), POLLIN, 0});
      // A link the waiting rank moves itself (rank_pumps) is left to it during a call: the
      // proxy does not arm its wake-up there, so the two do not take turns at every completion.
      const bool in_call = abort_->in_call();
      for (auto& l : links_) late |= !(in_call && l->rank_pumps()) && !l->try_prepare_to_sleep(fds);
      if (late || send_abort_.load() || stopping_.load()) {
        sleeping_.store(false);
        if (late) continue;
      }
      // In a call, a millisecond at most: a wire whose wake-up event goes missing (UCX's
      // shared-memory transports, now and then) then costs that, not a heartbeat period.
      const int timeout = std::min(stopping_.load() ? 10 : abort_->in_call() ? 1 : kHeartbeatMs, max_sleep_ms_);
      ::poll(fds.data(), fds.size(), sleeping_.load() ? timeout : 0);
      sleeping_.store(false);
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        if (read(wake_fd_, &v, sizeof v) < 0) {}
      }
      poll_controls();
    }
    // A wire whose close needs the peer's answer (UCX) closes while every peer still answers:
    // before this rank's goodbye, and this rank answers theirs until each peer has said goodbye.
    const bool healthy = !abort_->aborted();
    bool lingering = false;
    for (auto& l : links_) {
      if (!l->closes_before_bye()) continue;
      l->shutdown();
      lingering = true;
    }
    if (healthy) {
      send_control_all(ControlType::kBye);
    } else if (!abort_sent_) {
      // Aborted by another rank's notice: this rank leaves without a goodbye, and a peer that
      // sees its connections close before that notice reaches it would name this rank as
      // dead. The reason goes with it instead.
      set_abort_message(abort_->status());
      send_control_all(ControlType::kAbort);
    }
    if (healthy && lingering) await_byes();
    for (auto& l : links_)
      if (!l->closes_before_bye()) l->shutdown();
  }
  // Until every peer in another process has said goodbye or gone (a second at most).
  void await_byes() {
    auto pending = [this] {
      return std::any_of(controls_.begin(), controls_.end(),
                         [](const Control& c) { return c.sock.valid() && !c.said_bye; });
    };
    for (Deadline d(std::chrono::milliseconds(1000)); pending() && !d.expired();) {
      for (auto& l : links_) l->linger();
      poll_controls();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // Pumps every link; true when anything moved, or a rank has a link (and is moving it).
  bool pump_links() {
    bool moved_any = false;
    for (auto& l : links_) {
      bool moved = false;
      moved_any |= !l->try_pump(&moved) || moved;
    }
    return moved_any;
  }
  // Polls without sleeping: the rank is in a call and something moved `since_moved` ago,
  // within `spin_`.
  bool busy(Clock::duration since_moved) const {
    return spin_.count() > 0 && abort_->in_call() && !stopping_.load(std::memory_order_relaxed) &&
           !send_abort_.load(std::memory_order_relaxed) && since_moved < spin_;
  }

  void poll_controls() {
    for (size_t p = 0; p < controls_.size(); ++p) {
      Control& c = controls_[p];
      if (!c.sock.valid()) continue;
      char buf[4096];
      ssize_t n = ::recv(c.sock.fd(), buf, sizeof buf, 0);
      if (n > 0) {
        last_heard_[p].store(now_ms(), std::memory_order_relaxed);
        c.in.append(buf, static_cast<size_t>(n));
        handle_messages(static_cast<int>(p), c);
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      c.sock.close();
      if (!c.said_bye && !stopping_.load()) {
        std::string why = detail::cat("peer ", peers_[p].describe(),
                                      " died or closed its connection without destroying its communicator");
        DCOMM_LOG(kWarn, kSubsysProxy, rank_, why);
        lost_[p].store(true, std::memory_order_release);
        abort_->abort(make_error(ErrorCode::kPeerFailure, why));
      }
    }
  }

  void handle_messages(int peer, Control& c) {
    const PeerInfo& who = peers_[static_cast<size_t>(peer)];
    Status s = take_control_frames(c.in, [&](ControlType type, std::string_view body) {
      if (type == ControlType::kBye) {
        c.said_bye = true;
        DCOMM_LOG(kInfo, kSubsysProxy, rank_, who.describe(), " destroyed its communicator");
      } else if (type == ControlType::kQuery) {
        const AbortState::CallInfo mine = abort_->current_call();
        std::string body;
        detail::put_pod<uint64_t>(body, mine.stamp.a);
        detail::put_pod<uint64_t>(body, mine.stamp.b);
        body += static_cast<char>(mine.in_call ? 1 : 0);
        detail::put_pod<uint64_t>(body, mine.previous.a);
        detail::put_pod<uint64_t>(body, mine.previous.b);
        const std::string frame = control_frame(ControlType::kCall, body);
        send_all(c.sock.fd(), frame.data(), frame.size(), Deadline(std::chrono::milliseconds(100))).ignore();
      } else if (type == ControlType::kCall) {
        detail::ByteReader r(body);
        auto a = r.pod<uint64_t>();
        auto b = r.pod<uint64_t>();
        auto in = r.pod<uint8_t>();
        auto pa = r.pod<uint64_t>();
        auto pb = r.pod<uint64_t>();
        if (!a || !b || !in || !pa || !pb) return;
        std::lock_guard<std::mutex> lock(query_mu_);
        auto& q = queries_[static_cast<size_t>(peer)];
        q.answer = {{*a, *b}, *in != 0, {*pa, *pb}};
        ++q.answers;
        query_cv_.notify_all();
      } else if (type == ControlType::kAbort) {
        abort_->abort(make_error(remote_abort_code(abort_code(body)), who.describe(),
                                 " aborted the communicator: ", abort_text(body)),
                      /*notify_peers=*/false);
      }
    });
    if (!s.ok()) {
      c.sock.close();
      abort_->abort(
          make_error(ErrorCode::kPeerFailure, who.describe(), " sent ", s.message(), " on its control connection"));
    }
  }

  void send_queries() {
    std::lock_guard<std::mutex> lock(query_mu_);
    for (size_t p = 0; p < queries_.size(); ++p) {
      if (!queries_[p].wanted) continue;
      queries_[p].wanted = false;
      if (!controls_[p].sock.valid()) continue;
      static const std::string frame = control_frame(ControlType::kQuery);
      send_all(controls_[p].sock.fd(), frame.data(), frame.size(), Deadline(std::chrono::milliseconds(100))).ignore();
    }
  }

  void set_abort_message(const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    abort_message_ = abort_body(why.code(), why.message());
  }
  void send_control_all(ControlType type) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mu_);
      text = abort_message_;
    }
    abort_sent_ |= type == ControlType::kAbort;
    const std::string msg = control_frame(type, type == ControlType::kAbort ? text : std::string());
    for (auto& c : controls_)
      if (c.sock.valid())
        send_all(c.sock.fd(), msg.data(), msg.size(), Deadline(std::chrono::milliseconds(100))).ignore();
    if (type == ControlType::kAbort) abort_flushed_.store(true);
  }

  int rank_;
  std::vector<PeerInfo> peers_;
  std::shared_ptr<AbortState> abort_;
  std::chrono::microseconds spin_;
  int wake_fd_;
  std::vector<Control> controls_;
  std::vector<std::atomic<long long>> last_heard_;  // by peer: when its control socket last spoke (0: no socket)
  std::vector<std::atomic<bool>> lost_;             // by peer: its control socket closed without a goodbye
  long long last_beat_ = 0;
  struct Query {
    bool wanted = false;   // a rank thread asks; the proxy sends the question
    uint64_t answers = 0;  // answers received so far
    AbortState::CallInfo answer;
  };
  std::mutex query_mu_;
  std::condition_variable query_cv_;
  std::vector<Query> queries_;  // by peer
  std::vector<std::unique_ptr<ProxyLink>> links_;
  int max_sleep_ms_ = kHeartbeatMs;  // the least of the links' max_sleep_ms()
  std::thread thread_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> poked_{false};  // a call began (call_began)
  std::atomic<bool> stopping_{false};
  std::atomic<bool> send_abort_{false};
  std::atomic<bool> abort_flushed_{false};  // the abort broadcast has been written
  long long flush_ms_ = 0;
  std::mutex mu_;
  std::string abort_message_;
  bool abort_sent_ = false;  // the proxy thread's: this rank has told its peers why it aborted
};

// A link the proxy moves (TCP, UCX, verbs): the rank thread sees only its local FIFOs.
class ProxiedConnection final : public Connection {
 public:
  ProxiedConnection(ProxyLink* link, Proxy* proxy) : link_(link), proxy_(proxy) {}
  FifoRef send_fifo() const override { return link_->send.fifo; }
  FifoRef recv_fifo() const override { return link_->recv.fifo; }
  // After a commit or release: a link the rank may move goes at once (no proxy hop).
  void notify() const override {
    progress();
    if (!link_->rank_pumps()) proxy_->notify();  // the rank moves it while it waits
  }
  void progress() const override {
    bool moved = false;
    if (link_->rank_pumps()) link_->try_pump(&moved);
  }
  bool proxied() const override { return true; }
  bool takes_references() const override { return link_->takes_references(); }
  Landing* landing() const override { return link_->lands_payloads() ? &link_->landing : nullptr; }
  void stop_wire() override { proxy_->quiesce(); }  // every link: the communicator is done
  const char* kind() const override { return link_->kind(); }
  size_t staging_bytes() const override { return link_->send.bytes + link_->recv.bytes; }
  // The proxy flushes and closes the wire; the local FIFOs need no goodbye.
  void close() override {}

 private:
  ProxyLink* link_;
  Proxy* proxy_;
};

// Proxied links are made at start-up (the socket mesh, UCX endpoints); connect() hands out
// the peer's link.
class ProxiedTransport final : public Transport {
 public:
  ProxiedTransport(const char* name, Proxy* proxy, std::vector<ProxyLink*> links)
      : name_(name), proxy_(proxy), links_(std::move(links)) {}
  const char* name() const override { return name_; }
  Result<std::unique_ptr<Connection>> connect(const ConnectContext& ctx) override {
    ProxyLink* l = links_[static_cast<size_t>(ctx.peer->rank)];
    if (!l) return make_error(ErrorCode::kInternal, "no ", name_, " link to ", ctx.peer->describe());
    return std::unique_ptr<Connection>(new ProxiedConnection(l, proxy_));
  }

 private:
  const char* name_;
  Proxy* proxy_;
  std::vector<ProxyLink*> links_;
};

DCOMM_NAMESPACE_END
