// Direct all_reduce for small messages: every rank sends its whole buffer to every other rank,
// then folds the n buffers in rank order 0, 1, ..., n-1, so every rank computes the same
// expression and gets the same bits. One exchange instead of the ring's 2(n-1) dependent
// steps: at 8 bytes on two ranks that halves the latency. It moves (n-1) x the data per rank,
// so it is only chosen for messages of a few KiB (Config::direct_bytes).
#pragma once

#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

inline constexpr size_t kDirectMaxBytes = 16384;

// ports[p] is the port to rank p (null for this rank); bytes <= kDirectMaxBytes and <= a slot.
inline Status direct_all_reduce(const std::vector<PeerPort*>& ports, int rank, const Reducer& r, const void* send,
                                void* recv, size_t count) {
  const int size = static_cast<int>(ports.size());
  const size_t bytes = count * r.elem_bytes;
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(p)]->post(send, bytes));
  // Fold in rank order into a local buffer: in place, recv is this rank's input.
  alignas(64) char acc[kDirectMaxBytes];
  for (int p = 0; p < size; ++p) {
    const char* data = static_cast<const char*>(send);
    if (p != rank) {
      auto slot = ports[static_cast<size_t>(p)]->acquire_recv(bytes);
      if (!slot.ok()) return slot.status();
      data = *slot;
    }
    if (p == 0) std::memcpy(acc, data, bytes);
    else r.reduce(acc, acc, data, count);
    if (p != rank) ports[static_cast<size_t>(p)]->release_recv();
  }
  r.finalize(acc, count);
  std::memcpy(recv, acc, bytes);
  return {};
}

DCOMM_NAMESPACE_END
