// Deadlines and the backoff every wait in dcomm uses.
//
// A wait spins briefly (a shared-memory flag round trip is ~0.2 us spinning but ~1.3 us once
// a waiter yields), then yields the CPU so that oversubscribed runs (8 ranks on 2 cores) let
// the rank that holds the data run, and after a while sleeps briefly so an idle rank costs
// almost nothing. Every wait checks a deadline: none is unbounded.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"

DCOMM_NAMESPACE_BEGIN

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(std::chrono::milliseconds budget) : budget_(budget), end_(Clock::now() + budget) {}
  bool expired() const { return Clock::now() >= end_; }
  std::chrono::milliseconds budget() const { return budget_; }
  long long remaining_ms() const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end_ - Clock::now()).count();
    return left < 0 ? 0 : left;
  }

 private:
  std::chrono::milliseconds budget_;
  Clock::time_point end_;
};

class Backoff {
 public:
  explicit Backoff(int spin_iterations) : spin_(static_cast<uint32_t>(spin_iterations)) {}
  // A wait whose every round polls `polls_per_round` things (algo/p2p.hpp's batch): DCOMM_SPIN
  // counts polls, so the spin is shared out among them (at least one round where it spins at all).
  Backoff(int spin_polls, size_t polls_per_round)
      : Backoff(spin_polls > 0 ? std::max<int>(1, spin_polls / static_cast<int>(std::max<size_t>(1, polls_per_round)))
                               : 0) {}
  // The rounds it spins before it starts yielding.
  uint32_t spin_rounds() const { return spin_; }
  // One step of waiting. Returns true when the caller should look at the clock and the
  // slow conditions (abort, peer gone); most steps skip that.
  bool pause() {
    ++iter_;
    if (iter_ <= spin_) {
      DCOMM_CPU_RELAX();
      return (iter_ & 1023u) == 0;
    }
    if (iter_ <= spin_ + kYields) {
      sched_yield();
      return (iter_ & 15u) == 0;
    }
    timespec ts{0, 50'000};  // 50 us: a long wait has already cost far more than this
    nanosleep(&ts, nullptr);
    return true;
  }
  void reset() { iter_ = 0; }

 private:
  static constexpr uint32_t kYields = 20000;
  uint32_t spin_;
  uint32_t iter_ = 0;
};

// How long a wait stalls before it asks which call the peer is in: a second, or a quarter
// of the deadline when that is shorter.
inline std::chrono::milliseconds stall_threshold(const Config& c) {
  return std::chrono::milliseconds(std::max<long long>(50, std::min<long long>(1000, c.timeout.count() / 4)));
}

// A wait's clock, read at the backoff's slow steps: the deadline (the communicator's timeout)
// starts at the first of them, the stall diagnosis comes once the wait has stalled for
// stall_threshold and then every ten thresholds, and progress starts both again. Every wait
// on peers (prims/peer.hpp's, algo/p2p.hpp's) keeps its time with one.
class WaitClock {
 public:
  enum class Tick { kWait, kDiagnose, kTimedOut };
  explicit WaitClock(const Config& c) : timeout_(c.timeout), stall_(stall_threshold(c)) {}
  Tick tick() {
    const Clock::time_point now = Clock::now();
    if (!started_) {
      started_ = true;
      deadline_ = now + timeout_;
      diagnosis_ = now + stall_;
      return Tick::kWait;
    }
    if (now >= deadline_) return Tick::kTimedOut;
    if (now < diagnosis_) return Tick::kWait;
    diagnosis_ = now + 10 * stall_;
    return Tick::kDiagnose;
  }
  void restart() { started_ = false; }

 private:
  std::chrono::milliseconds timeout_, stall_;
  bool started_ = false;
  Clock::time_point deadline_{}, diagnosis_{};
};

DCOMM_NAMESPACE_END
