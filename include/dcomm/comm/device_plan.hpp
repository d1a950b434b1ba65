// What the ranks of a device communicator agree on at set-up, decided from facts every rank
// publishes, so that every rank computes the same answer (host code, no CUDA: the CPU tests
// check it):
//   - how each pair of ranks talks: through device memory (one GPU, or peer access) or pinned
//     host memory. Each rank says what it can do towards every peer; a pair uses device memory
//     only when both ends say so (one side with DCOMM_CUDA_P2P_DISABLE=1, or peer access
//     one way only, puts the pair on host memory on both sides);
//   - the number of channels (blocks per collective): DCOMM_CUDA_CHANNELS, else the GPU's
//     multiprocessors over the ranks sharing it, and never more than can be resident at once
//     with some multiprocessors spare: a ring's channels on every rank of a GPU wait on each
//     other, so every block of every sharing rank must be resident together or the kernels
//     deadlock; send/recv groups' grids have the same bound;
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
#include "dcomm/prims/device_prims.hpp"

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
  int p2p_channels = 0;             // blocks per peer and direction in a send/recv group; 0: by the GPUs
  int threads = 512;                // threads per block
  uint32_t nslots = 4;              // slots per FIFO
  uint32_t slot_bytes = 256 << 10;  // bytes per slot
  bool p2p_disable = false;         // pinned host memory between every pair

  static Result<DeviceConfig> from_env() {
    DeviceConfig c;
    auto ch = env_size("DCOMM_CUDA_CHANNELS", c.channels, 0, kMaxDeviceChannels);
    auto pc = env_size("DCOMM_CUDA_P2P_CHANNELS", c.p2p_channels, 0, kMaxDeviceChannels);
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

// Multiprocessors no collective or send/recv block of this path may count on: other kernels
// (the caller's compute, a framework's copies, another process's context) take some at any
// moment, and a ring whose last block is not resident waits for it until the deadline. An
// eighth (two at least) is kept free. Not a timing: a share of the GPU, the same on any GPU.
inline int spare_sms(int sms) { return sms <= 2 ? 0 : std::max(2, sms / 8); }

// What the ranks of a device communicator agree to launch (the same numbers on every rank).
struct DeviceLaunchPlan {
  int channels = 1;      // blocks per collective
  int p2p_channels = 1;  // blocks per lane (one peer, one direction) of a send/recv group
  int p2p_blocks = 1;    // the most blocks one rank's send/recv kernel may have resident
  std::string why;       // what limited the channels (for the log)
};

// The smallest residency bound over the GPUs wins, so the FIFO layout is the same everywhere.
// Every block of every rank sharing a GPU must be resident together, spare multiprocessors
// aside; a send/recv group's lanes all wait on peers' lanes, so its grid has the same bound,
// and p2p_channels shrinks until an all-to-all (a send and a receive lane for every rank,
// itself included) fits in it.
inline DeviceLaunchPlan agree_device_plan(const std::vector<DeviceRankFacts>& facts) {
  int requested = 0, p2p_requested = 0;  // 0: none asked for
  for (const auto& f : facts) {
    if (f.requested_channels > 0)
      requested = requested == 0 ? f.requested_channels : std::min(requested, f.requested_channels);
    if (f.p2p_channels > 0)
      p2p_requested = p2p_requested == 0 ? f.p2p_channels : std::min(p2p_requested, f.p2p_channels);
  }
  long long by_gpus = kMaxDeviceChannels, resident = kMaxDeviceChannels;  // 64-bit: facts are another rank's numbers
  for (size_t r = 0; r < facts.size(); ++r) {
    const long long sharing = ranks_sharing_gpu(facts, r), sms = std::max(0, facts[r].sms);
    const long long usable = sms - spare_sms(static_cast<int>(std::min<long long>(sms, 1 << 20)));
    by_gpus = std::min(by_gpus, std::max(1LL, usable / sharing));
    // A GPU that reported no residency holds one block per multiprocessor at least (any
    // kernel that launches does).
    const long long per_sm = std::max(1, facts[r].resident_per_sm);
    resident = std::min(resident, std::max(1LL, usable * per_sm / sharing));
  }
  DeviceLaunchPlan plan;
  long long channels = requested > 0 ? requested : by_gpus;
  plan.why = requested > 0 ? "DCOMM_CUDA_CHANNELS" : "multiprocessors per rank sharing a GPU, spare ones aside";
  if (channels > resident)
    channels = resident, plan.why = "blocks resident at once on the GPU (over the ranks sharing it, spare ones aside)";
  if (channels > kMaxDeviceChannels) channels = kMaxDeviceChannels, plan.why = "the most channels a FIFO arena holds";
  plan.channels = static_cast<int>(std::max(1LL, channels));
  plan.p2p_blocks = static_cast<int>(resident);
  const long long all_to_all_lanes = 2 * static_cast<long long>(std::max<size_t>(1, facts.size()));
  long long p2p = std::min<long long>(plan.channels, resident / all_to_all_lanes);
  if (p2p_requested > 0) p2p = std::min<long long>(p2p, p2p_requested);
  plan.p2p_channels = static_cast<int>(std::max(1LL, p2p));  // they use the first channels' FIFOs
  return plan;
}
// The collective channels alone (see agree_device_plan).
inline int agree_device_channels(const std::vector<DeviceRankFacts>& facts, std::string* why = nullptr) {
  DeviceLaunchPlan plan = agree_device_plan(facts);
  if (why) *why = plan.why;
  return plan.channels;
}

// A send/recv group of `lanes` lanes launches lanes x p2p_channels blocks, which must all be
// resident with the peers' (a send waits for its receive): a larger group is refused before
// anything is launched, rather than left to wait until the deadline.
inline Status check_p2p_grid(int lanes, const DeviceLaunchPlan& plan, int rank) {
  const long long blocks = static_cast<long long>(lanes) * plan.p2p_channels;
  if (blocks <= plan.p2p_blocks) return {};
  return make_error(ErrorCode::kOutOfResources, "send/recv group on rank ", rank, ": ", lanes,
                    " lanes (peers x directions) of ", plan.p2p_channels, " blocks need ", blocks,
                    " blocks resident at once, and this rank's share of its GPU holds ", plan.p2p_blocks,
                    " (the ranks sharing the GPU, spare multiprocessors aside): split the group");
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
      const size_t un = static_cast<size_t>(n);
      const size_t ab = static_cast<size_t>(a) * un + static_cast<size_t>(b);
      const size_t ba = static_cast<size_t>(b) * un + static_cast<size_t>(a);
      host[ab] = wants_host[ab] || wants_host[ba];
    }
  return host;
}

// This rank's ends of every FIFO, [peer][channel], and its ring's [channel][from prev, to next].
struct DeviceFifos {
  std::vector<DeviceConn> sends, recvs, ring;
};
// The FIFO p -> q lives in q's arena of the pair's kind: `arena(owner, other)` is where
// `owner` keeps the FIFOs of its pair with `other` (null: none mapped); `local` is this
// rank's own device arena (its step counters).
template <class ArenaOf>
Result<DeviceFifos> wire_device_fifos(const ArenaLayout& layout, int me, int n, const DeviceConfig& cfg, char* local,
                                      ArenaOf arena, int prev, int next) {
  const int C = cfg.channels;
  DeviceFifos f;
  f.sends.resize(static_cast<size_t>(n) * static_cast<size_t>(C));
  f.recvs.resize(f.sends.size());
  // The FIFO from `from` to `to` on channel c, seen from this rank's end `role` (0: it sends,
  // 1: it receives): its slots and posted counter in `holder` (the receiver's arena), its
  // freed counter in `other` (the sender's), this rank's step counter for the pair.
  auto fifo = [&](char* holder, int from, char* other, int to, int c, int role) -> DeviceConn {
    const int peer = role == 0 ? to : from;
    return {holder + layout.slots(from, c),
            reinterpret_cast<uint64_t*>(holder + layout.posted(from, c)),
            reinterpret_cast<uint64_t*>(other + layout.freed(to, c)),
            reinterpret_cast<uint64_t*>(local + layout.step(peer, c, role)),
            cfg.nslots,
            cfg.slot_bytes,
            peer};
  };
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    for (int c = 0; c < C; ++c) {
      char* theirs = arena(p, me);  // p's arena, where my FIFO to p lives
      char* mine = arena(me, p);    // my arena, where p's FIFO to me lives
      if (!theirs || !mine) return make_error(ErrorCode::kInternal, "no arena for the pair with rank ", p);
      f.sends[layout.index(p, c)] = fifo(theirs, me, mine, p, c, 0);
      f.recvs[layout.index(p, c)] = fifo(mine, p, theirs, me, c, 1);
    }
  }
  f.ring.resize(2 * static_cast<size_t>(C));
  if (n > 1)
    for (int c = 0; c < C; ++c) {
      f.ring[2 * static_cast<size_t>(c)] = f.recvs[layout.index(prev, c)];
      f.ring[2 * static_cast<size_t>(c) + 1] = f.sends[layout.index(next, c)];
    }
  return f;
}

DCOMM_NAMESPACE_END
