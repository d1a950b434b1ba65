// The floor for a small message between two hosts: one TCP socket (TCP_NODELAY), blocking
// calls, an 8-byte ping-pong. bench/peers/netns.sh runs it between the same two network
// namespaces as dcomm-bench send_recv and prints half the round trip beside dcomm's latency.
//   tcp-pingpong server ADDR PORT [iterations]    (in one namespace)
//   tcp-pingpong client ADDR PORT [iterations]    (in the other; prints the result)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {
bool exact(int fd, char* p, size_t n, bool sending) {
  while (n > 0) {
    const ssize_t k = sending ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k, n -= static_cast<size_t>(k);
  }
  return true;
}
int fail(const char* what) {
  std::fprintf(stderr, "tcp-pingpong: %s: %s\n", what, std::strerror(errno));
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || (std::strcmp(argv[1], "server") != 0 && std::strcmp(argv[1], "client") != 0)) {
    std::fprintf(stderr, "usage: tcp-pingpong server|client ADDR PORT [iterations]\n");
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  const int iters = argc > 4 ? std::atoi(argv[4]) : 20000;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[3])));
  if (inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1) return fail("the address is not IPv4");
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (server) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return fail("bind");
    if (::listen(fd, 1) != 0) return fail("listen");
    const int conn = ::accept(fd, nullptr, nullptr);
    ::close(fd);
    fd = conn;
  } else {
    // The server may not listen yet: try for 10 s.
    for (int tries = 0; ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0; ++tries) {
      if (tries == 1000) return fail("connect");
      ::close(fd);
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (fd < 0) return fail("accept");
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char msg[8] = {};
  // A warm-up of a tenth, then the mean over `iters`, as dcomm-bench times its iterations.
  double us = 0;
  for (const int n : {iters / 10, iters}) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const bool ok = server ? exact(fd, msg, sizeof msg, false) && exact(fd, msg, sizeof msg, true)
                             : exact(fd, msg, sizeof msg, true) && exact(fd, msg, sizeof msg, false);
      if (!ok) return fail("the ping-pong broke");
    }
    us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n / 2;
  }
  if (!server) std::printf("%.2f\n", us);
  ::close(fd);
  return 0;
}
