// Ring algorithms: all_reduce, reduce_scatter and all_gather as schedules over primitives.
//
// Ranks here are positions in the ring order (topo/order.hpp); reduce_scatter and all_gather
// map each position's chunk to its rank's block (RingBuffers::block_of).
//
// Nomenclature (as Gloo's allreduce.cc): the data is cut into `size` chunks, one per rank;
// a chunk is moved a slice at a time (a slice fits one slot), and a round is one slice of
// every chunk. Rank r sends to r+1 and receives from r-1; at step s of the reduce-scatter it
// sends chunk r-s-1, so after size-1 steps it holds the full reduction of chunk r, and the
// all-gather then passes each finished chunk once around the ring. Each rank sends
// 2(size-1)/size of the data in all_reduce and (size-1)/size in the other two, the optimum
// for a ring. Slots let several slices be in flight, which pipelines the rounds.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

struct RingBuffers {
  const char* send;
  char* recv;
  size_t count;  // all_reduce: elements in each buffer; reduce_scatter / all_gather: per rank
  // The ring runs over positions; block_of[p] is the rank whose block of reduce_scatter's input
  // or all_gather's output the rank at position p owns (null: position = rank).
  const int* block_of = nullptr;
  // Elements from one rank's block to the next in reduce_scatter's input and all_gather's
  // output; 0: count (a device channel that moves part of each block sets the whole).
  size_t stride = 0;
  DCOMM_HOST_DEVICE size_t block(int position) const {
    return static_cast<size_t>(block_of ? block_of[position] : position) * (stride ? stride : count);
  }
};

namespace detail {
DCOMM_HOST_DEVICE inline int mod(int a, int n) { return ((a % n) + n) % n; }
DCOMM_HOST_DEVICE inline const char* at(const char* p, size_t i, size_t elem) { return p + i * elem; }
DCOMM_HOST_DEVICE inline char* at(char* p, size_t i, size_t elem) { return p + i * elem; }
// Runs step(base, n) over consecutive slices [base, base+n) of `count` elements, each at most
// what a slot holds; stops at the first error.
DCOMM_HD_TEMPLATE
template <class Prims, class Step>
DCOMM_HOST_DEVICE auto for_each_slice(const Prims& p, size_t count, Step step) -> decltype(step(0, 0)) {
  const size_t slice = p.slice_elems();
  for (size_t base = 0; base < count; base += slice) DCOMM_TRY(step(base, std::min(slice, count - base)));
  return {};
}
}  // namespace detail

// The algorithms are templates over the primitives (prims/primitives.hpp on the host,
// prims/device_prims.hpp in a kernel) and return what those return.
template <class Prims>
using PrimsStatus = decltype(std::declval<Prims&>().send(nullptr, 0));

// all_reduce: each round covers up to size*slice elements, cut into `size` equal chunks (a
// multiple of the primitives' chunk_align() elements, so device chunks stay 16-byte aligned).
DCOMM_HD_TEMPLATE
template <class Prims>
DCOMM_HOST_DEVICE PrimsStatus<Prims> ring_all_reduce(Prims& p, int rank, int size, const RingBuffers& b) {
  using detail::at;
  using detail::mod;
  const size_t eb = p.elem_bytes();
  if (size == 1) return p.local_copy(b.recv, b.send, b.count);
  const size_t round_elems = p.slice_elems() * static_cast<size_t>(size);
  const size_t align = p.chunk_align();
  for (size_t base = 0; base < b.count; base += round_elems) {
    const size_t n = std::min(round_elems, b.count - base);
    const size_t per = ((n + static_cast<size_t>(size) - 1) / static_cast<size_t>(size) + align - 1) / align * align;
    auto off = [&](int c) { return base + std::min(n, per * static_cast<size_t>(c)); };
    auto len = [&](int c) { return off(c + 1) - off(c); };
    auto in = [&](int c) { return at(b.send, off(c), eb); };
    auto out = [&](int c) { return at(b.recv, off(c), eb); };

    // Reduce-scatter. Step 0: send our chunk r-1.
    int c = mod(rank - 1, size);
    DCOMM_TRY(p.send(in(c), len(c)));
    // Steps 1..size-2: add our share to chunk r-s-1 and pass it on.
    for (int s = 1; s < size - 1; ++s) {
      c = mod(rank - s - 1, size);
      DCOMM_TRY(p.recv_reduce_send(in(c), len(c)));
    }
    // Last step: chunk r is complete here; keep it and start it round the ring.
    c = rank;
    DCOMM_TRY(p.recv_reduce_copy_send(in(c), out(c), len(c)));

    // All-gather: receive the finished chunk r-t-1, keep it, forward all but the last.
    for (int t = 0; t < size - 2; ++t) {
      c = mod(rank - t - 1, size);
      DCOMM_TRY(p.recv_copy_send(out(c), len(c)));
    }
    c = mod(rank + 1, size);
    DCOMM_TRY(p.recv(out(c), len(c)));
  }
  return {};
}

// reduce_scatter: chunk c is send[b*count, (b+1)*count) for its block b = b.block(c); the rank
// at position p keeps the reduced chunk p.
DCOMM_HD_TEMPLATE
template <class Prims>
DCOMM_HOST_DEVICE PrimsStatus<Prims> ring_reduce_scatter(Prims& p, int rank, int size, const RingBuffers& b) {
  using detail::at;
  using detail::mod;
  const size_t eb = p.elem_bytes();
  if (size == 1) return p.local_copy(b.recv, b.send, b.count);
  return detail::for_each_slice(p, b.count, [&](size_t base, size_t n) {
    auto in = [&](int c) { return at(b.send, b.block(c) + base, eb); };
    DCOMM_TRY(p.send(in(mod(rank - 1, size)), n));
    for (int s = 1; s < size - 1; ++s) DCOMM_TRY(p.recv_reduce_send(in(mod(rank - s - 1, size)), n));
    return p.recv_reduce_copy(in(rank), at(b.recv, base, eb), n);
  });
}

// all_gather: rank r's send lands at recv[r*count, (r+1)*count) on every rank (chunk c is
// the block of the rank at position c).
DCOMM_HD_TEMPLATE
template <class Prims>
DCOMM_HOST_DEVICE PrimsStatus<Prims> ring_all_gather(Prims& p, int rank, int size, const RingBuffers& b) {
  using detail::at;
  using detail::mod;
  const size_t eb = p.elem_bytes();
  if (size == 1) return p.local_copy(b.recv, b.send, b.count);
  return detail::for_each_slice(p, b.count, [&](size_t base, size_t n) {
    auto out = [&](int c) { return at(b.recv, b.block(c) + base, eb); };
    DCOMM_TRY(p.copy_send(at(b.send, base, eb), out(rank), n));
    for (int t = 0; t < size - 2; ++t) DCOMM_TRY(p.recv_copy_send(out(mod(rank - t - 1, size)), n));
    return p.recv(out(mod(rank + 1, size)), n);
  });
}

DCOMM_NAMESPACE_END
