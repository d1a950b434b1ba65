// The rendezvous store's server (bootstrap/store.hpp): one thread that serves every client
// fairly and within bounds. Its sockets never block; replies queue per client up to a cap,
// and a client that leaves them unread (or never finishes authenticating) is dropped after a
// deadline; connections are limited (at the file-descriptor limit a newcomer is accepted and
// closed at once, through a spare descriptor, so nothing spins); keys, values and the bytes
// held are capped, and memory goes back when values are erased or clients leave. A port scan
// (port_span > 1) finds this job's store by its job tag: a store of another job on the same
// host refuses the tag.
#pragma once

#include <fcntl.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/auth.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/bootstrap/store_protocol.hpp"
#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

class StoreServer {
 public:
  struct Counters {
    uint64_t accepted = 0, refused_auth = 0, refused_busy = 0, dropped_stalled = 0, dropped_bad = 0, refusals = 0;
    uint64_t bytes_held = 0;
    uint64_t clients = 0;
  };

  // Listens on addr (port 0 picks a free port; see address()).
  static Result<std::shared_ptr<StoreServer>> start(const SocketAddress& addr, StoreAccess access = {}) {
    auto limits = StoreLimits::from_env();
    if (!limits.ok()) return limits.status();
    return start(addr, std::move(access), *limits);
  }
  static Result<std::shared_ptr<StoreServer>> start(const SocketAddress& addr, StoreAccess access, StoreLimits limits) {
    auto listener = listen_on(addr);
    if (!listener.ok()) return listener.status().with_context(detail::cat("rendezvous store on ", addr.to_string()));
    return start(std::move(*listener), addr.host, std::move(access), limits);
  }
  // On a socket bound earlier (bind_to), listening from now on; `host` is what clients dial.
  static Result<std::shared_ptr<StoreServer>> start(Socket bound, const std::string& host, StoreAccess access,
                                                    StoreLimits limits) {
    DCOMM_RETURN_IF_ERROR(start_listening(bound).with_context(detail::cat("rendezvous store on ", host)));
    auto server = std::shared_ptr<StoreServer>(new StoreServer(std::move(bound), std::move(access), limits));
    server->address_ = {host, bound_port(server->listener_.fd())};
    server->thread_ = std::thread([s = server.get()] { s->serve(); });
    return server;
  }
  ~StoreServer() {
    stop_ = true;
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {}
    if (thread_.joinable()) thread_.join();
    ::close(wake_fd_);
    if (spare_fd_ >= 0) ::close(spare_fd_);
  }
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  const SocketAddress& address() const { return address_; }
  Counters counters() const {
    std::lock_guard<std::mutex> lock(counters_mu_);
    return counters_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Client {
    explicit Client(const StoreLimits& l) : parser(l) {}
    uint64_t id = 0;
    Socket sock;
    bool authed = false;
    auth::Nonce nonce{};
    std::string handshake;    // the response, as it arrives
    Clock::time_point since;  // connected at
    std::string out;          // replies queued
    size_t out_sent = 0;
    Clock::time_point out_since;  // the queue's last progress
    StoreRequestParser parser;
    std::deque<StoreRequest> queue;  // parsed, behind a blocking get
    bool waiting = false;            // a get is waiting for its key
    uint64_t wait_seq = 0;
    bool closing = false;  // flush the queued refusal, then close
  };

  StoreServer(Socket listener, StoreAccess access, StoreLimits limits)
      : listener_(std::move(listener)),
        access_(std::move(access)),
        limits_(limits),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        spare_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)) {
    if (limits_.max_clients <= 0) {
      rlimit rl{};
      const long fds =
          getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? static_cast<long>(rl.rlim_cur) : 4096;
      // Leave descriptors for the rest of the process (its own sockets, shared memory, ...).
      limits_.max_clients = static_cast<int>(std::max(8L, std::min(fds - 64, fds * 3 / 4)));
    }
  }

  void count(uint64_t Counters::*field) {
    std::lock_guard<std::mutex> lock(counters_mu_);
    ++(counters_.*field);
  }
  // A refused or dropped connection: logged, the first few and then every 100th.
  template <class... Args>
  void note(uint64_t Counters::*field, const Args&... why) {
    count(field);
    const uint64_t n = ++refusals_;
    if (n <= 5 || n % 100 == 0)
      DCOMM_LOG(kWarn, kSubsysBootstrap, -1, "rendezvous store ", address_.to_string(), ": ", why..., " (", n,
                " connections refused or dropped so far)");
  }

  void serve() {
    std::vector<pollfd> fds;
    std::vector<uint64_t> ids;
    while (!stop_) {
      const auto now = Clock::now();
      fds.clear(), ids.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      const bool accepting = now >= accept_pause_until_;
      fds.push_back({listener_.fd(), static_cast<short>(accepting ? POLLIN : 0), 0});
      for (auto& [id, c] : clients_) {
        short ev = 0;
        // Reads stop while the client has requests waiting behind unread replies.
        if (!c->closing && !backlogged(*c) && c->queue.size() < kMaxQueued) ev |= POLLIN;
        if (c->out_sent < c->out.size()) ev |= POLLOUT;
        fds.push_back({c->sock.fd(), ev, 0});
        ids.push_back(id);
      }
      ::poll(fds.data(), fds.size(), accepting ? 200 : 50);
      if (fds[1].revents & POLLIN) accept_all();
      for (size_t i = 2; i < fds.size(); ++i) {
        auto it = clients_.find(ids[i - 2]);
        if (it == clients_.end()) continue;
        Client& c = *it->second;
        bool keep = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) keep = read_from(c);
        if (keep && (c.out_sent < c.out.size())) keep = write_to(c);
        if (keep && c.closing && c.out_sent == c.out.size()) keep = false;
        if (!keep) drop(c.id);
      }
      expire(Clock::now());
    }
  }

  void accept_all() {
    for (int k = 0; k < 64; ++k) {
      int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: refuse the newcomer through the spare one instead of leaving
          // it in the backlog (poll would report it again at once: a spin).
          if (spare_fd_ >= 0) {
            ::close(spare_fd_);
            int refused = ::accept(listener_.fd(), nullptr, nullptr);
            if (refused >= 0) ::close(refused);
            spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          }
          note(&Counters::refused_busy, "out of file descriptors (", std::strerror(errno),
               "): a connection was refused");
          accept_pause_until_ = Clock::now() + std::chrono::milliseconds(20);
        }
        return;
      }
      if (static_cast<int>(clients_.size()) >= limits_.max_clients) {
        ::close(fd);
        note(&Counters::refused_busy, "at its limit of ", limits_.max_clients,
             " connections (DCOMM_STORE_MAX_CLIENTS)");
        continue;
      }
      detail::tune_socket(fd);
      auto c = std::make_unique<Client>(limits_);
      c->id = ++next_id_;
      c->sock = Socket(fd);
      c->since = c->out_since = Clock::now();
      c->nonce = auth::fresh_nonce();
      c->out = auth::greeting(kStoreMagic, c->nonce);
      count(&Counters::accepted);
      clients_.emplace(c->id, std::move(c));
    }
  }

  // Reads what has arrived; false when the client is to be dropped.
  bool read_from(Client& c) {
    char buf[65536];
    for (int rounds = 0; rounds < 16; ++rounds) {  // then the others get their turn
      ssize_t n = ::recv(c.sock.fd(), buf, sizeof buf, 0);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (!take(c, buf, static_cast<size_t>(n))) return false;
      if (c.closing || backlogged(c) || c.queue.size() >= kMaxQueued) return true;
    }
    return true;
  }

  bool take(Client& c, const char* data, size_t n) {
    if (!c.authed) {
      c.handshake.append(data, n);
      auth::Checked v = auth::check_response(access_.secret, kStoreMagic, c.nonce, c.handshake);
      if (v.verdict == auth::Verdict::kIncomplete) {
        if (c.handshake.size() > auth::kNonceBytes + 4 + auth::kMaxPayloadBytes + auth::kMacBytes)
          return note(&Counters::refused_auth, "a connection sent an overlong hello"), false;
        return true;
      }
      if (v.verdict == auth::Verdict::kBad) return note(&Counters::refused_auth, "a connection ", v.why), false;
      if (!access_.job_tag.empty() && v.payload != access_.job_tag)
        return note(&Counters::refused_auth, "a client of another job (tag '", v.payload, "') was refused"), false;
      const auth::Mac proof = auth::acceptor_mac(access_.secret, kStoreMagic, c.nonce, v.nonce_c, v.payload);
      queue_reply(c, std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
      c.authed = true;
      std::string rest = c.handshake.substr(v.used);
      c.handshake = std::string();
      return rest.empty() || take(c, rest.data(), rest.size());
    }
    std::vector<StoreRequest> reqs;
    Status s = c.parser.feed(data, n, reqs);
    for (auto& r : reqs) c.queue.push_back(std::move(r));
    serve_queue(c);
    if (!s.ok()) return refuse_and_close(c, s.message());
    if (c.parser.buffered() > limits_.max_value_bytes + StoreLimits::kMaxKeyBytes + 64)
      return refuse_and_close(c, "request larger than the store accepts");
    return true;
  }

  bool refuse_and_close(Client& c, const std::string& why) {
    note(&Counters::dropped_bad, "a client was dropped: ", why);
    queue_reply(c, detail::store_refusal(why));
    c.closing = true;
    c.queue.clear();
    return true;
  }

  bool write_to(Client& c) {
    while (c.out_sent < c.out.size()) {
      ssize_t n = ::send(c.sock.fd(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.out_sent += static_cast<size_t>(n);
      c.out_since = Clock::now();
    }
    release(c.out);
    c.out_sent = 0;
    serve_queue(c);  // what waited behind the backlog
    return true;
  }

  void queue_reply(Client& c, std::string_view bytes) {
    if (c.out_sent == c.out.size()) c.out_since = Clock::now();  // the stall clock starts now
    c.out.append(bytes);
  }

  // Answers queued requests in order until one has to wait, or the client's unread replies
  // reach their cap (the rest are answered as it reads).
  bool backlogged(const Client& c) const { return c.out.size() - c.out_sent >= limits_.queued_limit(); }
  void serve_queue(Client& c) {
    while (!c.waiting && !c.closing && !c.queue.empty() && !backlogged(c)) {
      StoreRequest r = std::move(c.queue.front());
      c.queue.pop_front();
      handle(c, r);
    }
  }

  void handle(Client& c, StoreRequest& r) {
    switch (r.op) {
      case StoreOp::kSet: {
        if (!store(r.key, std::move(r.value))) return queue_reply(c, full_refusal());
        queue_reply(c, std::string(1, '\0'));
        wake(r.key);
        return;
      }
      case StoreOp::kGet:
      case StoreOp::kGetOr: {
        const bool either = r.op == StoreOp::kGetOr;
        if (auto it = data_.find(r.key); it != data_.end()) return queue_reply(c, value_reply(either, 0, it->second));
        if (either)
          if (auto it = data_.find(r.value); it != data_.end()) return queue_reply(c, value_reply(true, 1, it->second));
        c.waiting = true;
        ++c.wait_seq;
        waiters_[r.key].push_back({c.id, c.wait_seq, either, 0});
        if (either) waiters_[r.value].push_back({c.id, c.wait_seq, true, 1});
        return;
      }
      case StoreOp::kAdd: {
        int64_t current = 0;
        if (auto it = data_.find(r.key); it != data_.end() && it->second.size() == 8)
          current = detail::get_pod<int64_t>(it->second.data());
        current += detail::get_pod<int64_t>(r.value.data());
        std::string stored;
        detail::put_pod(stored, current);
        if (!store(r.key, stored)) return queue_reply(c, full_refusal());
        queue_reply(c, std::string(1, '\0') + stored);
        wake(r.key);
        return;
      }
      case StoreOp::kCheck:
        return queue_reply(c, std::string(1, '\0') + std::string(1, data_.count(r.key) ? '\1' : '\0'));
      case StoreOp::kErase: {
        auto it = data_.find(r.key);
        const bool existed = it != data_.end();
        if (existed) {
          held_ -= it->first.size() + it->second.size();
          freed_ += it->first.size() + it->second.size();
          data_.erase(it);
          update_held();
        }
        return queue_reply(c, std::string(1, '\0') + std::string(1, existed ? '\1' : '\0'));
      }
    }
  }

  bool store(const std::string& key, std::string value) {
    auto it = data_.find(key);
    const uint64_t old = it == data_.end() ? 0 : key.size() + it->second.size();
    const uint64_t now = key.size() + value.size();
    if (held_ - old + now > limits_.max_total_bytes) {
      note(&Counters::refusals, "full: a set of ", value.size(), " bytes was refused");
      return false;
    }
    if (value.capacity() > value.size() + value.size() / 4 + 64) value.shrink_to_fit();
    held_ = held_ - old + now;
    if (it == data_.end()) data_.emplace(key, std::move(value));
    else freed_ += it->second.size(), it->second = std::move(value);
    update_held();
    return true;
  }
  std::string full_refusal() const {
    return detail::store_refusal(detail::cat("the store is full: it holds ", held_, " bytes and its limit is ",
                                             limits_.max_total_bytes, " (DCOMM_STORE_MAX_BYTES)"));
  }
  static std::string value_reply(bool either, uint8_t which, const std::string& value) {
    std::string out(1, '\0');
    if (either) out += static_cast<char>(which);
    detail::put_pod<uint64_t>(out, value.size());
    return out + value;
  }

  // Answers the clients waiting for `key`.
  void wake(const std::string& key) {
    auto w = waiters_.find(key);
    if (w == waiters_.end()) return;
    std::vector<Waiter> list = std::move(w->second);
    waiters_.erase(w);
    const std::string value = data_.at(key);  // a copy: answering may change the store
    for (const Waiter& wt : list) {
      auto it = clients_.find(wt.client);
      if (it == clients_.end()) continue;
      Client& c = *it->second;
      if (!c.waiting || c.wait_seq != wt.seq) continue;  // answered already (the other key of a get_or)
      c.waiting = false;
      queue_reply(c, value_reply(wt.either, wt.which, value));
      serve_queue(c);
    }
  }

  // Clients that never finished authenticating, or leave replies unread, are dropped.
  void expire(Clock::time_point now) {
    std::vector<uint64_t> late;
    for (auto& [id, c] : clients_) {
      if (!c->authed && now - c->since > std::chrono::milliseconds(limits_.handshake_ms)) {
        note(&Counters::refused_auth, "a connection did not authenticate within ", limits_.handshake_ms, " ms");
        late.push_back(id);
      } else if (c->out_sent < c->out.size() && now - c->out_since > std::chrono::milliseconds(limits_.stall_ms)) {
        note(&Counters::dropped_stalled, "a client left ", c->out.size() - c->out_sent, " bytes of replies unread for ",
             limits_.stall_ms, " ms (DCOMM_STORE_STALL_MS)");
        late.push_back(id);
      }
    }
    for (uint64_t id : late) drop(id);
  }

  void drop(uint64_t id) {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    freed_ += it->second->out.capacity() + it->second->parser.buffered();
    clients_.erase(it);  // its waiters go lazily (wake() skips unknown clients)
    update_held();
  }
  static void release(std::string& s) {
    if (s.capacity() > (64u << 10)) std::string().swap(s);
    else s.clear();
  }
  // Counters for tests; memory that large frees left in the heap goes back to the system.
  void update_held() {
    if (freed_ > (4u << 20)) {
      malloc_trim(0);
      freed_ = 0;
    }
    std::lock_guard<std::mutex> lock(counters_mu_);
    counters_.bytes_held = held_;
    counters_.clients = clients_.size();
  }

  static constexpr size_t kMaxQueued = 1024;  // parsed requests waiting per client

  struct Waiter {
    uint64_t client, seq;
    bool either;
    uint8_t which;
  };

  Socket listener_;
  StoreAccess access_;
  StoreLimits limits_;
  int wake_fd_;
  int spare_fd_;
  SocketAddress address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::map<uint64_t, std::unique_ptr<Client>> clients_;
  std::map<std::string, std::string> data_;
  std::map<std::string, std::vector<Waiter>> waiters_;
  uint64_t next_id_ = 0;
  uint64_t held_ = 0;
  uint64_t freed_ = 0;
  uint64_t refusals_ = 0;
  Clock::time_point accept_pause_until_{};
  mutable std::mutex counters_mu_;
  Counters counters_;
};

DCOMM_NAMESPACE_END
