// What the ranks of a device communicator agree on at set-up, decided from facts every rank
// publishes, so that every rank computes the same answer (host code, no CUDA: the CPU tests
// check it):
//   - how each pair of ranks talks: through device memory (one GPU, or peer access) or pinned
//     host memory. Each rank says what it can do towards every peer; a pair uses device memory
//     only when both ends say so (one side with DCOMM_CUDA_P2P_DISABLE=1, or peer access
//     one way only, puts the pair on host memory on both sides);
//   - the number of channels (blocks per collective): DCOMM_CUDA_CHANNELS, else the GPU's
//     multiprocessors over the ranks sharing it, and never more than can be resident at once:
//     a ring's channels on every rank of a GPU wait on each other, so every block of every
//     sharing rank must be resident together or the kernels deadlock;
//   - the FIFO shape (slots, slot bytes), which must be the same everywhere, and where each
//     FIFO lies in its owner's arena (ArenaLayout).
// With the sizes a user sets (DeviceConfig).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

inline constexpr int kMaxDeviceChannels = 64;
// Up to 512 threads a block (DCOMM_CUDA_THREADS). The bound gives the kernels up to 128
// registers a thread, which they use without spilling (at 1024 threads, 64 registers, the
// reduction loops spilled); one block fills a multiprocessor's registers, so channels, not
// threads, scale a collective across the GPU.
inline constexpr int kMaxDeviceThreads = 512;

// Sizes of the device path (environment: DCOMM_CUDA_CHANNELS, DCOMM_CUDA_P2P_CHANNELS,
// DCOMM_CUDA_THREADS, DCOMM_CUDA_SLOTS, DCOMM_CUDA_SLOT_BYTES, DCOMM_CUDA_P2P_DISABLE).
struct DeviceConfig {
  int channels = 0;                 // blocks per collective, each its own ring; 0: by the GPUs
  int p2p_channels = 2;             // blocks per peer and direction in a send/recv group
  int threads = 512;                // threads per block
  uint32_t nslots = 4;              // slots per FIFO
  uint32_t slot_bytes = 256 << 10;  // bytes per slot
  bool p2p_disable = false;         // pinned host memory between every pair

  static Result<DeviceConfig> from_env() {
    DeviceConfig c;
    auto ch = env_size("DCOMM_CUDA_CHANNELS", c.channels, 0, kMaxDeviceChannels);
    auto pc = env_size("DCOMM_CUDA_P2P_CHANNELS", c.p2p_channels, 1, kMaxDeviceChannels);
    auto th = env_size("DCOMM_CUDA_THREADS", c.threads, 32, kMaxDeviceThreads);
    auto sl = env_size("DCOMM_CUDA_SLOTS", c.nslots, 2, 64);
    auto sb = env_size("DCOMM_CUDA_SLOT_BYTES", c.slot_bytes, 1024, 64u << 20);
    for (const Status& s : {ch.status(), pc.status(), th.status(), sl.status(), sb.status()}) DCOMM_RETURN_IF_ERROR(s);
    c.channels = static_cast<int>(*ch);
    c.p2p_channels = static_cast<int>(*pc);
    c.threads = static_cast<int>(*th) / 32 * 32;
    c.nslots = static_cast<uint32_t>(*sl);
    c.slot_bytes = static_cast<uint32_t>(*sb) / 16 * 16;
    c.p2p_disable = env_or("DCOMM_CUDA_P2P_DISABLE", "0") != "0";
    return c;
  }
};

// Every rank's arena of FIFOs (transport/cuda_ipc.cuh's memory): for peer p and channel c,
// the FIFO from p (slots, then its posted counter), the freed counter of the FIFO to p, and
// this rank's step counters.
struct ArenaLayout {
  size_t ranks, channels, fifo_bytes;
  static constexpr size_t kLine = 128;  // counters on their own cache lines
  size_t index(int p, int c) const { return static_cast<size_t>(p) * channels + static_cast<size_t>(c); }
  size_t slots(int p, int c) const { return index(p, c) * fifo_bytes; }
  size_t posted(int p, int c) const { return ranks * channels * fifo_bytes + index(p, c) * kLine; }
  size_t freed(int p, int c) const { return ranks * channels * (fifo_bytes + kLine) + index(p, c) * kLine; }
  size_t step(int p, int c, int role) const {
    return ranks * channels * (fifo_bytes + 2 * kLine) + (index(p, c) * 2 + static_cast<size_t>(role)) * 8;
  }
  size_t bytes() const { return ranks * channels * (fifo_bytes + 2 * kLine + 16); }
};

// One rank's facts, swapped at set-up (a plain struct: it travels as bytes).
struct DeviceRankFacts {
  char bus_id[32] = {};        // the GPU's PCI bus id: equal for ranks sharing a GPU
  int sms = 0;                 // its multiprocessors
  int resident_per_sm = 0;     // collective kernel blocks one multiprocessor holds at once
  int requested_channels = 0;  // DCOMM_CUDA_CHANNELS (0: by the GPUs)
  int p2p_channels = 0;        // DCOMM_CUDA_P2P_CHANNELS
  uint32_t nslots = 0;
  uint32_t slot_bytes = 0;
  int threads = 0;
};

// Ranks [0, n) sharing the GPU of rank r (its bus id).
inline int ranks_sharing_gpu(const std::vector<DeviceRankFacts>& facts, size_t r) {
  int sharing = 0;
  for (const auto& g : facts) sharing += std::strcmp(facts[r].bus_id, g.bus_id) == 0;
  return std::max(1, sharing);
}

// The channels every rank uses. The smallest residency bound over the GPUs wins, so the FIFO
// layout is the same everywhere; `why` says what limited it (for the log).
inline int agree_device_channels(const std::vector<DeviceRankFacts>& facts, std::string* why = nullptr) {
  int requested = 0;
  for (const auto& f : facts)
    if (f.requested_channels > 0)
      requested = requested == 0 ? f.requested_channels : std::min(requested, f.requested_channels);
  long long by_gpus = kMaxDeviceChannels, resident = kMaxDeviceChannels;  // 64-bit: facts are another rank's numbers
  for (size_t r = 0; r < facts.size(); ++r) {
    const long long sharing = ranks_sharing_gpu(facts, r), sms = std::max(0, facts[r].sms);
    by_gpus = std::min(by_gpus, std::max(1LL, sms / sharing));
    // Every block of every sharing rank at once; a GPU that reported no residency holds one
    // block per multiprocessor at least (any kernel that launches does).
    const long long per_sm = std::max(1, facts[r].resident_per_sm);
    resident = std::min(resident, std::max(1LL, sms * per_sm / sharing));
  }
  long long channels = requested > 0 ? requested : by_gpus;
  std::string reason = requested > 0 ? "DCOMM_CUDA_CHANNELS" : "multiprocessors per rank sharing a GPU";
  if (channels > resident)
    channels = resident, reason = "blocks resident at once on the GPU (over the ranks sharing it)";
  if (channels > kMaxDeviceChannels) channels = kMaxDeviceChannels, reason = "the most channels a FIFO arena holds";
  if (why) *why = reason;
  return static_cast<int>(std::max(1LL, channels));
}

// Everything that shapes the FIFO arenas must match: a rank with other DCOMM_CUDA_SLOTS or
// DCOMM_CUDA_SLOT_BYTES would read its peers' FIFOs wrong.
inline Status check_device_shapes(const std::vector<DeviceRankFacts>& facts, int self) {
  const DeviceRankFacts& me = facts[static_cast<size_t>(self)];
  for (size_t r = 0; r < facts.size(); ++r) {
    const DeviceRankFacts& f = facts[r];
    if (f.nslots != me.nslots || f.slot_bytes != me.slot_bytes || f.p2p_channels != me.p2p_channels)
      return invalid_argument("rank ", r, " set DCOMM_CUDA_SLOTS=", f.nslots, " DCOMM_CUDA_SLOT_BYTES=", f.slot_bytes,
                              " DCOMM_CUDA_P2P_CHANNELS=", f.p2p_channels, " where rank ", self, " set ", me.nslots,
                              ", ", me.slot_bytes, " and ", me.p2p_channels, ": every rank must set them alike");
  }
  return {};
}

// `wants_host[a * n + b]`: rank a would talk to rank b through host memory. The agreed
// answer for the pair is the same seen from either end: host memory if either end wants it.
inline std::vector<uint8_t> agree_pair_paths(const std::vector<uint8_t>& wants_host, int n) {
  std::vector<uint8_t> host(static_cast<size_t>(n) * static_cast<size_t>(n), 0);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      const size_t ab = static_cast<size_t>(a * n + b), ba = static_cast<size_t>(b * n + a);
      host[ab] = wants_host[ab] || wants_host[ba];
    }
  return host;
}

DCOMM_NAMESPACE_END
