// Rooted collectives as a pipelined chain along the ring order: broadcast flows
// root -> root+1 -> ... -> root-1, reduce flows root+1 -> ... -> root. Each slice moves as soon
// as it arrives, so a long message costs about one pass of its bytes plus (size-1) slice
// latencies. Broadcast and reduce move each byte once per rank (nccl-tests' busbw factor 1).
#pragma once

#include <algorithm>
#include <cstring>

#include "dcomm/algo/ring.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/primitives.hpp"

DCOMM_NAMESPACE_BEGIN

// b.send is read on the root only; b.recv receives on every rank (in place: send == recv).
inline Status chain_broadcast(Primitives& p, int rank, int size, int root, const RingBuffers& b) {
  using detail::at;
  const size_t eb = p.elem_bytes();
  const int pos = detail::mod(rank - root, size);  // 0 is the root, size-1 the chain's end
  if (size == 1) return detail::copy_if_distinct(b.recv, b.send, b.count * eb);
  const size_t slice = p.slice_elems();
  for (size_t base = 0; base < b.count; base += slice) {
    const size_t n = std::min(slice, b.count - base);
    char* out = at(b.recv, base, eb);
    if (pos == 0) {
      DCOMM_RETURN_IF_ERROR(p.copy_send(at(b.send, base, eb), out, n));
    } else if (pos < size - 1) {
      DCOMM_RETURN_IF_ERROR(p.recv_copy_send(out, n));
    } else {
      DCOMM_RETURN_IF_ERROR(p.recv(out, n));
    }
  }
  return {};
}

// b.recv is written on the root only.
inline Status chain_reduce(Primitives& p, int rank, int size, int root, const RingBuffers& b, const Reducer& r) {
  using detail::at;
  const size_t eb = p.elem_bytes();
  const int pos = detail::mod(rank - root - 1, size);  // 0 starts the chain, size-1 is the root
  if (size == 1) {
    detail::copy_if_distinct(b.recv, b.send, b.count * eb).ignore();
    r.finalize(b.recv, b.count);
    return {};
  }
  const size_t slice = p.slice_elems();
  for (size_t base = 0; base < b.count; base += slice) {
    const size_t n = std::min(slice, b.count - base);
    const char* in = at(b.send, base, eb);
    if (pos == 0) DCOMM_RETURN_IF_ERROR(p.send(in, n));
    else if (pos < size - 1) DCOMM_RETURN_IF_ERROR(p.recv_reduce_send(in, n));
    else DCOMM_RETURN_IF_ERROR(p.recv_reduce_copy(in, at(b.recv, base, eb), n));
  }
  return {};
}

DCOMM_NAMESPACE_END
