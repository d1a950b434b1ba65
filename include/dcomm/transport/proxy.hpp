// The proxy: one progress thread per communicator rank that has peers in other processes.
//
// - It watches a control socket to every such peer (transport/control.hpp). A peer that goes
//   away without saying goodbye has died: the proxy aborts the communicator with an error
//   naming it, so every pending and later wait on this rank fails at once instead of running
//   to its deadline. When this rank aborts, the proxy tells every peer why (an "abort"
//   message), and peers that receive one abort too; so a failure anywhere is reported on every
//   surviving rank. Heartbeats every kHeartbeatMs tell which peers are alive: a wait that
//   reaches its deadline blames a peer that went silent (stopped, hung), not the live
//   neighbour that was itself waiting for it (stale_peers()).
// - It moves the slots of links to peers in other processes between local FIFOs and a wire:
//   TCP sockets (below: each slot striped over the link's sockets, each socket carrying a
//   slice of every slot prefixed with the slot's byte count and stamp), a UCX endpoint
//   (transport/ucx.hpp) or an RDMA queue pair. A rank thread never blocks in a wire's call,
//   and a ring of sends cannot deadlock on full kernel buffers.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <optional>
#include <mutex>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/control.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

// One peer moved by the proxy thread: local FIFOs at both ends and a wire between them.
class ProxyLink {
 public:
  ProxyLink(int peer_rank, const Config& c) : peer(peer_rank), send(c), recv(c) {}
  virtual ~ProxyLink() = default;
  virtual const char* kind() const = 0;
  // Moves whatever can move without blocking; true if anything moved. A broken wire calls fail().
  virtual bool pump() = 0;
  // Before the proxy sleeps: adds what to wait on to `fds`; false when it must not sleep
  // (events are pending).
  virtual bool prepare_to_sleep(std::vector<pollfd>& /*fds*/) { return true; }
  // The proxy is stopping: flush and close the wire (bounded).
  virtual void shutdown() {}

  bool drained() const { return failed || send.fifo.head() == send.fifo.tail(); }
  // Fails the link: closes its FIFOs (waiters see it) and aborts the communicator, naming the peer.
  // Once this rank is shutting down, a wire the peer closes first is no failure.
  bool fail(const std::string& why) {
    failed = true;
    recv.fifo.close_producer();
    send.fifo.close_consumer();
    if (stopping) {
      DCOMM_LOG(kInfo, kSubsysTransport, rank, "while shutting down: ", why);
      return false;
    }
    DCOMM_LOG(kWarn, kSubsysTransport, rank, why);
    if (abort) abort->abort(make_error(ErrorCode::kPeerFailure, why));
    return false;
  }
  std::string peer_name() const { return info ? info->describe() : detail::cat("rank ", peer); }

  int peer;
  HeapFifo send;  // this rank produces; the proxy consumes and puts it on the wire
  HeapFifo recv;  // the proxy produces from the wire; this rank consumes
  bool failed = false;
  bool stopping = false;  // set by the proxy when this rank shuts down
  // Set by Proxy::add_link.
  int rank = -1;
  const PeerInfo* info = nullptr;
  std::shared_ptr<AbortState> abort;
};

// One TCP peer: the sockets between the FIFOs.
class TcpLink final : public ProxyLink {
 public:
  // What opens each stripe's slice of a slot: the slot's byte count and stamp.
  struct SliceHeader {
    uint64_t total = 0;
    SlotStamp stamp;
  };
  static constexpr size_t kHeaderBytes = sizeof(SliceHeader);
  struct Stripe {
    Socket sock;
    uint64_t send_slot = 0;  // slot this socket is sending its slice of
    size_t send_off = 0;     // bytes of (header + slice) sent
    SliceHeader send_hdr;
    uint64_t recv_slot = 0;
    size_t recv_off = 0;
    SliceHeader recv_hdr;    // the slot's byte count and stamp, once in
    bool eof = false;
    bool want_out = false, want_in = false;
  };
  TcpLink(int peer_rank, std::vector<Socket> socks, const Config& c) : ProxyLink(peer_rank, c) {
    for (auto& s : socks) {
      Stripe st;
      st.sock = std::move(s);
      stripes.push_back(std::move(st));
    }
  }
  const char* kind() const override { return "tcp"; }
  bool pump() override;
  bool prepare_to_sleep(std::vector<pollfd>& fds) override {
    for (auto& st : stripes) {
      short ev = static_cast<short>((st.want_in && !st.eof ? POLLIN : 0) | (st.want_out ? POLLOUT : 0));
      if (ev && st.sock.valid()) fds.push_back({st.sock.fd(), ev, 0});
    }
    return true;
  }
  void shutdown() override {
    for (auto& st : stripes)
      if (st.sock.valid()) ::shutdown(st.sock.fd(), SHUT_WR);
  }

  // A socket call failed: true when it would have blocked (`want` asks the proxy to poll for
  // it), else the link fails naming what it did.
  bool would_block(bool& want, const char* doing) {
    if (errno == EAGAIN || errno == EINTR) return want = true;
    return fail(detail::cat(doing, peer_name(), " failed: ", std::strerror(errno)));
  }

  // The slice of a slot of `total` bytes that stripe k carries.
  std::pair<size_t, size_t> slice(size_t k, uint64_t total) const {
    size_t n = stripes.size();
    size_t part = ((total + n - 1) / n + 63) & ~size_t{63};
    size_t begin = std::min<size_t>(k * part, total);
    return {begin, std::min<size_t>(begin + part, total)};
  }
  std::vector<Stripe> stripes;
};

class Proxy {
 public:
  Proxy(int rank, std::vector<PeerInfo> peers, std::shared_ptr<AbortState> abort)
      : rank_(rank), peers_(std::move(peers)), abort_(std::move(abort)), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    controls_.resize(peers_.size());
    last_heard_ = std::vector<std::atomic<long long>>(peers_.size());
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
    links_.push_back(std::move(link));
    return raw;
  }
  void start() { thread_ = std::thread([this] { run(); }); }

  // Wakes the thread if it sleeps; cheap when it does not.
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      uint64_t one = 1;
      if (write(wake_fd_, &one, sizeof one) < 0) {
      }
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort_message_ = abort_body(why.code(), why.message());
    }
    send_abort_.store(true);
    sleeping_.store(true);  // force the eventfd write
    notify();
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
    bool stop_seen = false;
    for (;;) {
      bool progress = false;
      for (auto& l : links_) progress |= !l->failed && l->pump();
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
      if (progress) continue;
      sleeping_.store(true, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      bool late = false;
      for (auto& l : links_) late |= !l->failed && l->pump();
      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& c : controls_)
        if (c.sock.valid()) fds.push_back({c.sock.fd(), POLLIN, 0});
      for (auto& l : links_) late |= !l->failed && !l->prepare_to_sleep(fds);
      if (late || send_abort_.load() || stopping_.load()) {
        sleeping_.store(false);
        if (late) continue;
      }
      int timeout = stopping_.load() ? 10 : kHeartbeatMs;
      ::poll(fds.data(), fds.size(), sleeping_.load() ? timeout : 0);
      sleeping_.store(false);
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        if (read(wake_fd_, &v, sizeof v) < 0) {
        }
      }
      poll_controls();
    }
    if (!abort_->aborted()) send_control_all(ControlType::kBye);
    for (auto& l : links_) l->shutdown();
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
        abort_->abort(make_error(remote_abort_code(abort_code(body)), who.describe(), " aborted the communicator: ",
                                 abort_text(body)),
                      /*notify_peers=*/false);
      }
    });
    if (!s.ok()) {
      c.sock.close();
      abort_->abort(make_error(ErrorCode::kPeerFailure, who.describe(), " sent ", s.message(),
                               " on its control connection"));
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

  void send_control_all(ControlType type) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mu_);
      text = abort_message_;
    }
    const std::string msg = control_frame(type, type == ControlType::kAbort ? text : std::string());
    for (auto& c : controls_)
      if (c.sock.valid()) send_all(c.sock.fd(), msg.data(), msg.size(), Deadline(std::chrono::milliseconds(100))).ignore();
  }

  int rank_;
  std::vector<PeerInfo> peers_;
  std::shared_ptr<AbortState> abort_;
  int wake_fd_;
  std::vector<Control> controls_;
  std::vector<std::atomic<long long>> last_heard_;  // by peer: when its control socket last spoke (0: no socket)
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
  std::thread thread_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> send_abort_{false};
  long long flush_ms_ = 0;
  std::mutex mu_;
  std::string abort_message_;
};

// Moves whatever can move on the sockets without blocking; true if anything moved.
inline bool TcpLink::pump() {
  bool progress = false;
  FifoRef out = send.fifo, in = recv.fifo;
  uint64_t tail = out.tail();
  uint64_t sent_min = UINT64_MAX, recv_min = UINT64_MAX;
  uint64_t room_end = in.head() + in.slots();
  for (size_t k = 0; k < stripes.size(); ++k) {
    auto& st = stripes[k];
    st.want_out = false;
    while (st.send_slot < tail) {
      if (st.send_off == 0) st.send_hdr = {out.size(st.send_slot), out.stamp(st.send_slot)};
      const uint64_t total = st.send_hdr.total;
      auto [b, e] = slice(k, total);
      size_t want = kHeaderBytes + (e - b);
      iovec iov[2];
      int n_iov = 0;
      if (st.send_off < kHeaderBytes)
        iov[n_iov++] = {reinterpret_cast<char*>(&st.send_hdr) + st.send_off, kHeaderBytes - st.send_off};
      size_t data_off = st.send_off < kHeaderBytes ? 0 : st.send_off - kHeaderBytes;
      if (e - b > data_off) iov[n_iov++] = {out.payload(st.send_slot, total) + b + data_off, e - b - data_off};
      // sendmsg with MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE.
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n_iov);
      ssize_t n = want > st.send_off ? ::sendmsg(st.sock.fd(), &msg, MSG_NOSIGNAL) : 0;
      if (n < 0) {
        if (!would_block(st.want_out, "sending to ")) return false;
        break;
      }
      st.send_off += static_cast<size_t>(n);
      progress |= n > 0;
      if (st.send_off == want) st.send_slot++, st.send_off = 0, progress = true;
    }
    sent_min = std::min(sent_min, st.send_slot);

    st.want_in = false;
    while (!st.eof && st.recv_slot < room_end) {
      char* dst;
      size_t left;
      if (st.recv_off < kHeaderBytes) {
        dst = reinterpret_cast<char*>(&st.recv_hdr) + st.recv_off;
        left = kHeaderBytes - st.recv_off;
      } else {
        auto [b, e] = slice(k, st.recv_hdr.total);
        dst = in.payload(st.recv_slot, st.recv_hdr.total) + b + (st.recv_off - kHeaderBytes);
        left = (e - b) - (st.recv_off - kHeaderBytes);
      }
      ssize_t n = left ? ::recv(st.sock.fd(), dst, left, 0) : 0;
      if (n == 0 && left) {
        st.eof = true;
        if (st.recv_off != 0)
          return fail(detail::cat(peer_name(), " closed its connection mid-message"));
        break;
      }
      if (n < 0) {
        if (!would_block(st.want_in, "receiving from ")) return false;
        break;
      }
      st.recv_off += static_cast<size_t>(n);
      progress |= n > 0;
      if (st.recv_off >= kHeaderBytes) {
        if (st.recv_hdr.total > in.slot_bytes())
          return fail(detail::cat(peer_name(), " sent a ", st.recv_hdr.total,
                                     "-byte slot; this rank's slots hold ", in.slot_bytes(),
                                     " (do all ranks set the same DCOMM_SLOT_BYTES?)"));
        auto [b, e] = slice(k, st.recv_hdr.total);
        if (st.recv_off == kHeaderBytes + (e - b)) {
          in.set_size(st.recv_slot, st.recv_hdr.total);
          if (k == 0) in.set_stamp(st.recv_slot, st.recv_hdr.stamp);
          st.recv_slot++, st.recv_off = 0, progress = true;
        }
      }
    }
    recv_min = std::min(recv_min, st.recv_slot);
  }
  if (sent_min != UINT64_MAX && sent_min > out.head(std::memory_order_relaxed)) out.publish_head(sent_min);
  if (recv_min != UINT64_MAX && recv_min > in.tail(std::memory_order_relaxed)) in.publish_tail(recv_min);
  bool all_eof = !stripes.empty();
  for (auto& st : stripes) all_eof &= st.eof;
  if (all_eof && !in.producer_closed()) in.close_producer();
  return progress;
}

// A link the proxy moves (TCP, UCX, verbs): the rank thread sees only its local FIFOs.
class ProxiedConnection final : public Connection {
 public:
  ProxiedConnection(ProxyLink* link, Proxy* proxy) : link_(link), proxy_(proxy) {}
  FifoRef send_fifo() const override { return link_->send.fifo; }
  FifoRef recv_fifo() const override { return link_->recv.fifo; }
  void notify() const override { proxy_->notify(); }
  bool proxied() const override { return true; }
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
