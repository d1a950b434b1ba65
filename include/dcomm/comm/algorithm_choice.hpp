// Which algorithm runs a collective. A pure function of the call and of facts every rank
// shares (size, config, whether single copy works), so all ranks pick the same one: they must,
// since the algorithms exchange different messages. The thresholds are measured choices
// (docs/environment.md); issue 4's cost model replaces them.
#pragma once

#include <algorithm>
#include <cstddef>

#include "dcomm/algo/direct.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"

DCOMM_NAMESPACE_BEGIN

// kSingleCopyIfRegistered: single copy when every rank's output came from dcomm::mem_alloc
// (known to all ranks once the descriptors are swapped), else the ring.
enum class Algorithm { kRing, kDirect, kSingleCopy, kSingleCopyIfRegistered };

inline const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kSingleCopy: return "single-copy";
    case Algorithm::kSingleCopyIfRegistered: return "single-copy-if-registered";
  }
  return "?";
}

struct CallShape {
  OpKind kind;
  size_t count;       // as in OpDesc
  size_t elem_bytes;
  int ranks;
  bool in_place;

  // nccl-tests' size: the largest buffer (all_gather's output, reduce_scatter's input).
  size_t bytes() const {
    bool per_rank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
    return count * elem_bytes * (per_rank ? static_cast<size_t>(ranks) : 1);
  }
  size_t output_bytes() const {
    return count * elem_bytes * (kind == OpKind::kAllGather ? static_cast<size_t>(ranks) : 1);
  }
};

// The algorithms that talk to every peer (direct, single copy) connect them all; they serve
// groups up to this size.
inline constexpr int kAllPeerMaxRanks = 8;

inline Algorithm choose_algorithm(const CallShape& c, const Config& config, bool single_copy) {
  if (c.ranks < 2 || c.ranks > kAllPeerMaxRanks || c.count == 0) return Algorithm::kRing;
  const size_t bytes = c.bytes();
  // Small all_reduce: one exchange of whole buffers instead of 2(n-1) ring steps.
  if (c.kind == OpKind::kAllReduce && bytes <= std::min({config.direct_bytes, kDirectMaxBytes, config.slot_bytes}))
    return Algorithm::kDirect;
  if (!single_copy) return Algorithm::kRing;
  switch (c.kind) {
    case OpKind::kAllGather:
    case OpKind::kBroadcast:
      return config.cma_bytes && bytes >= config.cma_bytes ? Algorithm::kSingleCopy : Algorithm::kRing;
    case OpKind::kReduceScatter:
    case OpKind::kAllReduce:
      // Out of place past the streaming threshold, the ring (its staging stays in cache, its
      // output is streamed) moves less memory than single copy through the kernel, whose
      // writes into a peer's output read each line first (all_reduce) and whose reads pin
      // every page (reduce_scatter). In place single copy stays ahead. With every rank's
      // buffers from dcomm::mem_alloc, single copy reaches them by plain loads and streaming
      // stores and wins at every size; the ranks learn that from the descriptors it swaps
      // first, so this choice is deferred to them.
      if (!config.cma_reduce_bytes || bytes < config.cma_reduce_bytes) return Algorithm::kRing;
      return c.in_place || bytes < config.stream_bytes ? Algorithm::kSingleCopy : Algorithm::kSingleCopyIfRegistered;
    default: return Algorithm::kRing;
  }
}

// Streaming stores pay off for a large output that is not also the input (in place, the
// lines are in cache already and streaming would only evict them).
inline bool stream_output(const CallShape& c, const Config& config) {
  return !c.in_place && c.output_bytes() >= config.stream_bytes;
}

DCOMM_NAMESPACE_END
