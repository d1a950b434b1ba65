// Pipelined binary-tree broadcast, reduce and all_reduce, and the double binary tree, written
// once over an executor and run by two: the host's ports (prims/peer_prims.hpp) and the
// simulator's recorder (sim/recorder.hpp), so what dcomm-sim predicts is this code.
//
// The executor `Ops` addresses peers by rank and moves slices of at most slice_elems():
//   send(peer, src, n)             peer <- src
//   recv(peer, dst, n)             dst <- peer
//   recv_reduce(peer, a, dst, n)   dst <- a (+) peer          (a may be dst)
//   local_copy(dst, src, n)        dst <- src (nothing when they are the same)
//   finalize(dst, n)               kAvg divides here
// Each returns a Status; the first error ends the algorithm.
//
// A slice moves as soon as it arrives, so a long message costs about one pass of its bytes
// plus depth slice latencies (the tree of algo/tree.hpp: depth about log2 n).
#pragma once

#include <algorithm>
#include <cstddef>

#include "dcomm/algo/tree.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN
namespace detail {

// Calls f(at, n) over slices of at most `slice` of `total` (once, with n = 0, when total is 0,
// so an empty call still exchanges its one message).
template <class F>
Status for_slices(size_t total, size_t slice, F f) {
  for (size_t at = 0; at < total || at == 0; at += slice) {
    DCOMM_RETURN_IF_ERROR(f(at, std::min(slice, total - at)));
    if (total == 0) break;
  }
  return {};
}

// One slice of a broadcast: from the parent (unless this is the root) to the children.
template <class Ops>
Status tree_broadcast_slice(Ops& o, const BinaryTree& t, char* data, size_t n) {
  if (const int parent = t.parent(); parent >= 0) DCOMM_RETURN_IF_ERROR(o.recv(parent, data, n));
  for (int k = 0; k < 2; ++k)
    if (const int c = t.child(k); c >= 0) DCOMM_RETURN_IF_ERROR(o.send(c, data, n));
  return {};
}

// One slice of a reduce: this rank's `mine`, then its children's slices in order, folded into
// `dst` and passed up (a leaf passes its own slice as it is); the root finalizes it.
template <class Ops>
Status tree_reduce_slice(Ops& o, const BinaryTree& t, const char* mine, char* dst, size_t n) {
  const char* partial = mine;
  for (int k = 0; k < 2; ++k)
    if (const int c = t.child(k); c >= 0) {
      DCOMM_RETURN_IF_ERROR(o.recv_reduce(c, partial, dst, n));
      partial = dst;
    }
  if (t.parent() >= 0) return o.send(t.parent(), partial, n);
  DCOMM_RETURN_IF_ERROR(o.local_copy(dst, partial, n));  // a root without children (one rank)
  return o.finalize(dst, n);
}

}  // namespace detail

// Broadcast from `root`: send is read on the root only, recv is written everywhere.
template <class Ops>
Status tree_broadcast(Ops& o, int rank, int size, int root, const char* send, char* recv, size_t count) {
  const detail::BinaryTree t(size, root, rank);
  if (rank == root) DCOMM_RETURN_IF_ERROR(o.local_copy(recv, send, count));
  if (size == 1) return {};
  const size_t eb = o.elem_bytes();
  return detail::for_slices(count, o.slice_elems(),
                            [&](size_t at, size_t n) { return detail::tree_broadcast_slice(o, t, recv + at * eb, n); });
}

// Reduce to `root` (own data first, then the children in order); recv is written on the root
// only. acc: one slice of scratch, where the other ranks fold before passing up.
template <class Ops>
Status tree_reduce(Ops& o, int rank, int size, int root, const char* send, char* recv, size_t count, char* acc) {
  const detail::BinaryTree t(size, root, rank);
  const size_t eb = o.elem_bytes();
  if (size == 1) {
    DCOMM_RETURN_IF_ERROR(o.local_copy(recv, send, count));
    return o.finalize(recv, count);
  }
  return detail::for_slices(count, o.slice_elems(), [&](size_t at, size_t n) {
    return detail::tree_reduce_slice(o, t, send + at * eb, rank == root ? recv + at * eb : acc, n);
  });
}

// all_reduce: reduce to rank 0, then broadcast from it.
template <class Ops>
Status tree_all_reduce(Ops& o, int rank, int size, const char* send, char* recv, size_t count, char* acc) {
  DCOMM_RETURN_IF_ERROR(tree_reduce(o, rank, size, 0, send, recv, count, acc));
  return tree_broadcast(o, rank, size, 0, recv, recv, count);
}

// How many slices the double tree lets one tree run ahead of the other at a rank, over FIFOs
// of `slots` that hand every slot back at once: one less than their depth, so a sender ahead
// still finds room before its receiver is ahead too (see double_tree_all_reduce).
inline size_t tree_lag_slices(int slots) { return slots > 1 ? static_cast<size_t>(slots - 1) : 0; }

// Double binary tree all_reduce (as NCCL 2.4): the first half of the buffer is reduced and
// broadcast along a tree rooted at position 0, the second half along its mirror rooted at n-1,
// slice by slice, so each rank is interior in at most one tree (even n) and its links carry
// about the same bytes both ways. acc: two slices of scratch.
//
// The order of the two trees within a slice keeps their pipelines apart. Going up, a rank
// first sends in the tree where it is a leaf (that never waits), then folds in the other;
// going down, it first forwards in the tree where it is interior, then takes its leaf's
// slice. In a fixed order (tree 0, then tree 1) a slice of one tree waits for the same slice
// of the other at every level, and the slices cross the depth of the tree one after another
// instead of in a pipeline (dcomm-sim: 890 ms instead of about 50 at 65,536 ranks and 1 GiB).
// A rank whose parent is the same rank in both trees keeps the fixed order, which that parent
// (interior in both) also keeps: the two slices share one port and must arrive in the order
// they are received. Every wait then points to a shallower node of the same tree or to an
// earlier slice, so nothing waits in a circle.
template <class Ops>
Status double_tree_all_reduce(Ops& o, int rank, int size, const char* send, char* recv, size_t count, char* acc) {
  if (size < 3 || count < 2) return tree_all_reduce(o, rank, size, send, recv, count, acc);
  const size_t eb = o.elem_bytes(), half = count / 2, slice = o.slice_elems();
  DCOMM_RETURN_IF_ERROR(o.local_copy(recv, send, count));
  const detail::BinaryTree trees[2] = {{size, 0, rank}, {size, 0, rank, /*mirrored=*/true}};
  const size_t first[2] = {0, half}, len[2] = {half, count - half};
  const size_t slices = (count - half + slice - 1) / slice;  // the second half is the longer
  auto interior = [&](int h) { return trees[h].child(0) >= 0; };
  const bool split = interior(0) != interior(1) && trees[0].parent() != trees[1].parent();
  const int inner = interior(0) ? 0 : 1;  // with split: the tree where this rank is interior
  const int up[2] = {split ? 1 - inner : 0, split ? inner : 1};
  const int down[2] = {split ? inner : 0, split ? 1 - inner : 1};
  // Slice k of tree h going up (reduce) or down (broadcast); nothing past the tree's half.
  auto run_slice = [&](int h, size_t k, bool going_up) -> Status {
    const size_t at = k * slice;
    if (k >= slices || at >= len[h]) return {};
    const size_t n = std::min(slice, len[h] - at);
    char* mine = recv + (first[h] + at) * eb;
    if (!going_up) return detail::tree_broadcast_slice(o, trees[h], mine, n);
    char* dst = trees[h].parent() < 0 ? mine : acc + static_cast<size_t>(h) * slice * eb;
    return detail::tree_reduce_slice(o, trees[h], mine, dst, n);
  };
  const size_t lag = split ? tree_lag_slices(o.fifo_slots()) : 0;
  for (const int* order : {up, down})
    for (size_t k = 0; k < slices + lag; ++k) {
      DCOMM_RETURN_IF_ERROR(run_slice(order[0], k, order == up));
      if (k >= lag) DCOMM_RETURN_IF_ERROR(run_slice(order[1], k - lag, order == up));
    }
  return {};
}

DCOMM_NAMESPACE_END
