// Schedules as data: the steps each rank takes (send a range of its working buffer to a peer,
// receive a range from a peer and reduce it in or copy it in, copy a range, finalize a range).
// The recursive algorithms are generated here by pure functions of (world size, rank, count);
// the communicator runs them over its ports (run_schedule, in algo/on_ports.hpp) and the
// simulator (sim/simulator.hpp) runs the very same steps against a modelled network with
// symbolic data, for up to 65,536 ranks. The ring, chain and tree algorithms are code over
// primitives instead; the simulator gets their steps by running that code with a recorder
// (sim/recorder.hpp).
//
// Ranges count elements of the working buffer: all_reduce's output; reduce_scatter's working
// copy of its input (n blocks); all_gather's output (n blocks, of bytes: element size 1).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

struct Step {
  // kCopy: recv <- send within this rank's buffer.
  enum class Kind { kTransfer, kFinalize, kCopy } kind = Kind::kTransfer;
  int send_peer = -1;  // -1: nothing sent
  Range send;
  int recv_peer = -1;  // -1: nothing received
  Range recv;
  bool reduce = false;      // fold what arrives into recv (else it replaces it)
  bool peer_first = false;  // fold as op(peer's, mine): the lower rank's data first
  // Part of the primitive of the step before (a receive that is forwarded, or the copy of a
  // fold's other operand): the simulator charges no step overhead for it.
  bool fused = false;
};

using Schedule = std::vector<Step>;

namespace detail {
// The pairing that reduces any world size to a power of two: with p the largest power of two
// <= n and r = n - p, ranks 0..2r-1 pair up (the even one hands its data to the odd one and
// sits out); the p remaining ("virtual") ranks are numbered in rank order.
struct Fold {
  int n, p, r;
  explicit Fold(int world) : n(world), p(1) {
    while (p * 2 <= n) p *= 2;
    r = n - p;
  }
  bool sits_out(int x) const { return x < 2 * r && x % 2 == 0; }
  bool takes_extra(int x) const { return x < 2 * r && x % 2 == 1; }
  int virtual_of(int x) const { return x < 2 * r ? x / 2 : x - r; }  // for ranks that take part
  int real_of(int v) const { return v < r ? 2 * v + 1 : v + r; }
  int group_begin(int v) const { return v < r ? 2 * v : v + r; }  // first block of virtual rank v
};

inline Step transfer(int peer, Range send, Range recv, bool reduce = false, bool peer_first = false) {
  return {Step::Kind::kTransfer,
          send.size() || recv.size() ? peer : -1,
          send,
          recv.size() || send.size() ? peer : -1,
          recv,
          reduce,
          peer_first};
}
inline Step send_only(int peer, Range r) { return {Step::Kind::kTransfer, peer, r, -1, {}, false, false}; }
inline Step recv_only(int peer, Range r, bool reduce, bool peer_first) {
  return {Step::Kind::kTransfer, -1, {}, peer, r, reduce, peer_first};
}
inline Step finalize(Range r) { return {Step::Kind::kFinalize, -1, {}, -1, r, false, false}; }
inline Step local_copy(Range from, Range to) { return {Step::Kind::kCopy, -1, from, -1, to, false, false}; }

// Recursive halving over virtual ranks: virtual rank v ends holding the reduction of
// [edge(v), edge(v+1)).
template <class Edge>
void halving(Schedule& s, const Fold& f, int v, Edge edge) {
  int lo = 0, hi = f.p;
  for (int d = f.p / 2; d >= 1; d /= 2) {
    const int mid = lo + (hi - lo) / 2;
    const bool upper = (v & d) != 0;
    const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
    s.push_back(transfer(f.real_of(v ^ d), {edge(give_lo), edge(give_hi)}, {edge(keep_lo), edge(keep_hi)},
                         /*reduce=*/true, /*peer_first=*/upper));
    lo = keep_lo, hi = keep_hi;
  }
}
// Recursive doubling over virtual ranks: v starts with [edge(v), edge(v+1)), ends with all.
template <class Edge>
void doubling(Schedule& s, const Fold& f, int v, Edge edge) {
  int lo = v, hi = v + 1;
  for (int d = 1; d < f.p; d *= 2) {
    const bool upper = (v & d) != 0;
    const int other_lo = upper ? lo - d : hi, other_hi = upper ? lo : hi + d;
    s.push_back(transfer(f.real_of(v ^ d), {edge(lo), edge(hi)}, {edge(other_lo), edge(other_hi)}));
    lo = std::min(lo, other_lo), hi = std::max(hi, other_hi);
  }
}
// all_reduce around the fold: `body` is the power-of-two part on the ranks that take part.
template <class Body>
Schedule folded(int n, int x, size_t total, Body body) {
  Schedule s;
  const Fold f(n);
  const Range all{0, total};
  if (n == 1) return {finalize(all)};
  if (f.sits_out(x)) return {send_only(x + 1, all), recv_only(x + 1, all, false, false)};
  if (f.takes_extra(x)) s.push_back(recv_only(x - 1, all, /*reduce=*/true, /*peer_first=*/true));
  body(s, f, f.virtual_of(x));
  if (f.takes_extra(x)) s.push_back(send_only(x - 1, all));
  return s;
}
}  // namespace detail

// all_reduce by recursive doubling: log p exchanges of the whole buffer.
inline Schedule schedule_recursive_doubling(int n, int x, size_t count) {
  return detail::folded(n, x, count, [&](Schedule& s, const detail::Fold& f, int v) {
    for (int d = 1; d < f.p; d *= 2)
      s.push_back(detail::transfer(f.real_of(v ^ d), {0, count}, {0, count}, true, (v & d) != 0));
    s.push_back(detail::finalize({0, count}));
  });
}

// all_reduce by Rabenseifner: recursive halving reduce-scatter, then recursive doubling
// all-gather, over p chunks.
inline Schedule schedule_rabenseifner(int n, int x, size_t count) {
  return detail::folded(n, x, count, [&](Schedule& s, const detail::Fold& f, int v) {
    const size_t per = (count + static_cast<size_t>(f.p) - 1) / static_cast<size_t>(f.p);
    auto edge = [&](int u) { return std::min(count, per * static_cast<size_t>(u)); };
    detail::halving(s, f, v, edge);
    s.push_back(detail::finalize({edge(v), edge(v + 1)}));
    detail::doubling(s, f, v, edge);
  });
}

// reduce_scatter by recursive halving over the virtual ranks' groups of blocks; the working
// buffer holds n blocks of `per` elements, and rank x's result is block x.
inline Schedule schedule_halving_reduce_scatter(int n, int x, size_t per) {
  const detail::Fold f(n);
  const size_t total = per * static_cast<size_t>(n);
  const Range mine{per * static_cast<size_t>(x), per * static_cast<size_t>(x + 1)};
  if (n == 1) return {detail::finalize(mine)};
  if (f.sits_out(x)) return {detail::send_only(x + 1, {0, total}), detail::recv_only(x + 1, mine, false, false)};
  Schedule s;
  if (f.takes_extra(x)) s.push_back(detail::recv_only(x - 1, {0, total}, true, true));
  const int v = f.virtual_of(x);
  auto edge = [&](int u) { return static_cast<size_t>(f.group_begin(u)) * per; };
  detail::halving(s, f, v, edge);
  s.push_back(detail::finalize({edge(v), edge(v + 1)}));
  if (f.takes_extra(x)) s.push_back(detail::send_only(x - 1, {per * static_cast<size_t>(x - 1), mine.begin}));
  return s;
}

// all_gather by recursive doubling over the groups; the working buffer is the output (n blocks
// of `per`), which starts with this rank's block in place.
inline Schedule schedule_doubling_all_gather(int n, int x, size_t per) {
  const detail::Fold f(n);
  const size_t total = per * static_cast<size_t>(n);
  const Range mine{per * static_cast<size_t>(x), per * static_cast<size_t>(x + 1)};
  if (n == 1) return {};
  if (f.sits_out(x)) return {detail::send_only(x + 1, mine), detail::recv_only(x + 1, {0, total}, false, false)};
  Schedule s;
  if (f.takes_extra(x))
    s.push_back(detail::recv_only(x - 1, {per * static_cast<size_t>(x - 1), mine.begin}, false, false));
  auto edge = [&](int u) { return static_cast<size_t>(f.group_begin(u)) * per; };
  detail::doubling(s, f, f.virtual_of(x), edge);
  if (f.takes_extra(x)) s.push_back(detail::send_only(x - 1, {0, total}));
  return s;
}

DCOMM_NAMESPACE_END
