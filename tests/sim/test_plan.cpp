// dcomm-sim plan's step model (tools/sim_plan.hpp): buckets ready through the compute and
// reduced one after another.
#include <doctest/doctest.h>

#include "../../tools/sim_plan.hpp"

TEST_CASE("plan: a step's all-reduce overlapped with the compute, as DDP's buckets are") {
  // 4 buckets of 10 us over 100 us of compute: ready at 25, 50, 75 and 100; done at 35, 60, 85
  // and 110, so 10 us stick out past the compute (the last bucket).
  auto t = dcomm_sim::step_time({10, 10, 10, 10}, 100);
  CHECK(t.comm_us == doctest::Approx(40));
  CHECK(t.no_overlap_us == doctest::Approx(140));
  CHECK(t.overlapped_us == doctest::Approx(110));
  // Communication longer than the compute: it is the step (the first bucket waits for 25 us).
  auto slow = dcomm_sim::step_time({50, 50, 50, 50}, 100);
  CHECK(slow.overlapped_us == doctest::Approx(225));
  // Nothing to overlap with: the step is the compute plus every bucket.
  CHECK(dcomm_sim::step_time({5, 7}, 0).overlapped_us == doctest::Approx(12));
}
