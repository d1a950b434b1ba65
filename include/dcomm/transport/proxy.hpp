// The proxy: one progress thread per communicator rank that has peers in other processes.
//
// - It watches a control socket to every such peer. A peer that goes away without saying
//   goodbye has died: the proxy aborts the communicator with an error naming it, so every
//   pending and later wait on this rank fails at once instead of running to its deadline.
//   When this rank aborts, the proxy tells every peer why (an "abort" message), and peers
//   that receive one abort too; so a failure anywhere is reported on every surviving rank.
// - It moves TCP links' slots between local FIFOs and the sockets, striping each slot over
//   the link's sockets (each socket carries a slice of every slot, prefixed with the slot's
//   byte count), so a rank thread never blocks in a socket call and a ring of TCP sends
//   cannot deadlock on full kernel buffers.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

// One TCP peer: local FIFOs at both ends and the sockets between them.
struct TcpLink {
  struct Stripe {
    Socket sock;
    uint64_t send_slot = 0;  // slot this socket is sending its slice of
    size_t send_off = 0;     // bytes of (count header + slice) sent
    uint64_t recv_slot = 0;
    size_t recv_off = 0;
    uint64_t recv_total = 0;  // the slot's byte count, once its header is in
    bool eof = false;
    bool want_out = false, want_in = false;
  };
  TcpLink(int peer_rank, std::vector<Socket> socks, const Config& c) : peer(peer_rank), send(c), recv(c) {
    for (auto& s : socks) stripes.push_back(Stripe{std::move(s)});
  }
  int peer;
  HeapFifo send;  // this rank produces; the proxy consumes and writes to the sockets
  HeapFifo recv;  // the proxy produces from the sockets; this rank consumes
  std::vector<Stripe> stripes;
  bool failed = false;

  // The slice of a slot of `total` bytes that stripe k carries.
  std::pair<size_t, size_t> slice(size_t k, uint64_t total) const {
    size_t n = stripes.size();
    size_t part = ((total + n - 1) / n + 63) & ~size_t{63};
    size_t begin = std::min<size_t>(k * part, total);
    return {begin, std::min<size_t>(begin + part, total)};
  }
};

class Proxy {
 public:
  Proxy(int rank, std::vector<PeerInfo> peers, std::shared_ptr<AbortState> abort)
      : rank_(rank), peers_(std::move(peers)), abort_(std::move(abort)), wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    controls_.resize(peers_.size());
  }
  ~Proxy() {
    stop(std::chrono::milliseconds(0));
    ::close(wake_fd_);
  }

  void add_control(int peer, Socket s) { controls_[static_cast<size_t>(peer)].sock = std::move(s); }
  TcpLink* add_link(int peer, std::vector<Socket> socks, const Config& c) {
    links_.push_back(std::make_unique<TcpLink>(peer, std::move(socks), c));
    return links_.back().get();
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
  // Called from the communicator's abort hook: tell every peer why.
  void broadcast_abort(const Status& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abort_message_ = why.message();
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
  enum ControlType : uint8_t { kBye = 1, kAbort = 2 };
  struct Control {
    Socket sock;
    std::string in;
    bool said_bye = false;
  };

  void run() {
    std::vector<pollfd> fds;
    std::vector<TcpLink::Stripe*> fd_stripe;
    Clock::time_point stop_began{};
    bool stop_seen = false;
    for (;;) {
      bool progress = false;
      for (auto& l : links_) progress |= pump(*l);
      if (send_abort_.exchange(false)) send_control_all(kAbort);
      if (stopping_.load()) {
        if (!stop_seen) stop_seen = true, stop_began = Clock::now();
        bool drained = true;
        for (auto& l : links_) drained &= l->failed || l->send.fifo.head() == l->send.fifo.tail();
        auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stop_began).count();
        if (drained || abort_->aborted() || waited >= flush_ms_) break;
      }
      if (progress) continue;
      sleeping_.store(true, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      bool late = false;
      for (auto& l : links_) late |= pump(*l);
      if (late || send_abort_.load() || stopping_.load()) {
        sleeping_.store(false);
        if (late) continue;
      }
      fds.clear();
      fd_stripe.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fd_stripe.push_back(nullptr);
      for (auto& c : controls_)
        if (c.sock.valid()) fds.push_back({c.sock.fd(), POLLIN, 0}), fd_stripe.push_back(nullptr);
      for (auto& l : links_)
        for (auto& st : l->stripes) {
          short ev = static_cast<short>((st.want_in && !st.eof ? POLLIN : 0) | (st.want_out ? POLLOUT : 0));
          if (ev && st.sock.valid()) fds.push_back({st.sock.fd(), ev, 0}), fd_stripe.push_back(&st);
        }
      int timeout = stopping_.load() ? 10 : 200;
      ::poll(fds.data(), fds.size(), sleeping_.load() ? timeout : 0);
      sleeping_.store(false);
      if (fds[0].revents & POLLIN) {
        uint64_t v;
        if (read(wake_fd_, &v, sizeof v) < 0) {
        }
      }
      poll_controls();
    }
    if (!abort_->aborted()) send_control_all(kBye);
    for (auto& l : links_)
      for (auto& st : l->stripes)
        if (st.sock.valid()) ::shutdown(st.sock.fd(), SHUT_WR);
  }

  // Moves whatever can move on one link without blocking; true if anything moved.
  bool pump(TcpLink& l) {
    if (l.failed) return false;
    bool progress = false;
    FifoRef out = l.send.fifo, in = l.recv.fifo;
    uint64_t tail = out.tail();
    uint64_t sent_min = UINT64_MAX, recv_min = UINT64_MAX;
    uint64_t room_end = in.head() + in.slots();
    for (size_t k = 0; k < l.stripes.size(); ++k) {
      auto& st = l.stripes[k];
      st.want_out = false;
      while (st.send_slot < tail) {
        uint64_t total = out.size(st.send_slot);
        auto [b, e] = l.slice(k, total);
        size_t want = 8 + (e - b);
        iovec iov[2];
        int n_iov = 0;
        if (st.send_off < 8) iov[n_iov++] = {reinterpret_cast<char*>(&total) + st.send_off, 8 - st.send_off};
        size_t data_off = st.send_off < 8 ? 0 : st.send_off - 8;
        if (e - b > data_off) iov[n_iov++] = {out.payload(st.send_slot, total) + b + data_off, e - b - data_off};
        // sendmsg with MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE.
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<size_t>(n_iov);
        ssize_t n = want > st.send_off ? ::sendmsg(st.sock.fd(), &msg, MSG_NOSIGNAL) : 0;
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) {
            st.want_out = true;
            break;
          }
          return fail(l, detail::cat("sending to ", peers_[static_cast<size_t>(l.peer)].describe(), " failed: ",
                                     std::strerror(errno)));
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
        if (st.recv_off < 8) {
          dst = reinterpret_cast<char*>(&st.recv_total) + st.recv_off;
          left = 8 - st.recv_off;
        } else {
          auto [b, e] = l.slice(k, st.recv_total);
          dst = in.payload(st.recv_slot, st.recv_total) + b + (st.recv_off - 8);
          left = (e - b) - (st.recv_off - 8);
        }
        ssize_t n = left ? ::recv(st.sock.fd(), dst, left, 0) : 0;
        if (n == 0 && left) {
          st.eof = true;
          if (st.recv_off != 0)
            return fail(l, detail::cat(peers_[static_cast<size_t>(l.peer)].describe(), " closed its connection mid-message"));
          break;
        }
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) {
            st.want_in = true;
            break;
          }
          return fail(l, detail::cat("receiving from ", peers_[static_cast<size_t>(l.peer)].describe(), " failed: ",
                                     std::strerror(errno)));
        }
        st.recv_off += static_cast<size_t>(n);
        progress |= n > 0;
        if (st.recv_off >= 8) {
          if (st.recv_total > in.slot_bytes())
            return fail(l, detail::cat(peers_[static_cast<size_t>(l.peer)].describe(), " sent a ", st.recv_total,
                                       "-byte slot; this rank's slots hold ", in.slot_bytes(),
                                       " (do all ranks set the same DCOMM_SLOT_BYTES?)"));
          auto [b, e] = l.slice(k, st.recv_total);
          if (st.recv_off == 8 + (e - b)) {
            in.set_size(st.recv_slot, st.recv_total);
            st.recv_slot++, st.recv_off = 0, progress = true;
          }
        }
      }
      recv_min = std::min(recv_min, st.recv_slot);
    }
    if (sent_min != UINT64_MAX && sent_min > out.head(std::memory_order_relaxed)) out.publish_head(sent_min);
    if (recv_min != UINT64_MAX && recv_min > in.tail(std::memory_order_relaxed)) in.publish_tail(recv_min);
    bool all_eof = !l.stripes.empty();
    for (auto& st : l.stripes) all_eof &= st.eof;
    if (all_eof && !in.producer_closed()) in.close_producer();
    return progress;
  }

  bool fail(TcpLink& l, std::string why) {
    l.failed = true;
    l.recv.fifo.close_producer();
    l.send.fifo.close_consumer();
    DCOMM_LOG(kWarn, kSubsysTransport, rank_, why);
    abort_->abort(make_error(ErrorCode::kPeerFailure, why));
    return false;
  }

  void poll_controls() {
    for (size_t p = 0; p < controls_.size(); ++p) {
      Control& c = controls_[p];
      if (!c.sock.valid()) continue;
      char buf[4096];
      ssize_t n = ::recv(c.sock.fd(), buf, sizeof buf, 0);
      if (n > 0) {
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
    while (c.in.size() >= 5) {
      uint32_t len = detail::get_pod<uint32_t>(c.in.data() + 1);
      if (c.in.size() < 5 + len) return;
      auto type = static_cast<uint8_t>(c.in[0]);
      std::string text = c.in.substr(5, len);
      c.in.erase(0, 5 + len);
      if (type == kBye) {
        c.said_bye = true;
        DCOMM_LOG(kInfo, kSubsysProxy, rank_, peers_[static_cast<size_t>(peer)].describe(), " destroyed its communicator");
      } else if (type == kAbort) {
        abort_->abort(make_error(ErrorCode::kPeerFailure, peers_[static_cast<size_t>(peer)].describe(),
                                 " aborted the communicator: ", text),
                      /*notify_peers=*/false);
      }
    }
  }

  void send_control_all(uint8_t type) {
    std::string text;
    {
      std::lock_guard<std::mutex> lock(mu_);
      text = abort_message_;
    }
    std::string msg(1, static_cast<char>(type));
    detail::put_pod<uint32_t>(msg, static_cast<uint32_t>(text.size()));
    msg += text;
    for (auto& c : controls_)
      if (c.sock.valid()) send_all(c.sock.fd(), msg.data(), msg.size(), Deadline(std::chrono::milliseconds(100))).ignore();
  }

  int rank_;
  std::vector<PeerInfo> peers_;
  std::shared_ptr<AbortState> abort_;
  int wake_fd_;
  std::vector<Control> controls_;
  std::vector<std::unique_ptr<TcpLink>> links_;
  std::thread thread_;
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> send_abort_{false};
  long long flush_ms_ = 0;
  std::mutex mu_;
  std::string abort_message_;
};

class TcpConnection final : public Connection {
 public:
  TcpConnection(TcpLink* link, Proxy* proxy) : link_(link), proxy_(proxy) {}
  FifoRef send_fifo() const override { return link_->send.fifo; }
  FifoRef recv_fifo() const override { return link_->recv.fifo; }
  void notify() const override { proxy_->notify(); }
  bool proxied() const override { return true; }
  const char* kind() const override { return "tcp"; }
  size_t staging_bytes() const override { return link_->send.bytes + link_->recv.bytes; }
  // The proxy flushes and closes the sockets; the local FIFOs need no goodbye.
  void close() override {}

 private:
  TcpLink* link_;
  Proxy* proxy_;
};

// TCP links are made with the socket mesh at start-up; connect() hands out the peer's link.
class TcpTransport final : public Transport {
 public:
  TcpTransport(Proxy* proxy, std::vector<TcpLink*> links) : proxy_(proxy), links_(std::move(links)) {}
  const char* name() const override { return "tcp"; }
  Result<std::unique_ptr<Connection>> connect(const ConnectContext& ctx) override {
    TcpLink* l = links_[static_cast<size_t>(ctx.peer->rank)];
    if (!l) return make_error(ErrorCode::kInternal, "no TCP link to ", ctx.peer->describe());
    return std::unique_ptr<Connection>(new TcpConnection(l, proxy_));
  }

 private:
  Proxy* proxy_;
  std::vector<TcpLink*> links_;
};

DCOMM_NAMESPACE_END
