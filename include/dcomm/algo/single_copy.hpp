// Single-copy all_gather and broadcast between ranks of one host: each rank tells its peers
// where its buffer is (a 16-byte descriptor through the FIFO, inline in one cache line), the
// peers copy straight out of it (cross-memory attach, or plain memory for threads), then tell
// the owner they are done so it may return and let its caller reuse the buffer. One copy of
// the data instead of two through the staging FIFO; the communicator picks these for large
// messages when every rank can read every other (see transport/cma.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
struct BufferDescriptor {
  uint64_t address;
  uint64_t bytes;
};

inline Status post(PeerPort* port, const void* data, size_t bytes) {
  auto slot = port->acquire_send(bytes);
  if (!slot.ok()) return slot.status();
  if (bytes) std::memcpy(*slot, data, bytes);
  port->commit_send(bytes);
  return {};
}

// Receives a peer's descriptor and copies its buffer into dst.
inline Status pull(PeerPort* port, void* dst, size_t bytes) {
  auto slot = port->acquire_recv(sizeof(BufferDescriptor));
  if (!slot.ok()) return slot.status();
  BufferDescriptor d;
  std::memcpy(&d, *slot, sizeof d);
  port->release_recv();
  if (d.bytes != bytes)
    return make_error(ErrorCode::kInvalidArgument, port->info().describe(), " offers ", d.bytes,
                      " bytes where this rank expects ", bytes, ": do all ranks pass the same count?");
  return port->read_remote(dst, d.address, bytes);
}

inline Status await_done(PeerPort* port) {
  auto slot = port->acquire_recv(0);
  if (!slot.ok()) return slot.status();
  port->release_recv();
  return {};
}
}  // namespace detail

// ports[p]: the port to rank p (null for this rank). recv holds size x bytes_per_rank.
inline Status single_copy_all_gather(const std::vector<PeerPort*>& ports, int rank, const void* send, void* recv,
                                     size_t bytes_per_rank) {
  const int size = static_cast<int>(ports.size());
  char* out = static_cast<char*>(recv);
  detail::BufferDescriptor mine{reinterpret_cast<uint64_t>(send), bytes_per_rank};
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(detail::post(ports[static_cast<size_t>(p)], &mine, sizeof mine));
  // Read the peers in ring order from the next rank on, so they are not all read at once.
  for (int k = 1; k < size; ++k) {
    int p = (rank + k) % size;
    DCOMM_RETURN_IF_ERROR(detail::pull(ports[static_cast<size_t>(p)], out + static_cast<size_t>(p) * bytes_per_rank, bytes_per_rank));
  }
  char* own = out + static_cast<size_t>(rank) * bytes_per_rank;
  if (own != send && bytes_per_rank) std::memcpy(own, send, bytes_per_rank);
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(detail::post(ports[static_cast<size_t>(p)], nullptr, 0));
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(detail::await_done(ports[static_cast<size_t>(p)]));
  return {};
}

// Every rank copies the root's buffer; the root waits until all have.
inline Status single_copy_broadcast(const std::vector<PeerPort*>& ports, int rank, int root, const void* send,
                                    void* recv, size_t bytes) {
  const int size = static_cast<int>(ports.size());
  if (rank == root) {
    detail::BufferDescriptor mine{reinterpret_cast<uint64_t>(send), bytes};
    for (int p = 0; p < size; ++p)
      if (p != rank) DCOMM_RETURN_IF_ERROR(detail::post(ports[static_cast<size_t>(p)], &mine, sizeof mine));
    if (recv != send && bytes) std::memcpy(recv, send, bytes);
    for (int p = 0; p < size; ++p)
      if (p != rank) DCOMM_RETURN_IF_ERROR(detail::await_done(ports[static_cast<size_t>(p)]));
    return {};
  }
  PeerPort* from_root = ports[static_cast<size_t>(root)];
  DCOMM_RETURN_IF_ERROR(detail::pull(from_root, recv, bytes));
  return detail::post(from_root, nullptr, 0);
}

DCOMM_NAMESPACE_END
