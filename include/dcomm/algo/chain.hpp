// Rooted collectives as a pipelined chain along the ring order: broadcast flows
// root -> root+1 -> ... -> root-1, reduce flows root+1 -> ... -> root. Each slice moves as soon
// as it arrives, so a long message costs about one pass of its bytes plus (size-1) slice
// latencies. Broadcast and reduce move each byte once per rank (nccl-tests' busbw factor 1).
#pragma once

#include <algorithm>

#include "dcomm/algo/ring.hpp"
#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

// b.send is read on the root only; b.recv receives on every rank (in place: send == recv).
DCOMM_HD_TEMPLATE
template <class Prims>
DCOMM_HOST_DEVICE PrimsStatus<Prims> chain_broadcast(Prims& p, int rank, int size, int root, const RingBuffers& b) {
  using detail::at;
  const size_t eb = p.elem_bytes();
  const int pos = detail::mod(rank - root, size);  // 0 is the root, size-1 the chain's end
  if (size == 1) return p.local_copy(b.recv, b.send, b.count);
  return detail::for_each_slice(p, b.count, [&](size_t base, size_t n) {
    char* out = at(b.recv, base, eb);
    if (pos == 0) return p.copy_send(at(b.send, base, eb), out, n);
    if (pos < size - 1) return p.recv_copy_send(out, n);
    return p.recv(out, n);
  });
}

// b.recv is written on the root only (one rank: a copy; kAvg over one rank divides by 1).
DCOMM_HD_TEMPLATE
template <class Prims>
DCOMM_HOST_DEVICE PrimsStatus<Prims> chain_reduce(Prims& p, int rank, int size, int root, const RingBuffers& b) {
  using detail::at;
  const size_t eb = p.elem_bytes();
  const int pos = detail::mod(rank - root - 1, size);  // 0 starts the chain, size-1 is the root
  if (size == 1) return p.local_copy(b.recv, b.send, b.count);
  return detail::for_each_slice(p, b.count, [&](size_t base, size_t n) {
    const char* in = at(b.send, base, eb);
    if (pos == 0) return p.send(in, n);
    if (pos < size - 1) return p.recv_reduce_send(in, n);
    return p.recv_reduce_copy(in, at(b.recv, base, eb), n);
  });
}

DCOMM_NAMESPACE_END
