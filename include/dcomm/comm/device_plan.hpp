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
//   - the FIFO shape (slots, slot bytes), which must be the same everywhere.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

inline constexpr int kMaxDeviceChannels = 64;

// One rank's facts, swapped at set-up (a plain struct: it travels as bytes).
struct DeviceRankFacts {
  char bus_id[32] = {};      // the GPU's PCI bus id: equal for ranks sharing a GPU
  int sms = 0;               // its multiprocessors
  int resident_per_sm = 0;   // collective kernel blocks one multiprocessor holds at once
  int requested_channels = 0;  // DCOMM_CUDA_CHANNELS (0: by the GPUs)
  int p2p_channels = 0;      // DCOMM_CUDA_P2P_CHANNELS
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
    if (f.requested_channels > 0) requested = requested == 0 ? f.requested_channels : std::min(requested, f.requested_channels);
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
  if (channels > resident) channels = resident, reason = "blocks resident at once on the GPU (over the ranks sharing it)";
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
                              " DCOMM_CUDA_P2P_CHANNELS=", f.p2p_channels, " where rank ", self, " set ", me.nslots, ", ",
                              me.slot_bytes, " and ", me.p2p_channels, ": every rank must set them alike");
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
