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

enum class Algorithm { kRing, kDirect, kSingleCopy };

inline const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kSingleCopy: return "single-copy";
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
    case OpKind::kAllReduce:
      // Out of place past the streaming threshold, the ring (its staging stays in cache, its
      // output is streamed) moves less memory than the kernel's writes into the peers'
      // outputs, which read each line first. In place those lines were just read, so single
      // copy stays ahead. reduce_scatter and reduce measured as fast on the ring.
      return config.cma_reduce_bytes && bytes >= config.cma_reduce_bytes && (c.in_place || bytes < config.stream_bytes)
                 ? Algorithm::kSingleCopy
                 : Algorithm::kRing;
    default: return Algorithm::kRing;
  }
}

// Streaming stores pay off for a large output that is not also the input (in place, the
// lines are in cache already and streaming would only evict them).
inline bool stream_output(const CallShape& c, const Config& config) {
  return !c.in_place && c.output_bytes() >= config.stream_bytes;
}

DCOMM_NAMESPACE_END
