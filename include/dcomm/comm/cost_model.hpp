// The cost model behind the algorithm choice: time = latency x steps + bytes / bandwidth, per
// algorithm, from the call's shape and a link model (alpha: microseconds per dependent message
// step; beta: microseconds per byte moved to a peer; gamma: microseconds per byte reduced).
// Pure functions, so every rank predicts the same times; the steps and bytes of each
// algorithm are those of docs/algorithms.md.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>

#include "dcomm/comm/op.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

inline Algorithm algorithm_named(const std::string& name) { return parse_algorithm(name).value_or(Algorithm::kRing); }

struct CallShape {
  OpKind kind;
  size_t count;  // as in OpDesc
  size_t elem_bytes;
  int ranks;
  bool in_place;
  int hosts = 1;  // hosts the ranks are on (each with at most ceil(ranks / hosts) of them)

  // nccl-tests' size: the largest buffer (all_gather's output, reduce_scatter's input).
  size_t bytes() const {
    bool per_rank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
    return count * elem_bytes * (per_rank ? static_cast<size_t>(ranks) : 1);
  }
  size_t output_bytes() const {
    return count * elem_bytes * (kind == OpKind::kAllGather ? static_cast<size_t>(ranks) : 1);
  }
  // The most ranks any one host has.
  int ranks_per_host() const { return (ranks + std::max(hosts, 1) - 1) / std::max(hosts, 1); }
};

struct LinkModel {
  double alpha_us = 0.3;                    // one message step between two ranks (slot handoff)
  double beta_us_per_byte = 1.0 / 5000;     // 5 GB/s through a staging FIFO (a copy in, a copy out)
  double gamma_us_per_byte = 1.0 / 10000;   // 10 GB/s reduction (two reads, one write)
  size_t slice_bytes = size_t{512} * 1024;  // pipeline unit of the trees and chains (one slot)
  size_t cache_bytes = 1 << 20;             // messages up to this size are modelled as in cache
  // Between hosts (TCP by default): a step and a byte over the network.
  double net_alpha_us = 20;
  double net_beta_us_per_byte = 1.0 / 1000;  // 1 GB/s
  double load = 1;                           // ranks per core on the busiest host

  // With more ranks than cores on a host (`load` = ranks per core, the largest on any host),
  // each rank gets 1/load of a core for its copies, and a step waits for the peer to be
  // scheduled: measured here with 8 ranks on 2 cores, a step took about 5 us (0.3 x 4^2).
  static LinkModel for_load(double load) {
    LinkModel m;
    const double l = std::max(1.0, load);
    m.load = l;
    m.alpha_us *= l * l;
    m.beta_us_per_byte *= l;
    m.gamma_us_per_byte *= l;
    return m;
  }
};

// DCOMM_LINK_MODEL_FILE's one line: the load it was measured under and the three fitted
// values. Nothing when the text is not that line or a value is not a positive finite number.
struct LinkModelFile {
  double load = 0, alpha_us = 0, beta_us_per_byte = 0, gamma_us_per_byte = 0;
};
inline std::string format_link_model(const LinkModelFile& f) {
  char line[256];
  std::snprintf(line, sizeof line, "load %.17g alpha_us %.17g beta_us_per_byte %.17g gamma_us_per_byte %.17g\n", f.load,
                f.alpha_us, f.beta_us_per_byte, f.gamma_us_per_byte);
  return line;
}
inline std::optional<LinkModelFile> parse_link_model(const std::string& text) {
  LinkModelFile f;
  int used = 0;
  if (std::sscanf(text.c_str(), "load %lf alpha_us %lf beta_us_per_byte %lf gamma_us_per_byte %lf %n", &f.load,
                  &f.alpha_us, &f.beta_us_per_byte, &f.gamma_us_per_byte, &used) != 4)
    return std::nullopt;
  if (text.find_first_not_of(" \t\r\n", static_cast<size_t>(used)) != std::string::npos) return std::nullopt;
  for (double v : {f.load, f.alpha_us, f.beta_us_per_byte, f.gamma_us_per_byte})
    if (!std::isfinite(v) || v <= 0) return std::nullopt;
  return f;
}

// How much slower than its byte count says each schedule over all peers moved data, against
// the ring (8 ranks, 4-32 MiB, this machine): they receive into a buffer and reduce in a second
// pass where the ring's primitives fuse both, and their exchanges are not pipelined across
// steps. Multiplies their byte terms.
inline constexpr double kRecursiveDoublingBytesFactor = 2.3;
inline constexpr double kRabenseifnerBytesFactor = 4.7;
inline constexpr double kTreeBytesFactor = 0.7;
inline constexpr double kHalvingDoublingBytesFactor = 2.3;
// In cache the others' copies run about 4x faster (below); recursive doubling's only about
// 2x: each step folds the whole buffer from a second one (8 ranks, 4-32 KiB, median of 3).
inline constexpr double kRecursiveDoublingInCacheSlowdown = 2.0;

inline double predict_us(Algorithm a, const CallShape& c, const LinkModel& m);

// Hierarchical all_reduce: a binary tree reduce and broadcast within each host, Rabenseifner
// among the hosts' leaders over the network.
inline double predict_hierarchical_us(const CallShape& c, const LinkModel& m) {
  CallShape local = c, leaders = c;
  local.ranks = c.ranks_per_host(), local.hosts = 1;
  leaders.ranks = c.hosts, leaders.hosts = c.hosts;
  return predict_us(Algorithm::kTree, local, m) + predict_us(Algorithm::kRabenseifner, leaders, m);
}

// The ring over several hosts, ordered by host: a pipeline whose every step moves a chunk (1/n of
// the buffer) over every link at once. Only the steps' crossings of a host's network link (hosts
// of the n links) go at the network's latency and speed; the rest at the host's own. Its time is
// the longer of its busiest link's bytes (each host's network link carries every step's chunk,
// one latency to fill) and a chunk's way round (each hop at its own link's latency and speed).
// The simulator agrees (dcomm-sim plan, 16 hosts x 8 GPUs, 25 MiB: 1,045 us, this 1,045).
inline double predict_ring_across_hosts_us(const CallShape& c, const LinkModel& m) {
  const double n = c.ranks, chunk = static_cast<double>(c.bytes()) / n;
  const double steps = c.kind == OpKind::kAllReduce ? 2 * (n - 1) : n - 1;
  const double reduce_steps = c.kind == OpKind::kAllGather ? 0 : n - 1;
  const double crossing = std::min(1.0, c.hosts / n);
  const double reduce = reduce_steps * chunk * m.gamma_us_per_byte;
  const double busiest = m.net_alpha_us + steps * chunk * m.net_beta_us_per_byte;
  const double way_round = steps * ((1 - crossing) * (m.alpha_us + chunk * m.beta_us_per_byte) +
                                    crossing * (m.net_alpha_us + chunk * m.net_beta_us_per_byte));
  return std::max(busiest, way_round) + reduce;
}

// Predicted microseconds of algorithm `a` for call `c` (per rank; the slowest rank's time).
// Across hosts every flat algorithm has steps that cross the network, so its steps and
// bytes are costed at the network's parameters.
inline double predict_us(Algorithm a, const CallShape& c, const LinkModel& m_in) {
  if (a == Algorithm::kHierarchical) return c.hosts > 1 ? predict_hierarchical_us(c, m_in) : 1e300;
  if (a == Algorithm::kOrdered) return predict_us(Algorithm::kRabenseifner, c, m_in);  // two exchanges, ring's bytes
  const bool ring_collective =
      c.kind == OpKind::kAllReduce || c.kind == OpKind::kReduceScatter || c.kind == OpKind::kAllGather;
  if (a == Algorithm::kRing && ring_collective && c.hosts > 1) return predict_ring_across_hosts_us(c, m_in);
  LinkModel m = m_in;
  if (c.hosts > 1) {
    // A chain ordered by host (broadcast's and reduce's ring) crosses each host's network link
    // once; the other schedules have every rank of a host send across the network at once,
    // sharing its link. (The ring collectives: predict_ring_across_hosts_us.)
    const double per_host = c.ranks_per_host();
    m.alpha_us = m.net_alpha_us;
    m.beta_us_per_byte = m.net_beta_us_per_byte * (a == Algorithm::kRing ? 1.0 : per_host);
  }
  // The byte factors are memory passes; over the network the link, not memory, is the limit.
  auto local = [&](double factor) { return c.hosts > 1 ? 1.0 : factor; };
  const double n = c.ranks, S = static_cast<double>(c.bytes());
  double p = 1;
  while (p * 2 <= n) p *= 2;
  const double L = std::log2(p), fold = n > p ? 1 : 0;
  const double depth = std::floor(std::log2(n));
  const double slice = std::min(S, static_cast<double>(m.slice_bytes));
  // Messages that stay in cache copy and reduce about 4x faster (measured at 32 KiB against
  // 4 MiB and up on 8 ranks).
  const double in_cache = S <= static_cast<double>(m.cache_bytes) ? 0.25 : 1.0;
  const double al = m.alpha_us, ga = m.gamma_us_per_byte * in_cache;
  const double be = m.beta_us_per_byte * (c.hosts > 1 ? 1.0 : in_cache);  // the network is no faster for it
  if (n < 2) return 0;
  // Direct is one step, but every rank waits for all n-1 others to have sent: fitted to 8
  // ranks on 2 cores, where all_reduce took about 3 steps' time (recursive doubling's 3 took 5).
  const double direct_steps = std::max(1.0, std::log2(n) - 0.5);
  switch (c.kind) {
    case OpKind::kAllReduce:
      switch (a) {
        case Algorithm::kRecursiveDoubling: {
          const double slow = in_cache < 1 && c.hosts == 1 ? kRecursiveDoublingInCacheSlowdown : 1.0;
          return (L + 2 * fold) * al +
                 slow * local(kRecursiveDoublingBytesFactor) * ((L + 2 * fold) * S * be + (L + fold) * S * ga);
        }
        case Algorithm::kRabenseifner:
          return (2 * L + 2 * fold) * al + local(kRabenseifnerBytesFactor) *
                                               ((2 * (p - 1) / p + 2 * fold) * S * be + ((p - 1) / p + fold) * S * ga);
        case Algorithm::kDoubleTree:
          // Across hosts: two trees on half the data each, no rank interior in both, so each
          // link carries less. On one host the ranks' copies share the same cores either way,
          // and the second tree's messages cost steps: measured 1.0-1.8x the single tree on 8
          // ranks over 2 cores, never faster.
          if (c.hosts == 1) return predict_us(Algorithm::kTree, c, m_in) + depth * al;
          return 2 * depth * al +
                 local(kTreeBytesFactor) * (2 * (depth - 1) * slice * (be + ga) + 3 * S * be + 1.5 * S * ga);
        case Algorithm::kTree:  // reduce then broadcast, each pipelined down a binary tree
          return 2 * depth * al +
                 local(kTreeBytesFactor) * (2 * (depth - 1) * slice * (be + ga) + 4 * S * be + 2 * S * ga);
        case Algorithm::kDirect: return direct_steps * al + (n - 1) * S * (be + ga);
        default: return 2 * (n - 1) * al + 2 * (n - 1) / n * S * be + (n - 1) / n * S * ga;
      }
    case OpKind::kReduceScatter:
      if (a == Algorithm::kDirect) return direct_steps * al + (n - 1) / n * S * (be + ga);
      if (a == Algorithm::kHalvingDoubling)  // plus a working copy of the input
        return (L + 2 * fold) * al + local(kHalvingDoublingBytesFactor) *
                                         (((p - 1) / p + fold + fold / n) * S * be + ((p - 1) / p + fold + 1) * S * ga);
      return (n - 1) * al + (n - 1) / n * S * (be + ga);
    case OpKind::kAllGather:
      if (a == Algorithm::kDirect) return direct_steps * al + (n - 1) / n * S * be;
      if (a == Algorithm::kHalvingDoubling)
        return (L + 2 * fold) * al + local(kHalvingDoublingBytesFactor) * ((p - 1) / p + fold) * S * be;
      return (n - 1) * al + (n - 1) / n * S * be;
    case OpKind::kBroadcast:
      if (a == Algorithm::kTree) return depth * al + local(kTreeBytesFactor) * ((depth - 1) * slice * be + 2 * S * be);
      return (n - 1) * al + (n - 2) * slice * be + S * be;
    case OpKind::kReduce:
      if (a == Algorithm::kTree)
        return depth * al + local(kTreeBytesFactor) * ((depth - 1) * slice + 2 * S) * (be + ga);
      return (n - 1) * al + (n - 2) * slice * (be + ga) + S * (be + ga);
    default: return 0;
  }
}

DCOMM_NAMESPACE_END
