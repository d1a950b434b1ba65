// A rendezvous store in a process of its own, for the hostile-client tests (its memory and
// CPU are then its own to measure, and its descriptor limit can be low):
//   dcomm-test-store FD_LIMIT HANDSHAKE_MS STALL_MS MAX_VALUE_BYTES SECRET_HEX|-
// prints "port N", then its counters every 100 ms ("counters accepted=... clients=... held=..."),
// and serves until killed.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <dcomm/bootstrap/store.hpp>

using namespace dcomm;

int main(int argc, char** argv) {
  if (argc != 6)
    return std::fprintf(stderr, "usage: %s FD_LIMIT HANDSHAKE_MS STALL_MS MAX_VALUE SECRET|-\n", argv[0]), 2;
  rlimit rl{static_cast<rlim_t>(std::atol(argv[1])), static_cast<rlim_t>(std::atol(argv[1]))};
  if (rl.rlim_cur > 0 && setrlimit(RLIMIT_NOFILE, &rl) != 0) return std::perror("setrlimit"), 2;
  StoreLimits limits;
  limits.handshake_ms = std::atoi(argv[2]);
  limits.stall_ms = std::atoi(argv[3]);
  limits.max_value_bytes = std::strtoull(argv[4], nullptr, 10);
  StoreAccess access;
  if (std::string(argv[5]) != "-") access.secret = *JobSecret::from_text(argv[5], "secret");
  auto server = StoreServer::start({"127.0.0.1", 0}, access, limits);
  if (!server.ok()) return std::fprintf(stderr, "%s\n", server.status().message().c_str()), 1;
  std::printf("port %d\n", (*server)->address().port);
  std::fflush(stdout);
  std::string printed;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto c = (*server)->counters();
    char line[512];
    std::snprintf(line, sizeof line,
                  "counters accepted=%llu refused_auth=%llu refused_busy=%llu dropped_stalled=%llu dropped_bad=%llu "
                  "clients=%llu held=%llu\n",
                  (unsigned long long)c.accepted, (unsigned long long)c.refused_auth,
                  (unsigned long long)c.refused_busy, (unsigned long long)c.dropped_stalled,
                  (unsigned long long)c.dropped_bad, (unsigned long long)c.clients, (unsigned long long)c.bytes_held);
    if (printed == line) continue;  // only changes (the test reads them; the pipe must not fill)
    printed = line;
    std::fputs(line, stdout);
    std::fflush(stdout);
  }
}
