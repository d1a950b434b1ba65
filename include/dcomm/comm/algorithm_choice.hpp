// Which algorithm runs a collective. A pure function of the call and of facts every rank
// shares (size, config, whether single copy works), so all ranks pick the same one: they must,
// since the algorithms exchange different messages.
//
// In order: an algorithm forced by DCOMM_ALGO (when it can run this call); single copy, direct
// and recursive doubling where their measured thresholds say (docs/environment.md); otherwise
// the cost model (comm/cost_model.hpp) picks the candidate with the least predicted time, and
// DCOMM_DEBUG_SUBSYS=TUNING logs every candidate's prediction.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dcomm/algo/direct.hpp"
#include "dcomm/algo/p2p.hpp"
#include "dcomm/comm/cost_model.hpp"
#include "dcomm/comm/duel.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"

DCOMM_NAMESPACE_BEGIN

// The algorithms that talk to every peer through single copy or one direct exchange serve
// groups up to this size.
inline constexpr int kAllPeerMaxRanks = 8;

// The collectives' index in Config::algo (DCOMM_ALGO).
inline int algo_index(OpKind k) { return static_cast<int>(k); }

// The algorithms that can run this call (the cost model's candidates, plus the measured ones),
// from core/algorithms.hpp's list: direct only for a few KiB in a group of up to
// kAllPeerMaxRanks, hierarchical only over several hosts with more than one rank on some,
// single copy only where every rank reaches every other; the deferred single copy and the
// ordered reductions are never the cost model's to choose.
inline std::vector<Algorithm> candidates(const CallShape& c, const Config& config, bool single_copy) {
  const bool all_peer = c.ranks >= 2 && c.ranks <= kAllPeerMaxRanks;
  const bool direct = all_peer && c.bytes() <= std::min({kDirectMaxBytes, config.slot_bytes});
  std::vector<Algorithm> out;
  for (const AlgorithmFor& f : kAlgorithmsFor) {
    if (f.kind != c.kind) continue;
    switch (f.algorithm) {
      case Algorithm::kDirect:
        if (direct) out.push_back(f.algorithm);
        break;
      case Algorithm::kHierarchical:
        if (c.hosts > 1 && c.hosts < c.ranks) out.push_back(f.algorithm);
        break;
      case Algorithm::kSingleCopy:
        if (single_copy && all_peer) out.push_back(f.algorithm);
        break;
      case Algorithm::kSingleCopyIfRegistered:
      case Algorithm::kOrdered: break;
      default: out.push_back(f.algorithm);
    }
  }
  if (out.empty()) out.push_back(Algorithm::kRing);
  return out;
}

struct Choice {
  Algorithm algorithm;
  const char* reason;  // "forced", "measured", "cost model"
};

// A single-copy threshold scaled for `load` ranks per core (x 2 x load when over one).
inline size_t oversubscribed_threshold(size_t bytes, double load) {
  return load > 1 ? static_cast<size_t>(static_cast<double>(bytes) * 2 * load) : bytes;
}

// Over 2 ranks per core a timing measures the scheduler more than the algorithms (and 8 ranks on
// 2 cores took 60 ms over the 50 a first set-up may add): the host tuning (host_tuning.hpp)
// leaves such shapes at the compiled-in values, and reductions out of place do not go through
// the kernel there.
inline constexpr double kMaxTunedLoad = 2;

// Up to where out-of-place reductions go through the kernel: DCOMM_CMA_OUT_OF_PLACE_BYTES is
// the crossing with the ring measured on 2 ranks, where the ranks' buffers together leave the
// last-level cache; with more ranks it comes as many times sooner (4 processes here: single
// copy 0.75-0.86 of the ring's time at 4-8 MiB, 1.46 at 16 MiB).
inline size_t out_of_place_through_kernel(const Config& config, int ranks) {
  return config.cma_out_of_place_bytes / static_cast<size_t>(std::max(ranks, 2)) * 2;
}

// The largest size the host tuning's walks of single copy time (comm/tuning.hpp).
inline constexpr size_t kCopyWalkLast = 2u << 20;
// The largest size the walk of recursive doubling times. It moves log2(n) x the ring's bytes,
// and above this it was far behind (AMD EPYC, 4 processes on 2 cores: 2.4-3.6x the ring's time
// at 256 KiB-1 MiB), where the cost model, which overrates its bytes at every size (6.5-7x
// there; 3.5x at 32 KiB, where it took 0.8x), keeps it off too. Its calls there take ms: a
// longer walk would not fit a set-up's budget.
inline constexpr size_t kFifoWalkLast = 512u << 10;

// all_reduce by recursive doubling where the host tuning timed it ahead of what runs otherwise,
// up to the largest size it timed, on one host; nothing where not measured (the cost model
// decides).
inline std::optional<bool> recursive_doubling_measured(const CallShape& c, const Config& config) {
  if (c.kind != OpKind::kAllReduce || c.hosts > 1) return std::nullopt;
  return in_measured_run(c.bytes(), config.recursive_doubling_bytes, config.recursive_doubling_until_bytes,
                         kFifoWalkLast);
}

// all_gather and broadcast: in the run of sizes where the host tuning found single copy ahead
// of the FIFO algorithms (Config::cma_all_gather_bytes, cma_broadcast_bytes), timed where it
// runs, up to the largest size it timed. Above that, and where not measured, DCOMM_CMA_BYTES's
// rule: single copy keeps each byte off the FIFO's two copies, and on 4 processes here it took
// 0.52-0.96x the ring's time at 2-8 MiB where the walk had timed it behind at 2 MiB (the ring's
// calls there vary 3x from call to call; on 2 processes within 0.8-1.07x of the ring's at 4-16
// MiB; figures: docs/benchmarking.md). DCOMM_CMA_BYTES is where one process_vm_readv pays
// (comm/host_tuning.hpp), and a receiver makes one per peer block: the whole buffer for
// broadcast, output / ranks for all_gather (2 processes: 16 KiB, 8 KiB blocks, took 0.92-0.96x
// single copy's time through the FIFO; 32 KiB 0.70-0.89x the FIFO's through the kernel). With
// more ranks than cores, from 2 x load x DCOMM_CMA_BYTES of the whole: a rank that copies from
// its peers' buffers waits for each of them to be scheduled first, and the FIFO's pipelined
// steps were ahead below that (figures: docs/environment.md, DCOMM_CMA_BYTES).
inline bool single_copy_reads_pay(const CallShape& c, const Config& config, const LinkModel& link) {
  const bool gather = c.kind == OpKind::kAllGather;
  const size_t from = gather ? config.cma_all_gather_bytes : config.cma_broadcast_bytes;
  const size_t until = gather ? config.cma_all_gather_until_bytes : config.cma_broadcast_until_bytes;
  if (const std::optional<bool> run = in_measured_run(c.bytes(), from, until, kCopyWalkLast)) return *run;
  const bool per_block = gather && link.load <= 1;
  const size_t read = per_block ? c.bytes() / static_cast<size_t>(c.ranks) : c.bytes();
  return config.cma_bytes && read >= oversubscribed_threshold(config.cma_bytes, link.load);
}

// A user's messages (send/recv, an all-to-all's blocks) where every rank can read every other:
// single copy where all_gather's walk timed it ahead for blocks of their size (an all_gather of as
// many bytes from each rank; one read of a peer's buffer against two copies through the FIFO, as
// for a message), up to the largest size it timed. AMD EPYC, 2 processes, in a calm stretch: an
// all_to_all's blocks of 64-512 KiB took 0.71-0.82x single copy's time through the FIFO, 1 MiB
// 0.98x, 2 MiB 1.51x; all_gather's ring 0.63-0.79x single copy's at blocks of 64-512 KiB, 1 MiB
// 0.78-0.81x, 2 MiB 1.07x; in the VM's slow stretches the FIFO fell behind from 128 KiB blocks, and
// the walk then finds that too (docs/benchmarking.md). Above that, and where not measured,
// DCOMM_CMA_BYTES's rule: from it, scaled where ranks outnumber the cores (a receiver that reads
// waits for its sender to be scheduled first), but an all-to-all's blocks from it as it is, as each
// rank waits for every peer in that batch anyway (8 processes on 2 cores, 128-512 KiB, 16-64 KiB
// blocks: 0.48-0.76x the time through the FIFO; 4 processes, 128 KiB: 0.78x; a send_recv of 16 KiB
// between 8 took 1.7-2.2x; docs/benchmarking.md, "Figures behind the comments").
inline PullRule pull_rule(const Config& config, int ranks, const LinkModel& link) {
  PullRule r;
  r.from = oversubscribed_threshold(config.cma_bytes, link.load);  // 0 stays 0: none
  r.all_to_all_from = config.cma_bytes;
  r.ranks = static_cast<size_t>(ranks);
  r.run_from = config.cma_all_gather_bytes, r.run_until = config.cma_all_gather_until_bytes;
  r.run_last = kCopyWalkLast;
  return r;
}

// all_reduce, reduce_scatter and reduce: single copy, through the kernel or only with every
// buffer from mem_alloc (kSingleCopyIfRegistered); nothing below its threshold.
// Through the kernel in the run of sizes where the host tuning found it ahead of the FIFO
// algorithms, [DCOMM_CMA_REDUCE*_BYTES, the `_until`s): on the development machine (Intel Xeon)
// it stayed ahead at every size timed, in place; on an AMD EPYC, 2 processes, all_reduce's fell
// behind the ring from 256 KiB, in place as out of place (1.4-1.9x its time).
// Out of place from DCOMM_CMA_OUT_OF_PLACE_BYTES, the ring (its staging stays in cache) moves
// less memory than single copy through the kernel, whose writes into a peer's cold output read
// each line first (all_reduce) and whose reads pin every page (reduce_scatter); below it the
// buffers stay in cache. Where they cross moves with the last-level cache (figures:
// docs/environment.md, DCOMM_CMA_OUT_OF_PLACE_BYTES).
// With every rank's buffers from dcomm::mem_alloc, single copy reaches them by plain loads and
// streaming stores and wins at every size; the ranks learn that from the descriptors it swaps
// first, so this choice is deferred to them. Over kMaxTunedLoad ranks a core, single copy
// through the kernel was slower than the ring out of place at every size measured (8 ranks on 2
// cores; up to 2 a core it is ahead where the host tuning finds it: docs/benchmarking.md,
// "Figures behind the comments"): only buffers from mem_alloc take it there (all_reduce's
// staged through the ranks' blocks otherwise: dispatch.hpp). A reduce there takes the chain:
// the descriptors single copy swaps first, to learn whether every buffer is from mem_alloc, cost
// more than the ring it then ran (8 processes, 1-16 MiB: the chain alone 0.65-0.88x the time).
inline std::optional<Algorithm> reduction_single_copy(const CallShape& c, const Config& config, const LinkModel& link) {
  const auto [from, until] = c.kind == OpKind::kAllReduce
                                 ? std::pair{config.cma_reduce_bytes, config.cma_reduce_until_bytes}
                             : c.kind == OpKind::kReduceScatter
                                 ? std::pair{config.cma_reduce_scatter_bytes, config.cma_reduce_scatter_until_bytes}
                                 : std::pair{config.cma_reduce_root_bytes, config.cma_reduce_root_until_bytes};
  const size_t bytes = c.bytes();
  if (!from || bytes < from) return std::nullopt;
  const bool over = link.load > kMaxTunedLoad;
  if (c.kind == OpKind::kReduce && over) return Algorithm::kRing;  // the chain
  // (a reduce counts as out of place: only its root's recv is given, so the ranks could see in
  // place differently)
  const bool kernel = bytes < until && ((c.in_place && c.kind != OpKind::kReduce) ||
                                        (bytes < out_of_place_through_kernel(config, c.ranks) && !over));
  return kernel ? Algorithm::kSingleCopy : Algorithm::kSingleCopyIfRegistered;
}

inline Choice choose_algorithm(const CallShape& c, const Config& config, bool single_copy,
                               const LinkModel& link = LinkModel{}) {
  if (c.ranks < 2 || c.count == 0) return {Algorithm::kRing, "trivial"};
  // Reductions in one fixed order: direct folds in rank order too, for what fits its slots.
  if (config.deterministic && has_reduction(c.kind)) {
    const bool direct = c.kind == OpKind::kAllReduce && c.ranks <= kAllPeerMaxRanks &&
                        c.bytes() <= std::min({config.direct_bytes, kDirectMaxBytes, config.slot_bytes});
    return {direct ? Algorithm::kDirect : Algorithm::kOrdered, "DCOMM_DETERMINISTIC"};
  }
  const auto allowed = candidates(c, config, single_copy);
  auto can = [&](Algorithm a) { return std::find(allowed.begin(), allowed.end(), a) != allowed.end(); };
  const std::string& forced = config.algo[static_cast<size_t>(algo_index(c.kind))];
  if (!forced.empty() && can(algorithm_named(forced))) return {algorithm_named(forced), "forced"};
  const size_t bytes = c.bytes();
  const bool all_peer = c.ranks <= kAllPeerMaxRanks;
  // Measured on one host (issue 3): one direct exchange for small all_reduce on two ranks
  // (on more, the cost model weighs its (n-1) x the bytes) ...
  const bool direct = all_peer && bytes <= std::min({config.direct_bytes, kDirectMaxBytes, config.slot_bytes});
  if (c.kind == OpKind::kAllReduce && direct && c.ranks == 2) return {Algorithm::kDirect, "measured"};
  // ... and single copy for large messages where every rank can reach every other.
  if (single_copy && all_peer) {
    switch (c.kind) {
      case OpKind::kAllGather:
      case OpKind::kBroadcast:
        if (single_copy_reads_pay(c, config, link)) return {Algorithm::kSingleCopy, "measured"};
        break;
      case OpKind::kReduceScatter:
      case OpKind::kAllReduce:
      case OpKind::kReduce:
        if (auto a = reduction_single_copy(c, config, link)) return {*a, "measured"};
        break;
      default: break;
    }
  }
  // ... and recursive doubling where the host tuning timed it against what runs without it
  // (single copy first: its walk is timed against the FIFO algorithms, the cost model's).
  const std::optional<bool> doubling = recursive_doubling_measured(c, config);
  if (doubling.value_or(false) && can(Algorithm::kRecursiveDoubling))
    return {Algorithm::kRecursiveDoubling, "measured"};
  Algorithm best = Algorithm::kRing;
  double best_us = predict_us(Algorithm::kRing, c, link);
  for (Algorithm a : allowed) {
    if (a == Algorithm::kSingleCopy || (a == Algorithm::kDirect && !direct)) continue;  // measured above
    if (a == Algorithm::kRecursiveDoubling && doubling) continue;                       // measured behind
    double us = predict_us(a, c, link);
    if (us < best_us) best = a, best_us = us;
  }
  return {best, "cost model"};
}

// The rival a shape's choice duels with while it runs (comm/duel.hpp; DCOMM_DUEL), if any: single
// copy against the FIFO algorithm the choice would run without it, where the host tuning's walks
// time the two (all_gather, broadcast, all_reduce, reduce_scatter between the ranks of one host,
// from the walks' first size), and where nothing forced or fixed the choice: not a reduction
// DCOMM_DETERMINISTIC orders, not where a DCOMM_ALGO names the algorithm. Single copy deferred to
// whether the buffers are from mem_alloc (kSingleCopyIfRegistered) duels too: where they are not,
// it runs staged (an all_reduce out of place over kMaxTunedLoad ranks a core: 8 processes on 2
// cores, 1-8 MiB, which the walks leave untimed; dispatch.hpp) or the ring after the descriptors,
// and either may be behind the FIFO's choice.
inline constexpr size_t kDuelFirst = 16u << 10;
inline std::optional<Algorithm> duel_rival(const CallShape& c, const Config& config, bool single_copy,
                                           const LinkModel& link, Algorithm chosen) {
  const bool kind = c.kind == OpKind::kAllGather || c.kind == OpKind::kBroadcast || c.kind == OpKind::kAllReduce ||
                    c.kind == OpKind::kReduceScatter;
  if (!config.duel || !kind || !single_copy || c.hosts > 1 || c.ranks < 2 || c.ranks > kAllPeerMaxRanks ||
      c.bytes() < kDuelFirst || (config.deterministic && has_reduction(c.kind)) ||
      !config.algo[static_cast<size_t>(algo_index(c.kind))].empty())
    return std::nullopt;
  if (chosen == Algorithm::kSingleCopy || chosen == Algorithm::kSingleCopyIfRegistered)
    return choose_algorithm(c, config, /*single_copy=*/false, link).algorithm;
  return Algorithm::kSingleCopy;
}

// A shape's choice, and its duel with its rival (inactive where it has none).
struct ChosenShape {
  Choice choice;
  Duel duel;
};

// The choices of the shapes called lately. A training loop repeats a few shapes, and weighing
// every candidate (cost_model.hpp) took a quarter of an 8-byte call's time. Direct-mapped by
// shape; right while the config and the agreed facts stay as they were when it was filled (a
// communicator clears it once its link model is tuned).
class ChoiceCache {
 public:
  // `choose` makes the ChosenShape of a shape not cached.
  template <class Choose>
  ChosenShape& get(const CallShape& s, Choose&& choose) {
    const Key k = key(s);
    Entry& e = entries_[slot(k)];
    if (!e.valid || e.key != k) e = {true, k, choose()};
    return e.chosen;
  }
  void clear() { entries_ = {}; }

 private:
  // The fields a choice depends on, in words put together field by field. Comparing the
  // shapes themselves let the compiler load `ranks` and `in_place` as one word, just after
  // the caller stored them one at a time: a load that store forwarding cannot serve, which
  // stalled every call (~6 ns of a 1-rank call's ~40). No word here spans adjacent fields.
  using Key = std::array<uint64_t, 3>;
  static Key key(const CallShape& s) {
    return {s.count, static_cast<uint64_t>(s.kind) | uint64_t{s.in_place} << 8 | uint64_t{s.elem_bytes} << 16,
            static_cast<uint32_t>(s.ranks) | uint64_t{static_cast<uint32_t>(s.hosts)} << 32};
  }
  struct Entry {
    bool valid = false;
    Key key{};
    ChosenShape chosen{};
  };
  static constexpr size_t kEntries = 64;
  // Every word, and every bit of it, reaches the slot (multiplied, then the top bits), so
  // shapes that differ in one field only (in and out of place, say) need not share one.
  static size_t slot(const Key& k) {
    const uint64_t h = ((k[0] * 0x9E3779B97F4A7C15ull) ^ (k[1] * 0xC2B2AE3D27D4EB4Full) ^ k[2]) * 0xFF51AFD7ED558CCDull;
    return static_cast<size_t>(h >> 58) % kEntries;
  }
  std::array<Entry, kEntries> entries_{};
};

// The bytes a call's buffers span on one host: each of its ranks' input and output (one
// buffer in place; broadcast's receivers, which write theirs only).
inline size_t host_buffer_bytes(const CallShape& c) {
  const size_t local = static_cast<size_t>(c.ranks_per_host());
  const size_t in = c.kind == OpKind::kReduceScatter ? c.bytes() : c.count * c.elem_bytes, out = c.output_bytes();
  return local * (c.kind == OpKind::kBroadcast ? out : c.in_place ? std::max(in, out) : in + out);
}

// Whether a call's buffers leave the last-level cache: DCOMM_STREAM_BYTES is where they did for
// 2 ranks' all_reduce (4 buffers of it), and the host's buffers together are what the cache
// holds (8 processes on 2 cores, out of place: all_reduce 4-8 MiB 0.85-0.86x the time with
// streaming stores, all_gather and broadcast 8 MiB 0.90 and 0.80, neutral below; 4 processes:
// all_reduce 8 MiB 1.02, reduce_scatter 16 MiB 0.83; 2 processes: all_gather 16 MiB, 48 MiB of
// buffers, 1.05 streaming, 32 MiB 0.88; docs/benchmarking.md, "Figures behind the comments").
inline bool buffers_leave_cache(const CallShape& c, const Config& config) {
  return host_buffer_bytes(c) / 4 >= config.stream_bytes;
}

// Streaming stores pay off for a large output that is not also the input (in place, the
// lines are in cache already and streaming would only evict them).
inline bool stream_output(const CallShape& c, const Config& config) {
  return !c.in_place && buffers_leave_cache(c, config);
}

// Whether the ring moves its pieces by rendezvous (prims/landing_prims.hpp) when every link
// lands them: for the ring's three collectives, once a rank's chunk reaches
// DCOMM_RENDEZVOUS_BYTES.
inline bool ring_by_rendezvous(const CallShape& c, const Config& config) {
  const bool ring = c.kind == OpKind::kAllReduce || c.kind == OpKind::kReduceScatter || c.kind == OpKind::kAllGather;
  return ring && c.ranks > 1 && config.rendezvous_bytes &&
         c.bytes() / static_cast<size_t>(c.ranks) >= config.rendezvous_bytes;
}

DCOMM_NAMESPACE_END
