// Tuning the cost model to the links at start (DCOMM_LINK_MODEL=measure): time the ring (8 B
// and 4 MiB all_reduce, 4 MiB all_gather) and fit the model's step latency and per-byte costs
// to it; every rank takes the largest (slowest) value of each, so all agree.
// DCOMM_LINK_MODEL_FILE=f reads them from f when f was written for the same ranks per core,
// else measures and writes f. The calls go through the communicator's dispatch with the ring
// forced, not through the public API or the configuration.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/cost_model.hpp"
#include "dcomm/comm/facts.hpp"
#include "dcomm/comm/host_tuning.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// Runs one collective on every rank through the dispatch; with an algorithm, that one.
using RunCollective = std::function<Status(const OpDesc&, std::optional<Algorithm>)>;

namespace detail {
// A call's mean time: one untimed, then the best of three means of `iters` (start-up noise,
// ranks still starting, only slows a round down).
template <class Call>
Result<double> timed_us(int iters, Call&& call) {
  DCOMM_RETURN_IF_ERROR(call());
  Status s;
  const double us = best_mean_us(3, iters, [&] {
    if (s.ok()) s = call();
  });
  if (!s.ok()) return s;
  return us;
}

// Every rank's values become the largest over the ranks (rank 0's plan, with zeros
// elsewhere; the slowest rank's fit).
inline Status max_over_ranks(const RunCollective& run, double* values, size_t n) {
  return run(OpDesc{OpKind::kAllReduce, values, values, n, DataType::kFloat64, ReduceOp::kMax}, std::nullopt);
}

// fit: alpha_us, beta_us_per_byte, gamma_us_per_byte.
inline Status measure_link(int size, const RunCollective& run, double fit[3]) {
  const size_t big = 4u << 20;
  std::vector<char> in(big, 0), out(big, 0);  // the all_gather's output is `big` too (big / size per rank)
  auto ring = [&](OpKind kind, size_t count, DataType type) {
    return run(OpDesc{kind, in.data(), out.data(), count, type, ReduceOp::kSum}, Algorithm::kRing);
  };
  auto small = timed_us(100, [&] { return ring(OpKind::kAllReduce, 2, DataType::kFloat32); });
  auto reduce = timed_us(2, [&] { return ring(OpKind::kAllReduce, big / 4, DataType::kFloat32); });
  auto gather =
      timed_us(2, [&] { return ring(OpKind::kAllGather, big / static_cast<size_t>(size), DataType::kUint8); });
  for (const Status& s : {small.status(), reduce.status(), gather.status()})
    if (!s.ok()) return s.with_context("measuring the links (DCOMM_LINK_MODEL)");
  const double n = size, S = static_cast<double>(big);
  fit[0] = *small / (2 * (n - 1));                                            // ring: 2(n-1) steps
  fit[1] = std::max(1e-9, (*gather - (n - 1) * fit[0]) / ((n - 1) / n * S));  // all_gather: bytes only
  fit[2] = std::max(1e-9, (*reduce - 2 * (n - 1) * fit[0] - 2 * (n - 1) / n * S * fit[1]) / ((n - 1) / n * S));
  return {};
}
}  // namespace detail

// Collective over the communicator; `link` starts as the model for the agreed load
// (comm/facts.hpp) and ends measured or loaded, the same on every rank.
inline Status tune_link_model(LinkModel& link, int rank, int size, const RunCollective& run) {
  const std::string mode = env_or("DCOMM_LINK_MODEL", "default"), file = env_or("DCOMM_LINK_MODEL_FILE");
  if (mode != "default" && mode != "measure")
    return invalid_argument("DCOMM_LINK_MODEL='", mode, "' is not one of default, measure");
  if (size < 2 || (mode == "default" && file.empty())) return {};
  const double load = link.alpha_us / LinkModel{}.alpha_us;  // for_load's factor: identifies the setting
  double fit[3] = {0, 0, 0};
  bool loaded = false;
  if (!file.empty()) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    if (auto f = parse_link_model(line); f && std::abs(f->load - load) < 1e-9) {
      fit[0] = f->alpha_us, fit[1] = f->beta_us_per_byte, fit[2] = f->gamma_us_per_byte;
      loaded = true;
    }
  }
  // Every rank must agree whether to measure: the file may exist on some hosts only.
  uint8_t need = loaded ? 0 : 1, any_need = 0;
  DCOMM_RETURN_IF_ERROR(
      run(OpDesc{OpKind::kAllReduce, &need, &any_need, 1, DataType::kUint8, ReduceOp::kMax}, std::nullopt));
  if (any_need) DCOMM_RETURN_IF_ERROR(detail::measure_link(size, run, fit));
  DCOMM_RETURN_IF_ERROR(detail::max_over_ranks(run, fit, 3));
  link.alpha_us = fit[0], link.beta_us_per_byte = fit[1], link.gamma_us_per_byte = fit[2];
  if (any_need && !file.empty() && rank == 0) std::ofstream(file) << format_link_model({load, fit[0], fit[1], fit[2]});
  DCOMM_LOG(kInfo, kSubsysTuning, rank, any_need ? "measured" : "loaded", " link model: step ", link.alpha_us, " us, ",
            1e-3 / link.beta_us_per_byte, " GB/s a link, reduction ", 1e-3 / link.gamma_us_per_byte, " GB/s");
  return {};
}

namespace detail {
inline constexpr double kShapeBudgetUs = 30'000;  // the bound on what a first set-up adds is 50 ms
// Single copy's walks stop at 2 MiB (kCopyWalkLast): a call's fixed costs there are a few
// percent of its time (AMD EPYC, 2 processes: the descriptors' swap about 5 us of all_reduce's
// 226), so what is behind there stays behind for the reductions, and the walks fit the budget
// (4 MiB took it past 30 ms). all_gather's and broadcast's take DCOMM_CMA_BYTES's rule above it
// (algorithm_choice.hpp).
inline constexpr size_t kSingleCopyFirst = 16u << 10;
inline constexpr int kShortCallRounds = 5;  // slowest_us's means of calls under 50 us (a few ms of timing)

// One walk up the sizes, doubling, that rank 0 makes: the next size to time (0: done) and what
// it found. kAheadRun: the run of sizes where the candidate is ahead. `found` is its first, the
// first of two sizes in a row ahead (0 while none is); the walk then goes on to `until`, the
// first of two sizes in a row behind after it (kNoUpperBound: not behind twice through the last
// size). With no run by the last size: found = the last size, until = kNoUpperBound if the
// candidate is ahead there, else the last size too (no size is in the run: by then a call's fixed
// costs are small beside its bytes, so what is behind there stays behind). kWhileAhead: the
// last size of the run, from the first, where the candidate is ahead (`found` starts as the
// answer for none); a size where it is behind is timed once more, and ends the run only when it
// is behind again (4 processes on 2 cores: a set-up's calls of a few us are noisy enough that
// one timing a size ended the direct exchange's run before 16 KiB in 7 set-ups of 9, where it
// takes 0.6-0.7x the time of what runs otherwise). `short_run` (a kAheadRun walk whose run may be
// two sizes long, with its candidate far behind above it): before the run starts, where a size
// ahead meets one behind, the one behind is timed once more, so one noisy timing of either does
// not lose the pair; the run ends at the first size behind after it (`until` that size), so one
// noisy timing above it does not carry the run on to the last size.
struct SizeWalk {
  enum class Rule { kAheadRun, kWhileAhead } rule;
  size_t next, last, found = 0, until = 0;
  bool before = false;  // the size before was ahead (looking for `found`) or behind (for `until`;
                        // kWhileAhead: this size was behind once)
  size_t cut = 0;       // where a set-up's budget ended it, the size to go on from (end_early)
  bool short_run = false;
  size_t prev = 0;       // the size timed before this one in this set-up (0: none)
  size_t rechecked = 0;  // the size last timed once more (short_run)
  bool back = false;     // that one is the size before, timed again after the one above it was ahead

  void record(bool ahead) {
    const size_t at = next;
    if (back) return record_back(ahead);
    // Behind after one ahead: this size once more; ahead after one behind: that one (`prev`, half this).
    if (const size_t again = ahead ? prev : at; short_run && !found && prev && ahead != before && again != rechecked) {
      rechecked = next = again, back = ahead;
      return;
    }
    prev = at;
    next = at < last ? 2 * at : 0;
    if (rule == Rule::kWhileAhead) {  // behind once: the same size again; behind twice: done
      if (ahead) found = at, before = false;
      else next = before ? 0 : at, before = !before;
      return;
    }
    if (found) {  // where the run ends: at the first size behind (short_run), else at the first of two in a row
      if (!ahead && (short_run || before)) until = short_run ? at : at / 2, next = 0;
      before = !ahead;
    } else if (ahead && before) {  // the run starts at the size before
      found = at / 2, before = false;
    } else if (!next) {
      found = at, until = ahead ? kNoUpperBound : at;
    } else {
      before = ahead;
    }
    if (!next && !until) until = kNoUpperBound;
  }

  // The size before, timed again after the one above it (`2 * at`) was ahead: the run starts here
  // when it is ahead too, else the walk goes on above that one as if this size had stayed behind.
  void record_back(bool ahead) {
    const size_t above = 2 * next;
    back = false, prev = above;
    if (ahead) found = next;
    before = !ahead;  // looking for `until`: none behind yet; for `found`: the one above was ahead
    next = above < last ? 2 * above : 0;
    if (!next) found = found ? found : above, until = kNoUpperBound;  // ahead at the last size
  }

  // Ends here, out of the budget: a kAheadRun walk keeps where it got for a later set-up (a
  // run's start, and `cut`: the size it would time next, or the one before where that one is
  // the first of two in a row, to be timed again); a kWhileAhead one knows nothing (its sizes are
  // the smallest, its walk the first: it starts again).
  void end_early() {
    cut = rule == Rule::kAheadRun ? (before ? next / 2 : next) : 0;
    found = rule == Rule::kAheadRun ? found : 0;
    next = 0;
  }

  // Goes on at `at`, where an earlier set-up's budget ended it (`cut`), with its run's start if
  // that one found it.
  void resume_at(size_t at) { next = at, before = false; }
};

// tune_shape's walks: single copy's all_reduce and reduce_scatter, 16 KiB to 2 MiB; the direct
// all_reduce, 4 KiB to 16 KiB (at most a slot), 2 KiB where it is behind at 4 KiB; single copy's
// reduce, all_gather and broadcast, as the first two; recursive doubling's all_reduce, 16 KiB to
// 512 KiB (algorithm_choice.hpp's kFifoWalkLast), as they, with SizeWalk::short_run: its run can
// be two sizes (4 processes on 2 cores: ahead at 32 and 64 KiB only, 0.8x the ring's time), which
// one noisy timing of either lost in 5 first set-ups of 7 (timed once more, in 1 of 7), and its
// sizes are small, so a timing once more costs little; above the run it falls far behind (2.4-3.6x
// the ring's time from 256 KiB), yet one noisy timing there carried a run on to 512 KiB in 1 of 7
// (single copy's runs are longer, and its sizes go to 2 MiB) (host_tuning.hpp's kWalkFields: what
// each times, and where its thresholds go).
inline std::array<SizeWalk, kShapeWalks> shape_walks(size_t slot_bytes) {
  using Rule = SizeWalk::Rule;
  std::array<SizeWalk, kShapeWalks> walks;
  walks.fill(SizeWalk{Rule::kAheadRun, kSingleCopyFirst, kCopyWalkLast});
  walks[kDirectWalk] = SizeWalk{Rule::kWhileAhead, 4096, std::min(kDirectMaxBytes, slot_bytes), 2048};
  walks[kDoublingWalk].last = kFifoWalkLast;
  walks[kDoublingWalk].short_run = true;
  return walks;
}

// Which walk times next (kShapeWalks: none): the direct exchange's first and recursive
// doubling's second (their sizes are the smallest, so a first set-up knows them: 4 processes on
// 2 cores took 6 set-ups to walk them all), then single copy's in kWalkFields' order, each to its
// end before the next starts, so that a set-up whose budget ends mid-way leaves whole walks known
// for the next (a walk cut before its run starts keeps nothing, and interleaved, 4 processes on
// 2 cores never finished one in three set-ups).
inline size_t next_walk(const std::array<SizeWalk, kShapeWalks>& walks) {
  for (size_t k : {kDirectWalk, kDoublingWalk})
    if (walks[k].next) return k;
  for (size_t k = 0; k < kShapeWalks; ++k)
    if (walks[k].next) return k;
  return kShapeWalks;
}

// The walks of a shape whose thresholds `known` has in part (earlier set-ups', whose budget ran
// out before the rest): those known are not walked again, one an earlier set-up cut goes on
// where it was cut, with its run's start if found.
inline std::array<SizeWalk, kShapeWalks> shape_walks_from(const ShapeTuning& known, size_t slot_bytes) {
  std::array<SizeWalk, kShapeWalks> walks = shape_walks(slot_bytes);
  for (size_t k = 0; k < kShapeWalks; ++k) {
    const WalkFields& f = kWalkFields[k];
    SizeWalk& w = walks[k];
    const size_t until = f.until ? known.*f.until : 0, cut = f.next ? known.*f.next : 0;
    if (cut) {
      w.found = known.*f.found;
      w.resume_at(cut);
    } else if (known.*f.found && (until || !f.until)) {
      w.next = 0, w.found = known.*f.found, w.until = until;
    }
  }
  return walks;
}

// What rank 0's walks found, on every rank: a threshold where the budget ran out before it is 0,
// the compiled-in value until a later set-up measures it.
inline Result<ShapeTuning> agree_walks(const RunCollective& run, int rank,
                                       const std::array<SizeWalk, kShapeWalks>& walks, const ShapeTuning& known) {
  constexpr size_t n = kShapeWalks;
  double found[3 * n] = {};  // each walk's found, until and cut
  if (rank == 0)
    for (size_t k = 0; k < n; ++k) {
      found[3 * k] = static_cast<double>(walks[k].found);
      found[3 * k + 1] = static_cast<double>(walks[k].until);
      found[3 * k + 2] = static_cast<double>(walks[k].cut);
    }
  DCOMM_RETURN_IF_ERROR(max_over_ranks(run, found, 3 * n));
  ShapeTuning t{known.shape};
  t.tries = known.tries + 1;
  for (size_t k = 0; k < n; ++k) {
    const WalkFields& f = kWalkFields[k];
    t.*f.found = static_cast<size_t>(found[3 * k]);
    if (f.until) t.*f.until = static_cast<size_t>(found[3 * k + 1]), t.*f.next = static_cast<size_t>(found[3 * k + 2]);
  }
  return t;
}

// Walk k's call of `bytes` (as CallShape::bytes counts them): float32, out of place.
inline CallShape walk_call(size_t k, size_t bytes, const SetupFacts& facts) {
  const OpKind kind = kWalkFields[k].kind;
  const bool per_rank = kind == OpKind::kReduceScatter || kind == OpKind::kAllGather;
  return CallShape{kind,
                   bytes / sizeof(float) / static_cast<size_t>(per_rank ? facts.size() : 1),
                   sizeof(float),
                   facts.size(),
                   /*in_place=*/false,
                   facts.hosts};
}

// What rank 0's rounds of this set-up took: each walk's last, and the largest size's, whose share
// of bytes stands for a walk's first round here (a walk an earlier set-up's budget cut goes on at
// its size, which can be the largest yet: 4 processes on 2 cores, set-ups that went on at 1-2 MiB
// took 21-51 ms when a first round was not weighed).
struct RoundCosts {
  double last_us[kShapeWalks] = {};
  double largest_bytes = 0, largest_us = 0;

  void add(size_t k, double bytes, double us) {
    last_us[k] = us;
    if (bytes >= largest_bytes) largest_bytes = bytes, largest_us = us;
  }
  // Walk k's next round, of `bytes`: about twice its last (the size doubles); a first round, its
  // share of the largest's; 0 when none is timed yet (the set-up's first round, never cut, so
  // that every set-up times a size).
  double next_us(size_t k, size_t bytes) const {
    if (last_us[k] > 0) return 2 * last_us[k];
    return largest_bytes > 0 ? largest_us * static_cast<double>(bytes) / largest_bytes : 0;
  }
};

// Rank 0's plan of the next round, after `elapsed_us` of timing: the size the next walk
// (next_walk) times, at its index, and at kShapeWalks what runs without its candidate where the
// thresholds known so far (`current`) choose; all 0 when done. Where the next round
// (RoundCosts::next_us) would pass the budget, the walks end here (SizeWalk::end_early: where
// each got is kept).
inline void plan_round(std::array<SizeWalk, kShapeWalks>& walks, double elapsed_us, const RoundCosts& costs,
                       const Config& current, const SetupFacts& facts, double (&plan)[kShapeWalks + 1]) {
  if (const size_t k = next_walk(walks);
      k < kShapeWalks && elapsed_us + costs.next_us(k, walks[k].next) > kShapeBudgetUs)
    for (SizeWalk& w : walks)
      if (w.next) w.end_early();
  const size_t k = next_walk(walks);
  if (k == kShapeWalks) return;
  plan[k] = static_cast<double>(walks[k].next);
  Config without = current;
  without.*kWalkFields[k].from_bytes = 0;
  plan[kShapeWalks] = static_cast<double>(
      choose_algorithm(walk_call(k, walks[k].next, facts), without, facts.single_copy, facts.link).algorithm);
}

// Call d with algorithms a and b, side by side: us[i], the slowest rank's median of its means,
// taken in turn with the other's (a drift while the ranks settle falls on both). Enough calls a
// mean (about 100 us of them, 1 to 64, as the slowest rank saw one call of each) that the ranks'
// skew at its start and end is small beside them, and few where a call is long or a loaded host
// makes every call slow; kShortCallRounds means where a call is short, three where one call is
// the mean (the budget's share of those is larger). The median, not the best: with more ranks
// than cores the FIFO algorithms' calls vary 2-3x from one to the next (4 processes on 2 cores,
// a 2 MiB all_gather's ring 380-1170 us, single copy's 390-560), and the best of a few took the
// ring's luckiest for its time.
inline Status slowest_us(const RunCollective& run, const OpDesc& d, const Algorithm (&algorithms)[2], double us[2]) {
  Status s;
  int i = 0;  // the algorithm `call` runs
  const auto call = [&] {
    if (s.ok()) s = run(d, algorithms[i]);
  };
  for (i = 0; i < 2; ++i) {
    call();  // connects the links it needs, faults the pages in
    us[i] = best_mean_us(1, 1, call);
  }
  DCOMM_RETURN_IF_ERROR(s);
  DCOMM_RETURN_IF_ERROR(max_over_ranks(run, us, 2));
  const int iters = static_cast<int>(std::clamp(100.0 / std::max({us[0], us[1], 0.05}), 1.0, 64.0));
  const int rounds = iters > 1 ? kShortCallRounds : 3;
  std::vector<double> means[2];
  for (int r = 0; r < rounds; ++r)
    for (i = 0; i < 2; ++i) means[i].push_back(best_mean_us(1, iters, call));
  for (i = 0; i < 2; ++i) {
    std::nth_element(means[i].begin(), means[i].begin() + rounds / 2, means[i].end());
    us[i] = means[i][static_cast<size_t>(rounds / 2)];
  }
  if (!s.ok()) return s.with_context("timing the thresholds of this shape (the host tuning)");
  return max_over_ranks(run, us, 2);
}

// A shape's pace: the ring's 16 KiB all_reduce (float32 sums, out of place), timed as slowest_us
// times a walk's two sides (means of about 100 us of calls), the faster side's median. Every
// hand-off between the ranks is in it, and the machine's states that move the walks' timings
// move it: on the AMD EPYC, for tens of seconds at a time, every call between processes ran
// 2-7x slower (a 16 KiB ring all_reduce of 4 processes 33-39 us against 16-21; of 2 processes at
// 256 KiB 130-170 against 21-27), and so did a walk's, which then found single copy ahead from
// 16 KiB for everything.
inline constexpr size_t kPaceBytes = 16u << 10;
inline Result<double> pace_us(const RunCollective& run) {
  const Algorithm ring[2] = {Algorithm::kRing, Algorithm::kRing};
  std::vector<float> in(kPaceBytes / sizeof(float), 0.0f), out(in.size(), 0.0f);
  double us[2] = {0, 0};
  DCOMM_RETURN_IF_ERROR(slowest_us(
      run, OpDesc{OpKind::kAllReduce, in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum}, ring, us));
  return std::min(us[0], us[1]);
}

// A set-up whose pace is this many times faster than the one a shape's walks began at times them
// all again; this many times slower, walks none (the cache's thresholds serve, and the try is not
// counted). Not a speed of the machine but a margin between its states (AMD EPYC): within one, a
// pace varied 1.02x over 3 set-ups of 2 processes (2.66-2.70 us) and 1.35x over 3 of 4 (22.5-30.4
// us); a memory hog on the side made it 41x (110 us) and 1.6-2.0x (35-45 us), a slow stretch
// 2-7x. Each time the shape is timed again it keeps the faster pace, so it is timed again only a
// few times in all, each in a state faster than the last.
inline constexpr double kPaceRatio = 1.5;

// Before a shape's walks: this set-up's pace (`pace_ns`) against the one the walks began at, the
// same on every rank (the slowest rank's, and the cache line rank 0 published). Returns the
// thresholds to walk from: all again where this set-up is that much faster, else what the cache
// knows; or nothing where it walks none (that much slower, or its thresholds are known whole),
// having applied the cache's to `config`.
inline Result<std::optional<ShapeTuning>> pace_check(Config& config, int rank, const ShapeToMeasure& shape,
                                                     const RunCollective& run, size_t* pace_ns) {
  auto pace = pace_us(run);
  if (!pace.ok()) return pace.status();
  *pace_ns = static_cast<size_t>(std::llround(*pace * 1e3));
  const ShapeTuning& known = shape.known;
  const double began = static_cast<double>(known.pace_ns) * 1e-3;
  const bool faster = known.pace_ns && *pace * kPaceRatio < began;
  const bool slower = known.pace_ns && *pace > began * kPaceRatio;
  if (rank == 0 && known.pace_ns)
    DCOMM_LOG(kInfo, kSubsysTuning, rank, known.shape, ": pace ", *pace, " us against the ", began,
              " us its walks began at: ",
              faster   ? "faster, every threshold is timed again"
              : slower ? "slower, nothing is timed at this set-up"
                       : "alike");
  if (faster) return std::optional<ShapeTuning>(ShapeTuning{known.shape});
  if (!slower && shape.walk) return std::optional<ShapeTuning>(known);
  apply_shape_tuning(config, shape.chosen, known);
  return std::optional<ShapeTuning>();
}
}  // namespace detail

// Collective over a communicator whose ranks can all read each other's memory (one host, at
// most kAllPeerMaxRanks): from which size single copy is ahead of what the cost model would run
// otherwise, and from which it is behind again, for all_reduce, reduce_scatter, reduce (to
// rank 0), all_gather and broadcast (from rank 0), up to which size the direct all_reduce is,
// and where recursive doubling's all_reduce is ahead of what runs without it (shape_walks). Each
// candidate and what runs without it are timed side by side (float32 sums; slowest_us), out of
// place (a shape is timed up to kMaxTunedLoad ranks a core, where out-of-place reductions go
// through the kernel too); the sizes found serve in place too (AMD EPYC, 2 processes: single
// copy's all_reduce 1.4-1.9x the ring's time from 256 KiB in place as out of place). A round
// times one size of one walk, in next_walk's order; rank 0 plans every round (plan_round) and
// ends the walks where the next would pass 30 ms, so all ranks make the same calls and take the
// same values. Rank 0 adds them to the host's cache under the shape. A threshold a
// variable or the program chose is timed but not changed. The thresholds `known` has (an earlier
// set-up's, whose budget ran out before the rest) are not timed again; those this one does not
// reach either stay 0 in the cache, with the size where each walk was cut, for a later set-up
// to go on from (host_tuning.hpp's kShapeTries). First the pace (detail::pace_check): a set-up
// much faster than the one the walks began at times them all again, one much slower none, and
// one of a shape known whole only that.
inline Status tune_shape(Config& config, const SetupFacts& facts, int rank, const ShapeToMeasure& shape,
                         const RunCollective& run) {
  using Clock = std::chrono::steady_clock;
  const detail::ChosenThresholds& chosen = shape.chosen;
  constexpr size_t kWalks = detail::kShapeWalks;
  // The pace first, over the ring's links, which the set-up has made (detail::pace_check).
  size_t pace_ns = 0;
  auto from = detail::pace_check(config, rank, shape, run, &pace_ns);
  if (!from.ok()) return from.status();
  if (!*from) return {};
  const ShapeTuning& known = **from;
  std::vector<float> in(kCopyWalkLast / sizeof(float), 0.0f), out(in.size(), 0.0f);
  // Then the links to every peer (the direct exchange talks to each), off the budget's clock:
  // a cost the first collectives would pay anyway, which made the first round look long enough
  // (over 10 ms, 4 processes on 2 cores) that the budget ended every walk after it.
  DCOMM_RETURN_IF_ERROR(run(OpDesc{OpKind::kAllReduce, in.data(), out.data(), 1, DataType::kFloat32, ReduceOp::kSum},
                            Algorithm::kDirect));
  // What runs without a walk's candidate: as the thresholds known so far (earlier set-ups', and
  // this one's walks that have ended: the direct exchange's and recursive doubling's are first)
  // choose, with that candidate's never. Rank 0 chooses it and every rank takes its choice.
  Config current = config;
  detail::apply_shape_tuning(current, chosen, known);
  std::array<detail::SizeWalk, kWalks> walks = detail::shape_walks_from(known, config.slot_bytes);
  const auto t0 = Clock::now();
  const auto us_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
  };
  std::string timings;
  detail::RoundCosts costs;  // rank 0's
  for (;;) {
    double plan[kWalks + 1] = {};  // the size each walk times next (one of them), and the algorithm without it
    if (rank == 0) detail::plan_round(walks, us_since(t0), costs, current, facts, plan);
    DCOMM_RETURN_IF_ERROR(detail::max_over_ranks(run, plan, kWalks + 1));
    const auto round_start = Clock::now();
    const auto k = static_cast<size_t>(std::find_if(plan, plan + kWalks, [](double v) { return v > 0; }) - plan);
    if (k == kWalks) break;
    const CallShape call = detail::walk_call(k, static_cast<size_t>(plan[k]), facts);
    const Algorithm algorithms[2] = {static_cast<Algorithm>(static_cast<int>(plan[kWalks])),
                                     detail::kWalkFields[k].candidate};
    double us[2] = {0, 0};
    DCOMM_RETURN_IF_ERROR(detail::slowest_us(
        run, OpDesc{call.kind, in.data(), out.data(), call.count, DataType::kFloat32, ReduceOp::kSum}, algorithms, us));
    if (rank != 0) continue;
    costs.add(k, plan[k], us_since(round_start));
    timings += detail::cat(" ", to_string(call.kind), " ", call.bytes(), ": ", to_string(algorithms[0]), " ", us[0],
                           " us, ", to_string(algorithms[1]), " ", us[1], " us;");
    detail::SizeWalk& w = walks[k];
    w.record(us[1] < us[0]);
    if (!w.next) detail::apply_walk(current, chosen, detail::kWalkFields[k], w.found, w.until);
  }
  auto found = detail::agree_walks(run, rank, walks, known);
  if (!found.ok()) return found.status();
  ShapeTuning& t = *found;
  t.pace_ns = known.tries && known.pace_ns ? known.pace_ns : pace_ns;  // the pace its walks began at
  detail::apply_shape_tuning(config, chosen, t);
  if (rank == 0) {
    DCOMM_LOG(kInfo, kSubsysTuning, rank, t.shape, ": ", describe(t), "; pace ", pace_ns * 1e-3, " us; measured in ",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), " ms (try ", t.tries, " of ",
              kShapeTries, ")",
              t.complete() ? ""
              : t.tries < kShapeTries
                  ? " (the budget ran out: 0 is not known, the compiled-in value, until a later set-up)"
                  : " (the budget ran out: 0 is not known, the compiled-in value from now on)",
              detail::walks_chosen(chosen) ? " (what a variable or the program chose is kept)" : "", ":", timings);
    remember_shape_tuning(t);
  }
  return {};
}

DCOMM_NAMESPACE_END
