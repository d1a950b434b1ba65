#include <doctest/doctest.h>

#include <dcomm/sim/simulator.hpp>

using namespace dcomm;

TEST_CASE("simulator: every schedule leaves every rank with the right contributions, any world size") {
  SimNetwork net;
  net.ranks_per_host = 4;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 100}) {
    CAPTURE(n);
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
      CAPTURE(count);
      auto ar = [&](auto gen) { return simulate(schedules_for(n, gen), SimCollective::kAllReduce, count, 4, 0, net); };
      CHECK(ar([&](int w, int x) { return schedule_recursive_doubling(w, x, count); }).error == "");
      CHECK(ar([&](int w, int x) { return schedule_rabenseifner(w, x, count); }).error == "");
      CHECK(ar([&](int w, int x) { return schedule_ring_all_reduce(w, x, count); }).error == "");
      CHECK(ar([&](int w, int x) { return schedule_tree_all_reduce(w, x, count); }).error == "");
      const size_t total = count * static_cast<size_t>(n);
      CHECK(simulate(schedules_for(n, [&](int w, int x) { return schedule_halving_reduce_scatter(w, x, count); }),
                     SimCollective::kReduceScatter, total, 4, count, net)
                .error == "");
      CHECK(simulate(schedules_for(n, [&](int w, int x) { return schedule_doubling_all_gather(w, x, count); }),
                     SimCollective::kAllGather, total, 1, count, net)
                .error == "");
    }
  }
}

TEST_CASE("simulator: broken schedules are reported, not passed") {
  SimNetwork net;
  const size_t count = 64;
  auto rd = schedules_for(4, [&](int w, int x) { return schedule_recursive_doubling(w, x, count); });
  auto missing = rd;
  missing[2].erase(missing[2].begin());  // rank 2 skips its first exchange
  CHECK(simulate(missing, SimCollective::kAllReduce, count, 4, 0, net).error != "");
  auto twice = rd;
  twice[1].push_back(twice[1].back());  // finalizes twice (avg would divide twice)
  CHECK(simulate(twice, SimCollective::kAllReduce, count, 4, 0, net).error.find("finalized 2x") != std::string::npos);
  auto copy_not_reduce = rd;
  for (auto& s : copy_not_reduce) s[0].reduce = false;  // the first exchange overwrites instead of adding
  CHECK(simulate(copy_not_reduce, SimCollective::kAllReduce, count, 4, 0, net).error.find("contributions") != std::string::npos);
  auto lone = rd;
  lone[0].insert(lone[0].begin(), detail::recv_only(3, {0, count}, false, false));  // nobody sends it
  CHECK(simulate(lone, SimCollective::kAllReduce, count, 4, 0, net).error.find("deadlock") != std::string::npos);
}

TEST_CASE("simulator at scale: 65,536 ranks; tree and recursive doubling latency grow as log n, the ring's as n") {
  SimNetwork net;  // 8 ranks per host, 400 Gb/s NICs
  auto t = [&](int n, auto gen) {
    auto r = simulate(schedules_for(n, gen), SimCollective::kAllReduce, 2, 4, 0, net);  // 8 bytes
    REQUIRE(r.error == "");
    return r.time_us;
  };
  auto rd = [](int w, int x) { return schedule_recursive_doubling(w, x, 2); };
  auto tree = [](int w, int x) { return schedule_tree_all_reduce(w, x, 2); };
  auto ring = [](int w, int x) { return schedule_ring_all_reduce(w, x, 2); };
  CHECK(t(65536, rd) / t(256, rd) < 2.5);    // 16 steps against 8
  CHECK(t(65536, tree) / t(256, tree) < 2.5);
  CHECK(t(2048, ring) / t(256, ring) > 7);   // 8x the ranks, about 8x the steps
}
