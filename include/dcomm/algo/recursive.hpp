// Latency algorithms over all peers: recursive doubling and Rabenseifner all_reduce, recursive
// halving reduce_scatter and recursive doubling all_gather, and pipelined binary trees for
// broadcast, reduce and all_reduce. Schedules only: every message goes through the ports'
// slots (exchanges as a p2p batch, so two partners sending to each other never deadlock).
//
// Any world size: with p the largest power of two <= n and r = n - p, the first 2r ranks pair
// up before the power-of-two part (the even one of each pair hands its data to the odd one and
// sits out) and after it (the odd one hands the result back): "virtual" ranks 0..p-1 are the
// odd ranks below 2r and every rank from 2r up, in rank order. Where data is split by blocks
// (one per real rank), virtual rank v owns the contiguous group of its real ranks' blocks.
//
// Steps and bytes per rank (S the buffer, log = log2 p; see docs/algorithms.md):
//   recursive doubling all_reduce: log steps, each the whole buffer (S log)
//   Rabenseifner all_reduce: 2 log steps, S/2 + S/4 + ... each way (2S(p-1)/p)
//   halving reduce_scatter / doubling all_gather: log steps, S(p-1)/p
//   binary tree broadcast / reduce: depth log(n) slices of pipeline fill, then S per link
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "dcomm/algo/p2p.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

// The ports of a communicator, for schedules that talk to arbitrary peers.
struct PeerSet {
  const std::vector<PeerPort*>& ports;  // ports[p]: to rank p (null for this rank)
  int rank;
  const Config& config;
  int size() const { return static_cast<int>(ports.size()); }
};

namespace detail {
// The pairing that reduces any world size to a power of two (see above).
struct Fold {
  int n, p, r;
  explicit Fold(int world) : n(world), p(1) {
    while (p * 2 <= n) p *= 2;
    r = n - p;
  }
  bool sits_out(int x) const { return x < 2 * r && x % 2 == 0; }
  int virtual_of(int x) const { return x < 2 * r ? x / 2 : x - r; }  // for ranks that take part
  int real_of(int v) const { return v < r ? 2 * v + 1 : v + r; }
  int group_begin(int v) const { return v < r ? 2 * v : v + r; }  // first block of virtual rank v
};

inline Status batch(const PeerSet& ps, std::initializer_list<P2POp> ops) {
  return run_p2p(std::span<const P2POp>(ops.begin(), ops.size()), ps.rank, ps.ports, ps.config);
}
inline Status exchange(const PeerSet& ps, int peer, const void* out, size_t out_bytes, void* in, size_t in_bytes) {
  return batch(ps, {P2POp::send(out, out_bytes, DataType::kUint8, peer), P2POp::recv(in, in_bytes, DataType::kUint8, peer)});
}
inline Status send_to(const PeerSet& ps, int peer, const void* out, size_t bytes) {
  return batch(ps, {P2POp::send(out, bytes, DataType::kUint8, peer)});
}
inline Status recv_from(const PeerSet& ps, int peer, void* in, size_t bytes) {
  return batch(ps, {P2POp::recv(in, bytes, DataType::kUint8, peer)});
}
inline char* scratch_of(std::vector<char>& scratch, size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}
inline void copy_unless_same(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes) std::memmove(dst, src, bytes);
}

// Before the power-of-two part of an all_reduce on `buf`: the even rank of a pair sends, the
// odd one folds it in. Returns whether this rank sits out.
inline Result<bool> fold_in(const PeerSet& ps, const Fold& f, const Reducer& r, char* buf, size_t count, char* tmp) {
  const int x = ps.rank;
  if (x >= 2 * f.r) return false;
  const size_t bytes = count * r.elem_bytes;
  if (f.sits_out(x)) {
    DCOMM_RETURN_IF_ERROR(send_to(ps, x + 1, buf, bytes));
    return true;
  }
  DCOMM_RETURN_IF_ERROR(recv_from(ps, x - 1, tmp, bytes));
  r.reduce(buf, tmp, buf, count);  // lower rank first, as every other pairing
  return false;
}
// After it: the odd rank hands the result back.
inline Status fold_out(const PeerSet& ps, const Fold& f, char* buf, size_t bytes) {
  const int x = ps.rank;
  if (x >= 2 * f.r) return {};
  if (f.sits_out(x)) return recv_from(ps, x + 1, buf, bytes);
  return send_to(ps, x - 1, buf, bytes);
}
}  // namespace detail

namespace detail {
// An all_reduce over any world size: `buf` = the input, folded down to the power-of-two part,
// power_of_two(buf, tmp) on the ranks that take part, then the result handed back.
template <class Body>
Status folded_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count,
                         std::vector<char>& scratch, Body power_of_two) {
  const Fold f(ps.size());
  const size_t bytes = count * r.elem_bytes;
  char* buf = static_cast<char*>(recv);
  copy_unless_same(buf, send, bytes);
  if (ps.size() == 1 || count == 0) {
    r.finalize(buf, count);
    return {};
  }
  char* tmp = scratch_of(scratch, bytes);
  auto out = fold_in(ps, f, r, buf, count, tmp);
  if (!out.ok()) return out.status();
  if (!*out) DCOMM_RETURN_IF_ERROR(power_of_two(f, buf, tmp));
  return fold_out(ps, f, buf, bytes);
}
}  // namespace detail

// Every step exchanges the whole buffer with the partner whose virtual rank differs in one bit.
inline Status recursive_doubling_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv,
                                            size_t count, std::vector<char>& scratch) {
  const size_t bytes = count * r.elem_bytes;
  return detail::folded_all_reduce(ps, r, send, recv, count, scratch, [&](const detail::Fold& f, char* buf, char* tmp) {
    const int v = f.virtual_of(ps.rank);
    for (int d = 1; d < f.p; d *= 2) {
      DCOMM_RETURN_IF_ERROR(detail::exchange(ps, f.real_of(v ^ d), buf, bytes, tmp, bytes));
      // Lower virtual rank's data first: both partners compute the same expression.
      if ((v & d) == 0) r.reduce(buf, buf, tmp, count);
      else r.reduce(buf, tmp, buf, count);
    }
    r.finalize(buf, count);
    return Status{};
  });
}

namespace detail {
// Recursive halving over virtual ranks: on return, virtual rank v holds the reduction of the
// element range [edge(v), edge(v+1)) of `buf` (edges in elements, edge(p) = the end). Each half
// is reduced by one rank only, so every element is computed once.
template <class Edge>
Status halve(const PeerSet& ps, const Fold& f, const Reducer& r, char* buf, char* tmp, Edge edge) {
  const int v = f.virtual_of(ps.rank);
  const size_t eb = r.elem_bytes;
  int lo = 0, hi = f.p;
  for (int d = f.p / 2; d >= 1; d /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (v & d) != 0;
    const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
    const size_t keep = edge(keep_hi) - edge(keep_lo), give = edge(give_hi) - edge(give_lo);
    DCOMM_RETURN_IF_ERROR(exchange(ps, f.real_of(v ^ d), buf + edge(give_lo) * eb, give * eb, tmp, keep * eb));
    char* mine = buf + edge(keep_lo) * eb;
    if (upper) r.reduce(mine, tmp, mine, keep);  // the lower virtual rank's data first
    else r.reduce(mine, mine, tmp, keep);
    lo = keep_lo, hi = keep_hi;
  }
  return {};
}
// Recursive doubling over virtual ranks: each starts with its range [edge(v), edge(v+1)) of
// `buf` (in bytes) and ends with all of it.
template <class Edge>
Status double_up(const PeerSet& ps, const Fold& f, char* buf, Edge edge) {
  const int v = f.virtual_of(ps.rank);
  int lo = v, hi = v + 1;
  for (int d = 1; d < f.p; d *= 2) {
    const bool upper = (v & d) != 0;
    const int other_lo = upper ? lo - d : hi, other_hi = upper ? lo : hi + d;
    DCOMM_RETURN_IF_ERROR(exchange(ps, f.real_of(v ^ d), buf + edge(lo), edge(hi) - edge(lo), buf + edge(other_lo),
                                   edge(other_hi) - edge(other_lo)));
    lo = std::min(lo, other_lo), hi = std::max(hi, other_hi);
  }
  return {};
}
}  // namespace detail

// Rabenseifner: recursive halving reduce-scatter, then recursive doubling all-gather, over
// p chunks of the buffer.
inline Status rabenseifner_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count,
                                      std::vector<char>& scratch) {
  const size_t eb = r.elem_bytes;
  return detail::folded_all_reduce(ps, r, send, recv, count, scratch, [&](const detail::Fold& f, char* buf, char* tmp) {
    const size_t per = (count + static_cast<size_t>(f.p) - 1) / static_cast<size_t>(f.p);
    auto edge = [&](int v) { return std::min(count, per * static_cast<size_t>(v)); };
    DCOMM_RETURN_IF_ERROR(detail::halve(ps, f, r, buf, tmp, edge));
    const int v = f.virtual_of(ps.rank);
    r.finalize(buf + edge(v) * eb, edge(v + 1) - edge(v));
    return detail::double_up(ps, f, buf, [&](int u) { return edge(u) * eb; });
  });
}

// reduce_scatter by recursive halving over the groups of blocks (send: n blocks of recv_count).
inline Status halving_reduce_scatter(const PeerSet& ps, const Reducer& r, const void* send, void* recv,
                                     size_t recv_count, std::vector<char>& scratch) {
  const detail::Fold f(ps.size());
  const size_t eb = r.elem_bytes, block = recv_count * eb, total = block * static_cast<size_t>(ps.size());
  const int x = ps.rank;
  if (ps.size() == 1 || recv_count == 0) {
    detail::copy_unless_same(recv, send, block);
    r.finalize(recv, recv_count);
    return {};
  }
  if (f.sits_out(x)) {  // hand the whole input to the partner, get this rank's block back
    DCOMM_RETURN_IF_ERROR(detail::send_to(ps, x + 1, send, total));
    return detail::recv_from(ps, x + 1, recv, block);
  }
  char* work = detail::scratch_of(scratch, 2 * total);  // a working copy of the input, and room to receive
  char* tmp = work + total;
  if (x < 2 * f.r) {
    DCOMM_RETURN_IF_ERROR(detail::recv_from(ps, x - 1, tmp, total));
    r.reduce(work, tmp, send, recv_count * static_cast<size_t>(ps.size()));
  } else {
    std::memcpy(work, send, total);
  }
  auto edge = [&](int v) { return static_cast<size_t>(f.group_begin(v)) * recv_count; };
  DCOMM_RETURN_IF_ERROR(detail::halve(ps, f, r, work, tmp, edge));
  const int v = f.virtual_of(x);
  r.finalize(work + edge(v) * eb, edge(v + 1) - edge(v));
  if (x < 2 * f.r) DCOMM_RETURN_IF_ERROR(detail::send_to(ps, x - 1, work + static_cast<size_t>(x - 1) * block, block));
  std::memmove(recv, work + static_cast<size_t>(x) * block, block);
  return {};
}

// all_gather by recursive doubling over the groups of blocks (recv: n blocks of bytes_per_rank).
inline Status doubling_all_gather(const PeerSet& ps, const void* send, void* recv, size_t bytes_per_rank) {
  const detail::Fold f(ps.size());
  const int x = ps.rank;
  char* out = static_cast<char*>(recv);
  const size_t total = bytes_per_rank * static_cast<size_t>(ps.size());
  detail::copy_unless_same(out + static_cast<size_t>(x) * bytes_per_rank, send, bytes_per_rank);
  if (ps.size() == 1 || bytes_per_rank == 0) return {};
  if (f.sits_out(x)) {
    DCOMM_RETURN_IF_ERROR(detail::send_to(ps, x + 1, send, bytes_per_rank));
    return detail::recv_from(ps, x + 1, out, total);
  }
  if (x < 2 * f.r)
    DCOMM_RETURN_IF_ERROR(detail::recv_from(ps, x - 1, out + static_cast<size_t>(x - 1) * bytes_per_rank, bytes_per_rank));
  DCOMM_RETURN_IF_ERROR(detail::double_up(ps, f, out, [&](int v) { return static_cast<size_t>(f.group_begin(v)) * bytes_per_rank; }));
  if (x < 2 * f.r) DCOMM_RETURN_IF_ERROR(detail::send_to(ps, x - 1, out, total));
  return {};
}

namespace detail {
// A binary tree over ranks relative to the root (heap order): parent (i-1)/2, children 2i+1
// and 2i+2. Depth log2(n).
struct BinaryTree {
  int n, root, rel;
  BinaryTree(int size, int root_rank, int rank) : n(size), root(root_rank), rel((rank - root_rank + size) % size) {}
  int real(int i) const { return (i + root) % n; }
  int parent() const { return rel == 0 ? -1 : real((rel - 1) / 2); }
  int child(int k) const { return 2 * rel + 1 + k < n ? real(2 * rel + 1 + k) : -1; }
};
}  // namespace detail

// Pipelined binary-tree broadcast: slot-sized slices flow down the tree as they arrive.
inline Status tree_broadcast(const PeerSet& ps, int root, const void* send, void* recv, size_t bytes) {
  const detail::BinaryTree t(ps.size(), root, ps.rank);
  char* out = static_cast<char*>(recv);
  if (ps.rank == root) detail::copy_unless_same(out, send, bytes);
  if (ps.size() == 1) return {};
  const int parent = t.parent();
  const size_t slice = ps.ports[static_cast<size_t>(parent >= 0 ? parent : t.child(0))]->slot_bytes();
  for (size_t at = 0; at < bytes || at == 0; at += slice) {
    const size_t n = std::min(slice, bytes - at);
    if (parent >= 0) {
      PeerPort* up = ps.ports[static_cast<size_t>(parent)];
      auto slot = up->acquire_recv(n);
      if (!slot.ok()) return slot.status();
      if (n) std::memcpy(out + at, *slot, n);
      up->release_recv();
    }
    for (int k = 0; k < 2; ++k)
      if (int c = t.child(k); c >= 0) DCOMM_RETURN_IF_ERROR(ps.ports[static_cast<size_t>(c)]->post(out + at, n));
    if (bytes == 0) break;
  }
  return {};
}

// Pipelined binary-tree reduce: each rank folds its children's slices into its own (own data
// first, then children in order) and passes the slice up.
inline Status tree_reduce(const PeerSet& ps, const Reducer& r, int root, const void* send, void* recv, size_t count,
                          std::vector<char>& scratch) {
  const detail::BinaryTree t(ps.size(), root, ps.rank);
  const size_t eb = r.elem_bytes;
  const char* in = static_cast<const char*>(send);
  if (ps.size() == 1) {
    detail::copy_unless_same(recv, send, count * eb);
    r.finalize(recv, count);
    return {};
  }
  const int parent = t.parent();
  const size_t slice = ps.ports[static_cast<size_t>(parent >= 0 ? parent : t.child(0))]->slot_bytes() / eb;
  char* acc = detail::scratch_of(scratch, slice * eb);
  for (size_t at = 0; at < count || at == 0; at += slice) {
    const size_t n = std::min(slice, count - at);
    char* dst = ps.rank == root ? static_cast<char*>(recv) + at * eb : acc;
    const char* partial = in + at * eb;
    for (int k = 0; k < 2; ++k) {
      const int c = t.child(k);
      if (c < 0) continue;
      PeerPort* down = ps.ports[static_cast<size_t>(c)];
      auto slot = down->acquire_recv(n * eb);
      if (!slot.ok()) return slot.status();
      r.reduce(dst, partial, *slot, n);
      down->release_recv();
      partial = dst;
    }
    if (partial != dst) detail::copy_unless_same(dst, partial, n * eb);  // a leaf
    if (ps.rank == root) r.finalize(dst, n);
    else DCOMM_RETURN_IF_ERROR(ps.ports[static_cast<size_t>(parent)]->post(dst, n * eb));
    if (count == 0) break;
  }
  return {};
}

// Binary tree all_reduce: reduce to rank 0, then broadcast from it.
inline Status tree_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count,
                              std::vector<char>& scratch) {
  DCOMM_RETURN_IF_ERROR(tree_reduce(ps, r, 0, send, recv, count, scratch));
  return tree_broadcast(ps, 0, recv, recv, count * r.elem_bytes);
}

DCOMM_NAMESPACE_END
