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

// Issue 41: over hosts the cost model charged every ring step the network's latency, so it
// picked hierarchical (simulated 1,581 us a 25 MiB bucket on 16 hosts x 8 GPUs) over the ring
// (1,045 us). A ring ordered by host crosses the network on `hosts` of its n links only.
TEST_CASE("plan: on 16 hosts x 8 GPUs the cost model's ring matches the simulator's, and it is picked") {
  using namespace dcomm;
  dcomm_sim::PlanArgs a;
  a.hosts = 16, a.gpus = 8;
  const auto [net, link] = dcomm_sim::cluster(a);
  const int n = a.hosts * a.gpus;
  for (size_t bytes : {size_t{25} << 20, size_t{9} << 20}) {
    CAPTURE(bytes);
    const size_t count = bytes / 4;
    const SimResult ring =
        simulate_recorded_all_reduce(n, count, LinkModel{}.slice_bytes / 4, 4, net, record_ring_all_reduce);
    const SimResult hier = simulate_recorded_all_reduce(
        n, count, recorded_tree_slice(count, LinkModel{}.slice_bytes / 4, 32), 4, net,
        [&](int w, int x, size_t c, size_t sl) { return record_hierarchical_all_reduce(w, x, c, sl, a.gpus); });
    REQUIRE(ring.error.empty());
    REQUIRE(hier.error.empty());
    CHECK(ring.time_us < hier.time_us);
    const CallShape shape{OpKind::kAllReduce, count, 4, n, /*in_place=*/true, a.hosts};
    CHECK(predict_us(Algorithm::kRing, shape, link) == doctest::Approx(ring.time_us).epsilon(0.05));
    CHECK(choose_algorithm(shape, Config{}, /*single_copy=*/false, link).algorithm == Algorithm::kRing);
  }
}

TEST_CASE("cost model: the ring across hosts over TCP-class links is within 10% of the simulator's, 8 B to 64 MiB") {
  using namespace dcomm;
  const LinkModel m;  // the default: TCP between hosts
  for (auto [n, hosts] : {std::pair{64, 8}, {16, 2}}) {
    SimNetwork net;
    net.ranks_per_host = n / hosts, net.nics_per_host = 1;
    net.local_alpha_us = m.alpha_us, net.local_bytes_per_us = 1 / m.beta_us_per_byte;
    net.net_alpha_us = m.net_alpha_us, net.nic_bytes_per_us = 1 / m.net_beta_us_per_byte;
    for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{1} << 20, size_t{64} << 20}) {
      CAPTURE(n);
      CAPTURE(bytes);
      const size_t count = std::max<size_t>(1, bytes / 4);
      const SimResult ring = simulate_recorded_all_reduce(n, count, m.slice_bytes / 4, 4, net, record_ring_all_reduce);
      REQUIRE(ring.error.empty());
      const CallShape shape{OpKind::kAllReduce, count, 4, n, false, hosts};
      CHECK(predict_us(Algorithm::kRing, shape, m) == doctest::Approx(ring.time_us).epsilon(0.10));
    }
  }
}
