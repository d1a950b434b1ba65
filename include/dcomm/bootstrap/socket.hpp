// Minimal TCP sockets for the bootstrap and the TCP transport. Every blocking step polls with
// a Deadline; sockets are non-blocking, TCP_NODELAY, and close on destruction.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"

DCOMM_NAMESPACE_BEGIN

struct SocketAddress {
  std::string host;
  int port = 0;
  std::string to_string() const { return detail::cat(host, ":", port); }
};

// "host:port" or "[v6]:port".
inline Result<SocketAddress> parse_address(const std::string& text) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return invalid_argument("address '", text, "' is not host:port");
  SocketAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return invalid_argument("address '", text, "' has a bad port");
  a.port = static_cast<int>(port);
  return a;
}

inline Status errno_status(const char* what, int err = errno) {
  return make_error(ErrorCode::kSystemError, what, ": ", std::strerror(err));
}

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Socket& operator=(Socket&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

namespace detail {
inline void tune_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// Waits until fd is ready for `events`; polls in short slices so the deadline is honoured.
inline Status poll_ready(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = static_cast<int>(std::min<long long>(deadline.remaining_ms(), 100));
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) {
      if (p.revents & (POLLERR | POLLNVAL)) return make_error(ErrorCode::kPeerFailure, what, ": connection error");
      return {};
    }
    if (rc < 0 && errno != EINTR) return errno_status(what);
    if (deadline.expired())
      return make_error(ErrorCode::kTimeout, what, ": no progress within ", deadline.budget().count(), " ms");
  }
}

inline Result<sockaddr_storage> resolve(const SocketAddress& addr, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(addr.port);
  int rc = getaddrinfo(addr.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || !res) return invalid_argument("cannot resolve host '", addr.host, "': ", gai_strerror(rc));
  sockaddr_storage ss{};
  std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return ss;
}
}  // namespace detail

// Bound to addr and not listening yet: a port held for later, which refuses connections until
// start_listening() (a successor's store: comm/membership.hpp).
inline Result<Socket> bind_to(const SocketAddress& addr) {
  socklen_t len = 0;
  auto ss = detail::resolve(addr, &len);
  if (!ss.ok()) return ss.status();
  Socket s(::socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) return errno_status("socket");
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&*ss), len) != 0)
    return errno_status(detail::cat("bind to ", addr.to_string()).c_str());
  return s;
}
inline Status start_listening(const Socket& s) {
  if (::listen(s.fd(), 4096) != 0) return errno_status("listen");
  detail::tune_socket(s.fd());
  return {};
}
inline Result<Socket> listen_on(const SocketAddress& addr) {
  auto s = bind_to(addr);
  if (!s.ok()) return s.status();
  DCOMM_RETURN_IF_ERROR(start_listening(*s));
  return s;
}

inline int bound_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

// The local IP address of a connected socket: an address the peer can route back to.
inline std::string local_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  else inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  return buf;
}

// The first IPv4 address of a network interface (DCOMM_SOCKET_IFNAME).
inline Result<std::string> interface_ip(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errno_status("getifaddrs");
  std::string found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && ifname == i->ifa_name) {
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      found = buf;
      break;
    }
  }
  freeifaddrs(list);
  if (found.empty())
    return invalid_argument("DCOMM_SOCKET_IFNAME=", ifname, ": no interface with an IPv4 address by that name");
  return found;
}

// Connects, retrying refused connections (the listener may not be up yet) until the deadline.
inline Result<Socket> connect_to(const SocketAddress& addr, const Deadline& deadline) {
  socklen_t len = 0;
  auto ss = detail::resolve(addr, &len);
  if (!ss.ok()) return ss.status();
  int last_err = 0;
  for (;;) {
    Socket s(::socket(ss->ss_family, SOCK_STREAM, 0));
    if (!s.valid()) return errno_status("socket");
    detail::tune_socket(s.fd());
    int rc = ::connect(s.fd(), reinterpret_cast<sockaddr*>(&*ss), len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s.fd(), POLLOUT, 0};
      int ms = static_cast<int>(std::min<long long>(deadline.remaining_ms() + 1, 1000));
      if (::poll(&p, 1, ms) > 0) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &el);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) return s;
    last_err = errno;
    if (deadline.expired())
      return make_error(ErrorCode::kTimeout, "could not connect to ", addr.to_string(), " within ",
                        deadline.budget().count(), " ms (last error: ", std::strerror(last_err), ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

inline Result<Socket> accept_one(const Socket& listener, const Deadline& deadline) {
  for (;;) {
    DCOMM_RETURN_IF_ERROR(detail::poll_ready(listener.fd(), POLLIN, deadline, "accept"));
    int fd = ::accept(listener.fd(), nullptr, nullptr);
    if (fd >= 0) {
      detail::tune_socket(fd);
      return Socket(fd);
    }
    if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) return errno_status("accept");
  }
}

inline Status send_all(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return make_error(ErrorCode::kPeerFailure, "send failed: ", std::strerror(errno));
    DCOMM_RETURN_IF_ERROR(detail::poll_ready(fd, POLLOUT, deadline, "send"));
  }
  return {};
}

inline Status recv_all(int fd, void* data, size_t bytes, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, 0);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return make_error(ErrorCode::kPeerFailure, "connection closed by the other side");
    if (errno != EAGAIN && errno != EINTR)
      return make_error(ErrorCode::kPeerFailure, "recv failed: ", std::strerror(errno));
    DCOMM_RETURN_IF_ERROR(detail::poll_ready(fd, POLLIN, deadline, "recv"));
  }
  return {};
}

DCOMM_NAMESPACE_END
