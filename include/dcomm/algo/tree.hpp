// The binary tree the tree algorithms and their schedules share. It is built over positions
// 0..n-1 (the ring order: ranks grouped by host, then NUMA node and device path; see
// topo/order.hpp), and every subtree is a contiguous range of positions, so a subtree stays on
// one host while it fits there and only the few edges between ranges cross hosts.
//
// Shape (in order, as the binary trees of NCCL 2.4): position 0 is the root and its one child
// is the largest power of two below n; a position v > 0 with lowest set bit b covers
// [v-b+1, v+b-1] (clipped to n-1), its children are v-b/2 (left) and the top of what is left
// of [v+1, v+b-1] (right). Even positions are interior, odd ones leaves; the mirrored tree
// (position x at n-1-x, rooted at n-1) swaps the two for even n: the double binary tree's
// second tree, so a rank forwards data in one tree only. Depth: about log2(n) + 1.
#pragma once

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN
namespace detail {

// The largest power of two <= m (m >= 1).
inline int top_power_of_two(int m) {
  int p = 1;
  while (p <= m / 2) p *= 2;
  return p;
}

struct BinaryTree {
  int n, root, rel;
  bool mirror;
  // The tree over `size` positions rooted at `root_pos` (ignored when mirrored: the mirror is
  // rooted at position size-1), seen from position `pos`.
  BinaryTree(int size, int root_pos, int pos, bool mirrored = false)
      : n(size),
        root(mirrored ? size - 1 : root_pos),
        rel(mirrored ? size - 1 - pos : (pos - root_pos + size) % size),
        mirror(mirrored) {}

  int real(int i) const { return mirror ? n - 1 - i : (i + root) % n; }
  int parent() const {
    const int p = parent_of(rel);
    return p < 0 ? -1 : real(p);
  }
  int child(int k) const {
    const int c = child_of(rel, k);
    return c < 0 ? -1 : real(c);
  }

  // Children of relative position v: k = 0 left, 1 right; -1 where there is none.
  int child_of(int v, int k) const {
    if (v == 0) return k == 0 && n > 1 ? top_power_of_two(n - 1) : -1;
    const int b = v & -v;
    if (k == 0) return b > 1 ? v - b / 2 : -1;
    const int hi = (v + b - 1 < n - 1) ? v + b - 1 : n - 1;
    return hi > v ? v + top_power_of_two(hi - v) : -1;
  }
  // Parent of relative position v (-1 for the root): found by descending from the root.
  int parent_of(int v) const {
    if (v <= 0) return -1;
    int at = 0;
    for (;;) {
      const int next = at == 0 || v < at ? child_of(at, 0) : child_of(at, 1);
      if (next == v || next < 0) return next < 0 ? -1 : at;
      at = next;
    }
  }
};

}  // namespace detail
DCOMM_NAMESPACE_END
