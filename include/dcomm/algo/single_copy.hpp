// Single-copy collectives between ranks of one host: each rank tells its peers where its
// buffer is (a 16-byte descriptor through the FIFO, inline in one cache line), the peers copy
// straight out of it (cross-memory attach, or plain memory for threads), then tell the owner
// they are done so it may return and let its caller reuse the buffer. One copy of the data
// instead of two through the staging FIFO; the communicator picks these for large messages
// when every rank can read every other (see transport/cma.hpp).
//
// reduce_scatter and all_reduce: rank r owns chunk r. It reads chunk r of every peer's input
// a tile at a time into a buffer that stays in cache and folds it into its output (every
// chunk is computed once, by its owner, so every rank ends with the same bits). For
// all_reduce its "done reading your input" message also says "my chunk is final, here is my
// output", and each rank then copies the other chunks straight out of their owners' outputs.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
struct BufferDescriptor {
  uint64_t address;
  uint64_t bytes;
  uint64_t split = 0;  // broadcast: where the receivers stop reading (the root writes the rest)
};

// Receives a peer's descriptor (its buffer's address), checking the size it offers.
inline Result<BufferDescriptor> take_descriptor(PeerPort* port, size_t bytes) {
  auto slot = port->acquire_recv(sizeof(BufferDescriptor));
  if (!slot.ok()) return slot.status();
  BufferDescriptor d;
  std::memcpy(&d, *slot, sizeof d);
  port->release_recv();
  if (d.bytes != bytes)
    return make_error(ErrorCode::kInvalidArgument, port->info().describe(), " offers ", d.bytes,
                      " bytes where this rank expects ", bytes, ": do all ranks pass the same count?");
  return d;
}

inline Status post_all(const std::vector<PeerPort*>& ports, int rank, const void* data, size_t bytes) {
  for (size_t p = 0; p < ports.size(); ++p)
    if (static_cast<int>(p) != rank) DCOMM_RETURN_IF_ERROR(ports[p]->post(data, bytes));
  return {};
}

inline Status await_done(PeerPort* port) {
  auto slot = port->acquire_recv(0);
  if (!slot.ok()) return slot.status();
  port->release_recv();
  return {};
}

// Tells every peer where this rank's `bytes`-long buffer is and learns where theirs are.
inline Result<std::vector<uint64_t>> swap_addresses(const std::vector<PeerPort*>& ports, int rank, const void* mine,
                                                    size_t bytes) {
  BufferDescriptor d{reinterpret_cast<uint64_t>(mine), bytes};
  DCOMM_RETURN_IF_ERROR(post_all(ports, rank, &d, sizeof d));
  std::vector<uint64_t> addresses(ports.size());
  for (size_t p = 0; p < ports.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    auto a = take_descriptor(ports[p], bytes);
    if (!a.ok()) return a.status();
    addresses[p] = a->address;
  }
  return addresses;
}

// Tells every peer this rank is done with their buffers, and waits until they are with ours.
inline Status finish(const std::vector<PeerPort*>& ports, int rank) {
  DCOMM_RETURN_IF_ERROR(post_all(ports, rank, nullptr, 0));
  for (size_t p = 0; p < ports.size(); ++p)
    if (static_cast<int>(p) != rank) DCOMM_RETURN_IF_ERROR(await_done(ports[p]));
  return {};
}
}  // namespace detail

// ports[p]: the port to rank p (null for this rank). recv holds size x bytes_per_rank.
inline Status single_copy_all_gather(const std::vector<PeerPort*>& ports, int rank, const void* send, void* recv,
                                     size_t bytes_per_rank) {
  const int size = static_cast<int>(ports.size());
  char* out = static_cast<char*>(recv);
  auto sources = detail::swap_addresses(ports, rank, send, bytes_per_rank);
  if (!sources.ok()) return sources.status();
  // Read the peers in ring order from the next rank on, so they are not all read at once.
  for (int k = 1; k < size; ++k) {
    size_t p = static_cast<size_t>((rank + k) % size);
    DCOMM_RETURN_IF_ERROR(ports[p]->read_remote(out + p * bytes_per_rank, (*sources)[p], bytes_per_rank));
  }
  char* own = out + static_cast<size_t>(rank) * bytes_per_rank;
  if (own != send && bytes_per_rank) std::memcpy(own, send, bytes_per_rank);
  return detail::finish(ports, rank);
}

// Every rank copies the root's buffer. In place the root has nothing else to do, so it writes
// the tail into the receivers while they read the head: each receiver reads (n-1)/n and the
// root writes 1/n into each, which balances the root's n-1 writes against one read. Out of
// place the root's own copy already takes as long as a receiver's read, so it does not help.
// Each side then says it is done and waits for the other.
inline Status single_copy_broadcast(const std::vector<PeerPort*>& ports, int rank, int root, const void* send,
                                    void* recv, size_t bytes) {
  const int size = static_cast<int>(ports.size());
  if (rank == root) {
    const size_t split =
        send == recv ? (bytes / static_cast<size_t>(size) * static_cast<size_t>(size - 1)) & ~size_t{63} : bytes;
    detail::BufferDescriptor mine{reinterpret_cast<uint64_t>(send), bytes, split};
    DCOMM_RETURN_IF_ERROR(detail::post_all(ports, rank, &mine, sizeof mine));
    if (recv != send && bytes) std::memcpy(recv, send, bytes);
    for (int p = 0; p < size && split < bytes; ++p) {
      if (p == rank) continue;
      auto target = detail::take_descriptor(ports[static_cast<size_t>(p)], bytes);
      if (!target.ok()) return target.status();
      DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(p)]->write_remote(target->address + split,
                                                                       static_cast<const char*>(send) + split, bytes - split));
    }
    return detail::finish(ports, rank);
  }
  PeerPort* from_root = ports[static_cast<size_t>(root)];
  auto source = detail::take_descriptor(from_root, bytes);
  if (!source.ok()) return source.status();
  if (source->split > bytes) return make_error(ErrorCode::kInternal, "broadcast: root sent split ", source->split);
  if (source->split < bytes) {  // the root writes the tail: tell it where
    detail::BufferDescriptor mine{reinterpret_cast<uint64_t>(recv), bytes};
    DCOMM_RETURN_IF_ERROR(from_root->post(&mine, sizeof mine));
  }
  DCOMM_RETURN_IF_ERROR(from_root->read_remote(recv, source->address, source->split));
  DCOMM_RETURN_IF_ERROR(from_root->post(nullptr, 0));
  return detail::await_done(from_root);
}

// Chunks of a single-copy reduction: chunk c is [off(c), off(c+1)) of `count` elements.
struct ChunkedBuffer {
  size_t count;
  int parts;
  size_t off(int c) const {
    size_t per = (count + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
    return std::min(count, per * static_cast<size_t>(c));
  }
};

namespace detail {
inline constexpr size_t kTileBytes = 256 * 1024;

// out[first, first+count) = this rank's input there, combined with every peer's (rank p's
// input is at addresses[p]; this rank's own at `mine`). In place (out == mine) the own part is
// already there. Peer tiles are read into a buffer that stays in cache.
inline Status fold_chunk(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                         const std::vector<uint64_t>& addresses, const char* mine, char* out, size_t first,
                         size_t count) {
  const size_t eb = r.elem_bytes;
  std::vector<char> tile(std::min(kTileBytes, std::max<size_t>(count * eb, 1)));
  const size_t per_tile = tile.size() / eb;
  for (size_t i = 0; i < count; i += per_tile) {
    const size_t n = std::min(per_tile, count - i);
    const size_t at = (first + i) * eb;
    char* dst = out + at;
    if (dst != mine + at) std::memcpy(dst, mine + at, n * eb);
    for (int p = 0; p < static_cast<int>(ports.size()); ++p) {
      if (p == rank) continue;
      DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(p)]->read_remote(tile.data(), addresses[static_cast<size_t>(p)] + at, n * eb));
      r.reduce(dst, dst, tile.data(), n);
    }
    r.finalize(dst, n);
  }
  return {};
}
}  // namespace detail

// send holds size x recv_count elements; rank r's reduced block r lands in recv.
inline Status single_copy_reduce_scatter(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                                         const void* send, void* recv, size_t recv_count) {
  const size_t eb = r.elem_bytes, total = recv_count * ports.size() * eb;
  auto inputs = detail::swap_addresses(ports, rank, send, total);
  if (!inputs.ok()) return inputs.status();
  // Fold block `rank` into recv: addresses are shifted so block `rank` sits at offset 0.
  const size_t shift = static_cast<size_t>(rank) * recv_count * eb;
  for (auto& a : *inputs) a += shift;
  DCOMM_RETURN_IF_ERROR(detail::fold_chunk(ports, rank, r, *inputs, static_cast<const char*>(send) + shift,
                                           static_cast<char*>(recv), 0, recv_count));
  return detail::finish(ports, rank);
}

inline Status single_copy_all_reduce(const std::vector<PeerPort*>& ports, int rank, const Reducer& r, const void* send,
                                     void* recv, size_t count) {
  const int size = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes, bytes = count * eb;
  const ChunkedBuffer chunks{count, size};
  auto inputs = detail::swap_addresses(ports, rank, send, bytes);
  if (!inputs.ok()) return inputs.status();
  // Reduce-scatter: this rank's chunk, straight from every input.
  size_t first = chunks.off(rank), n = chunks.off(rank + 1) - first;
  DCOMM_RETURN_IF_ERROR(detail::fold_chunk(ports, rank, r, *inputs, static_cast<const char*>(send),
                                           static_cast<char*>(recv), first, n));
  // "Done with your input; my chunk is final in this output" (the second swap says both).
  auto outputs = detail::swap_addresses(ports, rank, recv, bytes);
  if (!outputs.ok()) return outputs.status();
  // All-gather: copy each owner's chunk out of its output.
  for (int k = 1; k < size; ++k) {
    int p = (rank + k) % size;
    size_t at = chunks.off(p) * eb, len = (chunks.off(p + 1) - chunks.off(p)) * eb;
    DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(p)]->read_remote(static_cast<char*>(recv) + at, (*outputs)[static_cast<size_t>(p)] + at, len));
  }
  return detail::finish(ports, rank);
}

DCOMM_NAMESPACE_END
