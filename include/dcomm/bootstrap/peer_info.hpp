// What the bootstrap learns about each rank (the roster), and the probe word a rank publishes
// for peers to test that they can read its memory directly (transport/cma.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// What the bootstrap learned about a rank.
struct PeerInfo {
  int rank = -1;
  std::string hostname;
  std::string host_id;  // equal for ranks that can share memory (same machine, IPC and net namespace)
  int pid = 0;
  std::string address;      // host:port this rank's mesh listener accepts on
  std::string spare;        // host:port held for a store this rank may serve later (a shrink's)
  uint64_t process_id = 0;  // unique per process (threads as ranks share it)
  uint64_t probe_addr = 0;  // where this process keeps its cross-memory-attach probe word
  bool rdma = false;        // the host has an RDMA device (/sys/class/infiniband)
  int built = 0;            // optional transports compiled in: kBuiltUcx | kBuiltVerbs
  static constexpr int kBuiltUcx = 1, kBuiltVerbs = 2;

  std::string describe() const { return detail::cat("rank ", rank, " (host ", hostname, ", pid ", pid, ")"); }
};

namespace detail {
inline constexpr uint64_t kProbeMagic = 0x64636f6d6d434d41ull;  // "dcommCMA"
// A word every process holds at a known address, for peers to test that they can read us.
inline const volatile uint64_t& cma_probe_word() {
  static const volatile uint64_t word = kProbeMagic;
  return word;
}
}  // namespace detail

DCOMM_NAMESPACE_END
