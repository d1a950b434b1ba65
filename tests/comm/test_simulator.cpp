#include <doctest/doctest.h>

#include <dcomm/algo/tree.hpp>
#include <dcomm/sim/simulator.hpp>

#include <cmath>
#include <set>

using namespace dcomm;

// The tree of algo/tree.hpp: one root, every other position has the parent that lists it as
// a child, every subtree is a contiguous range of positions, depth about log2(n), and for even
// n the mirrored tree's interior positions are the first tree's leaves.
TEST_CASE("binary tree: a tree over contiguous ranges, log depth, complementary mirror") {
  for (int n = 1; n <= 300; ++n) {
    CAPTURE(n);
    for (bool mirror : {false, true}) {
      CAPTURE(mirror);
      std::vector<int> parent(static_cast<size_t>(n), -2), depth(static_cast<size_t>(n), 0);
      int roots = 0;
      for (int x = 0; x < n; ++x) {
        const detail::BinaryTree t(n, 0, x, mirror);
        parent[static_cast<size_t>(x)] = t.parent();
        if (t.parent() < 0) ++roots;
        else {
          const detail::BinaryTree up(n, 0, t.parent(), mirror);
          CHECK((up.child(0) == x || up.child(1) == x));
        }
      }
      CHECK(roots == 1);
      int max_depth = 0;
      std::vector<int> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n)), size(static_cast<size_t>(n), 1);
      for (int x = 0; x < n; ++x) {
        int d = 0;
        for (int at = x; parent[static_cast<size_t>(at)] >= 0 && d <= n; at = parent[static_cast<size_t>(at)]) ++d;
        REQUIRE(d < n + 1);  // no cycles
        max_depth = std::max(max_depth, d);
        lo[static_cast<size_t>(x)] = hi[static_cast<size_t>(x)] = x;
      }
      CHECK(max_depth <= static_cast<int>(std::ceil(std::log2(std::max(n, 2)))) + 1);
      // Subtrees are contiguous: each node's descendants fill [lo, hi] exactly.
      for (int x = 0; x < n; ++x)
        for (int at = parent[static_cast<size_t>(x)]; at >= 0; at = parent[static_cast<size_t>(at)]) {
          lo[static_cast<size_t>(at)] = std::min(lo[static_cast<size_t>(at)], x);
          hi[static_cast<size_t>(at)] = std::max(hi[static_cast<size_t>(at)], x);
          ++size[static_cast<size_t>(at)];
        }
      for (int x = 0; x < n; ++x) CHECK(hi[static_cast<size_t>(x)] - lo[static_cast<size_t>(x)] + 1 == size[static_cast<size_t>(x)]);
    }
    if (n % 2 == 0 && n > 2) {
      for (int x = 0; x < n; ++x) {
        const bool interior = detail::BinaryTree(n, 0, x).child(0) >= 0;
        const bool interior_mirror = detail::BinaryTree(n, 0, x, true).child(0) >= 0;
        CHECK(!(interior && interior_mirror));
      }
    }
  }
}

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

// The CPU model: ranks sharing cores queue for them, so a step where every rank works (recursive
// doubling) costs more with 2 cores than with 8, a step where one works (the ring at 8 B, one
// hop at a time) barely; large messages are bound by the copying all ranks do on 2 cores.
TEST_CASE("simulator, CPU ranks: shared cores slow the steps where many ranks work at once") {
  SimNetwork net;
  net.ranks_per_host = 8;
  net.local_alpha_us = 0.3;
  net.local_bytes_per_us = 1e12;
  net.copy_bytes_per_us = 10e3;
  net.reduce_bytes_per_us = 10e3;
  net.step_cpu_us = 1.0;
  net.wake_us = 3.0;
  auto time = [&](int cores, auto gen, size_t count) {
    SimNetwork m = net;
    m.cores_per_host = cores;
    auto r = simulate(schedules_for(8, gen), SimCollective::kAllReduce, count, 4, 0, m);
    REQUIRE(r.error == "");
    return r.time_us;
  };
  auto rd = [](size_t c) { return [c](int w, int x) { return schedule_recursive_doubling(w, x, c); }; };
  auto ring = [](size_t c) { return [c](int w, int x) { return schedule_ring_all_reduce(w, x, c); }; };
  // 8 B: recursive doubling's 3 steps have all 8 ranks working; with 2 cores each waits its turn.
  CHECK(time(2, rd(2), 2) > 1.5 * time(8, rd(2), 2));
  // 32 MiB: every rank copies and folds its bytes; on 2 cores that work queues (up to 4x as
  // long as on 8, less where ranks wait for each other anyway).
  const size_t big = 8 << 20;
  const double ratio = time(2, ring(big), big) / time(8, ring(big), big);
  CHECK(ratio > 2.0);
  CHECK(ratio < 4.5);
  // Recursive doubling folds a whole buffer each step (into a second buffer, as it also sends
  // it): more work than the ring's chunks.
  CHECK(time(2, rd(big), big) > 2 * time(2, ring(big), big));
}
