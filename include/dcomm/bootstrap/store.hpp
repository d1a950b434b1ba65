// The rendezvous store: a small key-value store over TCP, like torch's TCPStore. One process
// (rank 0, or whoever made the UniqueId) runs StoreServer in a thread; every rank talks to it
// through a StoreClient. Ranks publish what others need to connect to them and wait for what
// they need. get() blocks on the server until the key exists; the client bounds it with a
// deadline.
//
// Wire format, all integers little-endian as on the hosts we run on:
//   greeting: the server sends kStoreGreeting (8 bytes) on accept, so a client that reached
//             some other service on the port knows at once
//   request:  u8 op | u32 key_bytes | key | u64 value_bytes | value   (op: 1 set, 2 get, 3 add)
//   reply:    get -> u64 value_bytes | value;  set -> u8 1;  add -> i64 new value
#pragma once

#include <sys/eventfd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
enum StoreOp : uint8_t { kStoreSet = 1, kStoreGet = 2, kStoreAdd = 3 };
inline constexpr char kStoreGreeting[8] = {'d', 'c', 'o', 'm', 'm', 'K', 'V', '1'};

template <class T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get_pod(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Binary values (UCX worker addresses, RDMA GIDs) as text for the store, and back.
inline std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += digits[b >> 4], out += digits[b & 15];
  }
  return out;
}
inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}
}  // namespace detail

class StoreServer {
 public:
  // Listens on addr (port 0 picks a free port; see address()).
  static Result<std::shared_ptr<StoreServer>> start(const SocketAddress& addr) {
    auto listener = listen_on(addr);
    if (!listener.ok()) return listener.status().with_context(detail::cat("rendezvous store on ", addr.to_string()));
    auto server = std::shared_ptr<StoreServer>(new StoreServer(std::move(*listener)));
    server->address_ = {addr.host, bound_port(server->listener_.fd())};
    server->thread_ = std::thread([s = server.get()] { s->serve(); });
    return server;
  }
  ~StoreServer() {
    stop_ = true;
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
    }
    if (thread_.joinable()) thread_.join();
    ::close(wake_fd_);
  }
  const SocketAddress& address() const { return address_; }

 private:
  struct Client {
    Socket sock;
    std::string in;
  };
  explicit StoreServer(Socket listener) : listener_(std::move(listener)), wake_fd_(eventfd(0, EFD_NONBLOCK)) {}

  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds;
      fds.push_back({listener_.fd(), POLLIN, 0});
      fds.push_back({wake_fd_, POLLIN, 0});
      for (auto& c : clients_) fds.push_back({c->sock.fd(), POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        int fd = ::accept(listener_.fd(), nullptr, nullptr);
        if (fd >= 0) {
          detail::tune_socket(fd);
          auto client = std::make_unique<Client>(Client{Socket(fd), {}});
          if (reply(client.get(), std::string(detail::kStoreGreeting, sizeof detail::kStoreGreeting)))
            clients_.push_back(std::move(client));
        }
      }
      std::vector<Client*> dead;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        Client* c = clients_[i - 2].get();
        char buf[65536];
        ssize_t n = ::recv(c->sock.fd(), buf, sizeof buf, 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          dead.push_back(c);
          continue;
        }
        if (n > 0) c->in.append(buf, static_cast<size_t>(n));
        if (!handle_requests(c)) dead.push_back(c);
      }
      for (Client* c : dead) drop(c);
    }
  }

  // Serves every complete request buffered from c; false when c must be dropped.
  bool handle_requests(Client* c) {
    for (;;) {
      const std::string& in = c->in;
      if (in.size() < 5) return true;
      uint32_t klen = detail::get_pod<uint32_t>(in.data() + 1);
      if (in.size() < 5 + klen + 8) return true;
      uint64_t vlen = detail::get_pod<uint64_t>(in.data() + 5 + klen);
      if (vlen > (1ull << 30)) return false;
      size_t total = 5 + klen + 8 + vlen;
      if (in.size() < total) return true;
      auto op = static_cast<uint8_t>(in[0]);
      std::string key = in.substr(5, klen);
      std::string value = in.substr(5 + klen + 8, vlen);
      c->in.erase(0, total);
      bool ok = true;
      if (op == detail::kStoreSet) {
        data_[key] = value;
        ok = reply(c, std::string(1, '\1'));
        auto waiting = waiters_.equal_range(key);
        for (auto it = waiting.first; it != waiting.second; ++it) reply(it->second, value_reply(value));
        waiters_.erase(waiting.first, waiting.second);
      } else if (op == detail::kStoreGet) {
        auto it = data_.find(key);
        if (it != data_.end()) ok = reply(c, value_reply(it->second));
        else waiters_.emplace(key, c);
      } else if (op == detail::kStoreAdd && value.size() == 8) {
        int64_t current = 0;
        auto it = data_.find(key);
        if (it != data_.end() && it->second.size() == 8) current = detail::get_pod<int64_t>(it->second.data());
        current += detail::get_pod<int64_t>(value.data());
        std::string stored;
        detail::put_pod(stored, current);
        data_[key] = stored;
        ok = reply(c, stored);
      } else {
        return false;
      }
      if (!ok) return false;
    }
  }
  static std::string value_reply(const std::string& value) {
    std::string out;
    detail::put_pod<uint64_t>(out, value.size());
    return out + value;
  }
  static bool reply(Client* c, const std::string& bytes) {
    return send_all(c->sock.fd(), bytes.data(), bytes.size(), Deadline(std::chrono::milliseconds(5000))).ok();
  }
  void drop(Client* c) {
    for (auto it = waiters_.begin(); it != waiters_.end();) it = it->second == c ? waiters_.erase(it) : std::next(it);
    std::erase_if(clients_, [c](const std::unique_ptr<Client>& p) { return p.get() == c; });
  }

  Socket listener_;
  int wake_fd_;
  SocketAddress address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::map<std::string, std::string> data_;
  std::multimap<std::string, Client*> waiters_;
};

class StoreClient {
 public:
  // Connects to the store at addr, or, with port_span > 1, at the first of ports addr.port ..
  // addr.port + port_span - 1 that answers with the store's greeting (a port taken by another
  // service is skipped). Retries until the timeout: the store may not be up yet.
  static Result<std::unique_ptr<StoreClient>> connect(const SocketAddress& addr, std::chrono::milliseconds timeout,
                                                      int port_span = 1) {
    Deadline deadline(timeout);
    Status last;
    for (;;) {
      for (int k = 0; k < port_span; ++k) {
        SocketAddress at{addr.host, addr.port + k};
        auto s = connect_to(at, Deadline(std::chrono::milliseconds(port_span > 1 ? 50 : timeout.count())));
        if (!s.ok()) {
          last = s.status();
          continue;
        }
        char hello[sizeof detail::kStoreGreeting] = {};
        Status h = recv_all(s->fd(), hello, sizeof hello, Deadline(std::chrono::milliseconds(500)));
        if (h.ok() && std::memcmp(hello, detail::kStoreGreeting, sizeof hello) == 0)
          return std::unique_ptr<StoreClient>(new StoreClient(std::move(*s), at, timeout));
        last = make_error(ErrorCode::kPeerFailure, at.to_string(), " is not a dcomm rendezvous store");
      }
      if (deadline.expired())
        return last.with_context(detail::cat("cannot reach the rendezvous store at ", addr.to_string(),
                                             port_span > 1 ? detail::cat(" (or the next ", port_span - 1, " ports)") : ""));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  Status set(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu_);
    DCOMM_RETURN_IF_ERROR(request(detail::kStoreSet, key, value));
    char ack = 0;
    return receive(&ack, 1, key);
  }

  // Waits (up to the timeout) until some rank sets `key`.
  Result<std::string> get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    DCOMM_RETURN_IF_ERROR(request(detail::kStoreGet, key, {}));
    uint64_t len = 0;
    DCOMM_RETURN_IF_ERROR(receive(&len, sizeof len, key));
    std::string value(len, '\0');
    DCOMM_RETURN_IF_ERROR(receive(value.data(), len, key));
    return value;
  }

  Result<int64_t> add(const std::string& key, int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string v;
    detail::put_pod(v, delta);
    DCOMM_RETURN_IF_ERROR(request(detail::kStoreAdd, key, v));
    int64_t result = 0;
    DCOMM_RETURN_IF_ERROR(receive(&result, sizeof result, key));
    return result;
  }

  const SocketAddress& server_address() const { return addr_; }
  // The IP address this host used to reach the store: routable from the other ranks.
  std::string local_address() const { return local_ip(sock_.fd()); }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  StoreClient(Socket s, SocketAddress addr, std::chrono::milliseconds timeout)
      : sock_(std::move(s)), addr_(std::move(addr)), timeout_(timeout) {}

  Status request(uint8_t op, const std::string& key, const std::string& value) {
    if (!sock_.valid()) return make_error(ErrorCode::kAborted, "rendezvous store connection was lost earlier");
    std::string msg(1, static_cast<char>(op));
    detail::put_pod<uint32_t>(msg, static_cast<uint32_t>(key.size()));
    msg += key;
    detail::put_pod<uint64_t>(msg, value.size());
    msg += value;
    Status s = send_all(sock_.fd(), msg.data(), msg.size(), Deadline(timeout_));
    if (!s.ok()) sock_.close();
    return s.with_context(detail::cat("rendezvous store ", addr_.to_string()));
  }
  Status receive(void* buf, size_t bytes, const std::string& key) {
    Status s = recv_all(sock_.fd(), buf, bytes, Deadline(timeout_));
    if (s.ok()) return s;
    sock_.close();  // a late reply would desynchronize the stream
    if (s.code() == ErrorCode::kTimeout)
      return make_error(ErrorCode::kTimeout, "rendezvous store ", addr_.to_string(), ": key '", key,
                        "' was not published within ", timeout_.count(), " ms");
    return s.with_context(detail::cat("rendezvous store ", addr_.to_string()));
  }

  std::mutex mu_;
  Socket sock_;
  SocketAddress addr_;
  std::chrono::milliseconds timeout_;
};

DCOMM_NAMESPACE_END
