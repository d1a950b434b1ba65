// The trees every tree algorithm runs over (algo/tree.hpp), checked for every world size.
#include <doctest/doctest.h>

#include <dcomm/algo/tree.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

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
      for (int x = 0; x < n; ++x)
        CHECK(hi[static_cast<size_t>(x)] - lo[static_cast<size_t>(x)] + 1 == size[static_cast<size_t>(x)]);
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
