// Following the machine while it runs: a call shape's choice against its rival, timed side by
// side now and then (DCOMM_DUEL). The host tuning times single copy against the FIFO algorithms
// once, at a set-up, and its cache serves every later one; but a machine's speed can change under
// a running job, and the two trade places with it (AMD EPYC VM, 4 processes, all_gather of
// 1 MiB: the ring 127 us and single copy 193 in one stretch, 391 and 180 minutes later;
// docs/benchmarking.md). So every so often a shape's calls run the rival for a few calls, each
// rank times the last few of each side, the ranks take the slowest rank's fastest calls (one
// all_reduce of two numbers: dispatch.hpp), and all switch together where the rival took clearly
// less. The fastest of a side's calls, not their mean: a call the scheduler preempted takes
// longer, never shorter, and one such call would otherwise decide a trial.
//
// The calls of a shape, counted from the end of its last trial: `gap` calls of the choice, the
// last kTimed of them timed, then the trial: kTimed + 1 calls of the rival, the first untimed
// (its links or buffers may be cold), the rest timed. A trial the rival loses doubles the gap, up
// to kLastGap, so a settled shape spends at most (kTimed + 1) / kLastGap of its calls on a
// slower rival; a switch starts again from kFirstGap. The numbers are ratios of calls, not
// timings of a machine: the agreement is one all_reduce of 16 bytes, which takes no longer than
// a call of a shape the duel covers (from the walks' first size), so it costs at most 1/kFirstGap
// of the calls' time; kMargin keeps two sides within the noise of each other from trading places
// at every trial.
#pragma once

#include <algorithm>
#include <array>

#include "dcomm/core/algorithms.hpp"

DCOMM_NAMESPACE_BEGIN

class Duel {
 public:
  static constexpr int kTimed = 3;
  static constexpr int kFirstGap = 64, kLastGap = 4096;
  static constexpr double kMargin = 0.9;

  Duel() = default;  // no rival: every call runs the choice
  explicit Duel(Algorithm rival) : rival_(rival), active_(true) {}

  bool active() const { return active_; }
  Algorithm rival() const { return rival_; }
  int gap() const { return gap_; }

  // What the next call runs, where `chosen` is the shape's choice.
  Algorithm next(Algorithm chosen) const { return active_ && calls_ >= gap_ ? rival_ : chosen; }

  // Whether the next call is timed: the choice's last kTimed calls of the gap, the rival's calls
  // but its first. The others read no clock (two reads, 24 ns each on the AMD EPYC VM, are 3-6% of a 16 KiB call).
  bool timed() const { return active_ && ((calls_ >= gap_ - kTimed && calls_ < gap_) || calls_ > gap_); }

  // After a call took `us` (this rank's time; read only where timed()): true when it ended a
  // trial, and the ranks must agree on fastest() (the slowest rank's) and decide().
  bool record(double us) {
    if (!active_) return false;
    if (timed()) {
      double& fastest = calls_ < gap_ ? chosen_us_ : rival_us_;
      fastest = std::min(fastest, us);
    }
    return ++calls_ == gap_ + kTimed + 1;
  }
  // This rank's fastest of the choice's timed calls and of the rival's.
  std::array<double, 2> fastest() const { return {chosen_us_, rival_us_}; }

  // With every rank's fastest() at their largest: true where the rival took under kMargin of the
  // choice's time, and `chosen` and the rival then trade places. Starts the next gap.
  bool decide(const std::array<double, 2>& slowest, Algorithm& chosen) {
    const bool swap = slowest[1] < kMargin * slowest[0];
    if (swap) std::swap(chosen, rival_);
    gap_ = swap ? kFirstGap : std::min(2 * gap_, kLastGap);
    calls_ = 0;
    chosen_us_ = rival_us_ = kNone;
    return swap;
  }

 private:
  Algorithm rival_ = Algorithm::kRing;
  bool active_ = false;
  static constexpr double kNone = 1e300;  // no call timed yet
  int gap_ = kFirstGap, calls_ = 0;
  double chosen_us_ = kNone, rival_us_ = kNone;
};

DCOMM_NAMESPACE_END
