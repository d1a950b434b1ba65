// Single-copy collectives between ranks of one host: each rank tells its peers where its
// buffers are (a small descriptor through the FIFO), the peers read from or write into them
// directly (cross-memory attach, or plain memory for threads), then tell the owner they are
// done so it may return and let its caller reuse the buffers. One copy of the data instead of
// two through the staging FIFO; the communicator picks these for large messages when every
// rank can read every other (see transport/cma.hpp).
//
// Where a rank has the bytes every peer needs, it pushes them: it copies a tile into its own
// output (the tile stays in cache) and writes that tile into each peer's output, so the
// memory traffic per rank is one read of the source and one write per output, instead of a
// read and a write per output when each peer pulls.
//
// The reductions (reduce_scatter, all_reduce, reduce) are in algo/single_copy_reduce.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
struct BufferDescriptor {
  uint64_t address;  // the input (broadcast: the buffer read)
  uint64_t bytes;
  uint64_t output = 0;                    // all_reduce, all_gather: where peers write their results
  uint64_t split = 0;                     // broadcast: where the receivers stop reading (the root writes the rest)
  uint64_t piece = 0;                     // staged, in pieces of this many bytes (0: not staged)
  RegionRef input_region, output_region;  // set when the buffer is in a dcomm::mem_alloc block
  uint64_t stage = 0;                     // all_reduce: this rank's staging block, where piece > 0
  RegionRef stage_region;
};

// This rank's buffers as its peers need them: `in` of `bytes` and `out` of `out_bytes`.
inline BufferDescriptor descriptor_of(const void* in, size_t bytes, const void* out = nullptr, size_t out_bytes = 0,
                                      uint64_t split = 0) {
  return {reinterpret_cast<uint64_t>(in),
          bytes,
          reinterpret_cast<uint64_t>(out),
          split,
          0,
          local_region(in, bytes),
          out ? local_region(out, out_bytes) : RegionRef{},
          0,
          {}};
}

// Receives a peer's descriptor (its buffers' addresses), checking the size it offers.
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

// Tells every peer where this rank's buffers are and learns where theirs are.
inline Result<std::vector<BufferDescriptor>> swap_descriptors(const std::vector<PeerPort*>& ports, int rank,
                                                              const BufferDescriptor& mine) {
  DCOMM_RETURN_IF_ERROR(post_all(ports, rank, &mine, sizeof mine));
  std::vector<BufferDescriptor> theirs(ports.size());
  for (size_t p = 0; p < ports.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    auto d = take_descriptor(ports[p], mine.bytes);
    if (!d.ok()) return d.status();
    theirs[p] = *d;
  }
  return theirs;
}

// Waits for an empty message ("done") from every peer.
inline Status await_all_done(const std::vector<PeerPort*>& ports, int rank) {
  for (size_t p = 0; p < ports.size(); ++p)
    if (static_cast<int>(p) != rank) DCOMM_RETURN_IF_ERROR(await_done(ports[p]));
  return {};
}

// Tells every peer this rank is done with their buffers (after the streamed stores into them
// are visible), and waits until they are with ours.
inline Status finish(const std::vector<PeerPort*>& ports, int rank) {
  stream_fence();
  DCOMM_RETURN_IF_ERROR(post_all(ports, rank, nullptr, 0));
  return await_all_done(ports, rank);
}

inline constexpr size_t kTileBytes = size_t{256} * 1024;

// Where fold_chunk (algo/single_copy_reduce.hpp) writes a finished tile besides this rank's
// output: nowhere, every peer's output, or one rank's (>= 0: a reduce's root).
inline constexpr int kPushNone = -2, kPushAll = -1;

// Writes `bytes` at `from` (this rank's output, just written, so in cache) to offset `at` of
// every peer's output (`to` kPushAll), in ring order from the next rank so peers are not all
// written at once, or of rank `to`'s only.
inline Status push_to_peers(const std::vector<PeerPort*>& ports, int rank, const std::vector<BufferDescriptor>& peers,
                            const char* from, size_t at, size_t bytes, int to = kPushAll) {
  const int size = static_cast<int>(ports.size());
  for (int k = 1; k < size; ++k) {
    const size_t p = static_cast<size_t>((rank + k) % size);
    if (to != kPushAll && static_cast<int>(p) != to) continue;
    DCOMM_RETURN_IF_ERROR(
        ports[p]->write_memory(peers[p].output + at, from, bytes, peers[p].output_region, /*stream=*/true));
  }
  return {};
}
}  // namespace detail

namespace detail {
// A staged broadcast's pieces: piece i goes through slot i % kStagedSlots of the root's staging
// block, so the root copies a piece while the receivers read the one before. A piece is an
// eighth of the buffer (the root's first piece is the copy no receiver overlaps), at least a
// tile and at most 4 MiB (the staging block: 8 MiB at most).
inline constexpr size_t kStagedSlots = 2;
inline constexpr size_t kStagedPieceMax = size_t{4} << 20;

// From here a staged broadcast runs in eighths: the root's first copy, which no receiver
// overlaps, is an eighth of its time.
inline constexpr size_t kStagedEighthsFrom = 8 * kTileBytes;

inline size_t staged_piece(size_t bytes) {
  const size_t eighth = (bytes / 8 + 63) & ~size_t{63};
  return std::min(bytes, std::clamp(eighth, kTileBytes, kStagedPieceMax));
}

// kStagedSlots slots of `slot_bytes` in this rank's staging block; null, with a warning, where
// there is no shared memory for them (the call then goes unstaged).
inline char* reserve_slots(StagingBlock& staging, size_t slot_bytes, int rank, const char* op) {
  auto area = staging.reserve(kStagedSlots * slot_bytes);
  if (area.ok()) return *area;
  DCOMM_LOG(kWarn, kSubsysColl, rank, op, " not staged: ", area.status().message());
  return nullptr;
}

// Offers this rank's staging block for a call staged in slots of `slot_bytes` (all_gather,
// all_reduce): reserves them and says so in `mine` (piece, stage, stage_region), which the
// descriptor swap hands every peer. False, `mine` unchanged, where there is no room.
inline bool offer_stage(BufferDescriptor& mine, StagingBlock& staging, size_t slot_bytes, int rank, const char* op) {
  char* area = reserve_slots(staging, slot_bytes, rank, op);
  if (!area) return false;
  mine.piece = slot_bytes, mine.stage = reinterpret_cast<uint64_t>(area), mine.stage_region = staging.region();
  return true;
}

// Whether every rank offered a stage of the same slot size (`peers` from the swap, this rank's
// own among them): each rank reads the same descriptors, so all stage or none.
inline bool all_staged(const std::vector<BufferDescriptor>& peers, const BufferDescriptor& mine) {
  if (mine.piece == 0) return false;
  for (const auto& d : peers)
    if (d.piece != mine.piece) return false;
  return true;
}

// Whether some peer is another process (threads of this one read the root's buffer in place).
inline bool any_other_process(const std::vector<PeerPort*>& ports, int rank) {
  for (size_t p = 0; p < ports.size(); ++p)
    if (static_cast<int>(p) != rank && !ports[p]->memory().same_process()) return true;
  return false;
}

// The root's side, through `area` (kStagedSlots pieces of the root's staging block): each
// piece is copied there once that slot's last readers are done with it, then announced to every
// receiver (piece 0 by the descriptor, the others by an empty message); out of place the root
// then copies it into its own recv while they read.
inline Status staged_broadcast_root(const std::vector<PeerPort*>& ports, int rank, const char* send, char* recv,
                                    size_t bytes, size_t piece, char* area, const RegionRef& region, bool stream) {
  const size_t pieces = (bytes + piece - 1) / piece;
  const BufferDescriptor mine{reinterpret_cast<uint64_t>(area), bytes, 0, bytes, piece, region, {}, 0, {}};
  for (size_t i = 0; i < pieces; ++i) {
    if (i >= kStagedSlots) DCOMM_RETURN_IF_ERROR(await_all_done(ports, rank));  // piece i - kStagedSlots read
    const size_t at = i * piece, n = std::min(piece, bytes - at);
    char* slot = area + (i % kStagedSlots) * piece;
    std::memcpy(slot, send + at, n);
    DCOMM_RETURN_IF_ERROR(i == 0 ? post_all(ports, rank, &mine, sizeof mine) : post_all(ports, rank, nullptr, 0));
    if (recv != send) copy_bytes(recv + at, slot, n, stream);  // while the receivers read it
  }
  for (size_t i = 0; i < std::min(pieces, kStagedSlots); ++i) DCOMM_RETURN_IF_ERROR(await_all_done(ports, rank));
  if (stream) stream_fence();
  return {};
}

// A receiver's side: each piece, once announced, is copied out of the root's staging block
// (mapped here) and acknowledged.
inline Status staged_broadcast_receive(PeerPort* from_root, const BufferDescriptor& source, char* recv, size_t bytes,
                                       bool stream) {
  const size_t piece = source.piece;
  for (size_t at = 0, i = 0; at < bytes; at += piece, ++i) {
    if (i > 0) DCOMM_RETURN_IF_ERROR(await_done(from_root));  // the root's "piece i is there"
    const size_t n = std::min(piece, bytes - at);
    const uint64_t from = source.address + (i % kStagedSlots) * piece;
    DCOMM_RETURN_IF_ERROR(from_root->read_memory(recv + at, from, n, source.input_region, stream));
    DCOMM_RETURN_IF_ERROR(from_root->post(nullptr, 0));
  }
  if (stream) stream_fence();  // the streamed output, before the caller hands it on
  return {};
}
}  // namespace detail

// Every rank copies the root's buffer. In place the root has nothing else to do, so it writes
// the tail into the receivers while they read the head: each receiver reads (n-1)/n and the
// root writes 1/n into each, which balances the root's n-1 writes against one read. That costs
// a hand-off more (the receiver's descriptor to the root) and a call of the root's, so it is
// taken where the 1/n it saves a receiver is `split_share` bytes or more (dispatch passes
// DCOMM_CMA_BYTES: from there a copy takes longer than a single-copy call's fixed cost; 2
// processes here, 16 KiB: in place at 16 KiB 1.45-1.67 us whole against 1.71-1.82 split, at
// 32 KiB 2.20-2.28 against 1.96-2.03). Out of place the root's own copy already takes as long
// as a receiver's read, so it does not help. The root decides and says so in its descriptor.
// Each side then says it is done and waits for the other.
//
// With a `staging` block (the root's, passed where ranks outnumber the cores), a root whose
// buffer is not from mem_alloc copies it through that block instead, a piece at a time, and the
// receivers read each piece with plain loads: one more copy (the root's), but none through the
// kernel, which pins every page it copies. `stream`: the copies into a large output (the
// receivers', and the root's out of place) stream past the cache.
inline Status single_copy_broadcast(const std::vector<PeerPort*>& ports, int rank, int root, const void* send,
                                    void* recv, size_t bytes, size_t split_share, StagingBlock* staging = nullptr,
                                    bool stream = false) {
  const int size = static_cast<int>(ports.size());
  if (rank == root) {
    if (staging && bytes && local_region(send, bytes).fd < 0 && detail::any_other_process(ports, rank)) {
      const size_t piece = detail::staged_piece(bytes);
      // No shared memory for it: the receivers read the root's buffer through the kernel.
      if (char* area = detail::reserve_slots(*staging, piece, rank, "broadcast"))
        return detail::staged_broadcast_root(ports, rank, static_cast<const char*>(send), static_cast<char*>(recv),
                                             bytes, piece, area, staging->region(), stream);
    }
    const size_t share = bytes / static_cast<size_t>(size);
    const size_t split =
        send == recv && share >= split_share ? (share * static_cast<size_t>(size - 1)) & ~size_t{63} : bytes;
    detail::BufferDescriptor mine = detail::descriptor_of(send, bytes, nullptr, 0, split);
    DCOMM_RETURN_IF_ERROR(detail::post_all(ports, rank, &mine, sizeof mine));
    if (recv != send && bytes) std::memcpy(recv, send, bytes);
    for (int p = 0; p < size && split < bytes; ++p) {
      if (p == rank) continue;
      auto target = detail::take_descriptor(ports[static_cast<size_t>(p)], bytes);
      if (!target.ok()) return target.status();
      DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(p)]->write_memory(
          target->address + split, static_cast<const char*>(send) + split, bytes - split, target->input_region));
    }
    return detail::finish(ports, rank);
  }
  PeerPort* from_root = ports[static_cast<size_t>(root)];
  auto source = detail::take_descriptor(from_root, bytes);
  if (!source.ok()) return source.status();
  if (source->split > bytes) return make_error(ErrorCode::kInternal, "broadcast: root sent split ", source->split);
  if (source->piece)
    return detail::staged_broadcast_receive(from_root, *source, static_cast<char*>(recv), bytes, stream);
  if (source->split < bytes) {  // the root writes the tail: tell it where
    detail::BufferDescriptor mine = detail::descriptor_of(recv, bytes);
    DCOMM_RETURN_IF_ERROR(from_root->post(&mine, sizeof mine));
  }
  DCOMM_RETURN_IF_ERROR(from_root->read_memory(recv, source->address, source->split, source->input_region));
  DCOMM_RETURN_IF_ERROR(from_root->post(nullptr, 0));
  return detail::await_done(from_root);
}

namespace detail {
// A staged all_gather, a piece of `piece` bytes of every rank's block at a time: rank r copies
// piece i of its block into slot i % kStagedSlots of its staging block (`stage` in the
// descriptors, which every peer maps) and says so to every peer; once all have, it copies piece
// i of every peer's block out of their blocks with plain loads. Piece 0 was staged before the
// descriptors went, which announce it. As in staged_all_reduce (single_copy_reduce.hpp), a
// rank's "piece i is there" also says it is done copying piece i - 1 out, so the slot of piece
// i - kStagedSlots is free.
// `peers[rank]` is this rank's own descriptor.
inline Status staged_all_gather(const std::vector<PeerPort*>& ports, int rank,
                                const std::vector<BufferDescriptor>& peers, const char* send, char* recv,
                                size_t bytes_per_rank, bool stream) {
  const int size = static_cast<int>(ports.size());
  const size_t piece = peers[static_cast<size_t>(rank)].piece;
  char* const own = recv + static_cast<size_t>(rank) * bytes_per_rank;
  for (size_t i = 0, at = 0; at < bytes_per_rank; ++i, at += piece) {
    const size_t n = std::min(piece, bytes_per_rank - at), in_slot = (i % kStagedSlots) * piece;
    char* slot = reinterpret_cast<char*>(peers[static_cast<size_t>(rank)].stage) + in_slot;
    if (i > 0) {
      std::memcpy(slot, send + at, n);
      DCOMM_RETURN_IF_ERROR(post_all(ports, rank, nullptr, 0));  // piece i of this rank's block is there
      DCOMM_RETURN_IF_ERROR(await_all_done(ports, rank));
    }
    if (own != send) copy_bytes(own + at, slot, n, stream);
    for (int k = 1; k < size; ++k) {  // in ring order from the next rank, so no block is read by all at once
      const int q = (rank + k) % size;
      const BufferDescriptor& d = peers[static_cast<size_t>(q)];
      char* to = recv + static_cast<size_t>(q) * bytes_per_rank + at;
      DCOMM_RETURN_IF_ERROR(
          ports[static_cast<size_t>(q)]->read_memory(to, d.stage + in_slot, n, d.stage_region, stream));
    }
  }
  // Nobody reads this rank's block once this returns (the next call may write it).
  return finish(ports, rank);
}
}  // namespace detail

// ports[p]: the port to rank p (null for this rank). recv holds size x bytes_per_rank. Each
// rank pushes its block into every output through the kernel, a tile at a time. `stream`: the
// copies into this rank's output (out of place; staged, every one) stream past the cache (a
// large output, stream_output()).
//
// With a `staging` block (dispatch passes it where DCOMM_STAGED_COPY says), where no output is
// from mem_alloc (those take plain stores already), every rank copies its block into its own
// staging block instead, a piece at a time, and copies the pieces out of the peers' blocks with
// plain loads (staged_all_gather): a copy more a rank (its own block's), but none through the
// kernel, which pins every page it copies and reads each cold line of an output it writes
// first. Every rank says in its descriptor whether it has a block, so all stage or none.
inline Status single_copy_all_gather(const std::vector<PeerPort*>& ports, int rank, const void* send, void* recv,
                                     size_t bytes_per_rank, bool stream, StagingBlock* staging = nullptr) {
  const size_t at = static_cast<size_t>(rank) * bytes_per_rank;
  char* own = static_cast<char*>(recv) + at;
  const char* in = static_cast<const char*>(send);
  auto mine = detail::descriptor_of(send, bytes_per_rank, recv, bytes_per_rank * ports.size());
  if (staging && bytes_per_rank && mine.output_region.fd < 0 && detail::any_other_process(ports, rank)) {
    const size_t piece = std::min(detail::kTileBytes, bytes_per_rank);
    if (detail::offer_stage(mine, *staging, piece, rank, "all_gather"))
      std::memcpy(reinterpret_cast<char*>(mine.stage), in, piece);  // piece 0, which the descriptor announces
  }
  auto peers = detail::swap_descriptors(ports, rank, mine);
  if (!peers.ok()) return peers.status();
  (*peers)[static_cast<size_t>(rank)] = mine;
  if (detail::all_staged(*peers, mine))
    return detail::staged_all_gather(ports, rank, *peers, in, static_cast<char*>(recv), bytes_per_rank, stream);
  // Out of place, the copy into this rank's output (streamed past the cache when large) brings
  // the input tile into it for the pushes. Where the block is read once (in place, one peer),
  // one write of the whole block spares the system call a tile costs.
  const size_t tile = own == in && ports.size() == 2 ? std::max<size_t>(bytes_per_rank, 1) : detail::kTileBytes;
  for (size_t i = 0; i < bytes_per_rank; i += tile) {
    const size_t n = std::min(tile, bytes_per_rank - i);
    if (own != in) copy_bytes(own + i, in + i, n, stream);
    DCOMM_RETURN_IF_ERROR(detail::push_to_peers(ports, rank, *peers, in + i, at + i, n));
  }
  return detail::finish(ports, rank);
}

DCOMM_NAMESPACE_END
