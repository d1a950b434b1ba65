// Single-copy reductions between ranks of one host, over the descriptors and hand-offs of
// algo/single_copy.hpp: reduce_scatter and all_reduce: rank r owns chunk r. It reads chunk r of
// every peer's input a tile at a time into a buffer that stays in cache and folds it into its
// output (every chunk is computed once, by its owner, so every rank ends with the same bits).
// For all_reduce it then writes each finished tile into every peer's output; for reduce, into
// the root's only. In place, a peer's chunk r is read (by rank r only) before rank r overwrites
// it, a tile at a time.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "dcomm/algo/single_copy.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

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
// out[first, first+count) = this rank's input there, combined with every peer's (rank p's
// input at peers[p].address; this rank's own at `mine`), a tile at a time (peer tiles are read
// into a buffer unless mapped), then written into the outputs `push` names (kPushNone,
// kPushAll, or a rank) from this rank's copy, in cache. The tile is folded where it ends: in
// `out` (in place, where the input already is). Two cases fold in a buffer that stays in cache
// instead: `stream` (a large output, stream_output(): out is then written with streaming
// stores, as nothing reads it back from there, sparing the read of its lines), and a null
// `out` (this rank keeps no copy).
inline Status fold_chunk(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                         const std::vector<BufferDescriptor>& peers, const char* mine, char* out, size_t first,
                         size_t count, int push, bool stream) {
  const size_t eb = r.elem_bytes;
  const size_t tile_bytes = std::min(kTileBytes, std::max<size_t>(count * eb, 1));
  const bool in_buffer = !out || (stream && out != mine);
  auto buffers = std::make_unique_for_overwrite<char[]>((in_buffer ? 2 : 1) * tile_bytes);
  char* tile = buffers.get();
  char* acc = tile + tile_bytes;
  const size_t per_tile = tile_bytes / eb;
  for (size_t i = 0; i < count; i += per_tile) {
    const size_t n = std::min(per_tile, count - i);
    const size_t at = (first + i) * eb;
    char* sum = in_buffer ? acc : out + at;
    const char* partial = mine + at;
    for (int p = 0; p < static_cast<int>(ports.size()); ++p) {
      if (p == rank) continue;
      PeerPort* port = ports[static_cast<size_t>(p)];
      const BufferDescriptor& d = peers[static_cast<size_t>(p)];
      const char* theirs = port->memory().view(d.input_region, d.address + at, n * eb);  // read in place if mapped
      if (!theirs) {
        DCOMM_RETURN_IF_ERROR(port->read_memory(tile, d.address + at, n * eb));
        theirs = tile;
      }
      r.reduce(sum, partial, theirs, n);
      partial = sum;
    }
    if (partial != sum) std::memcpy(sum, partial, n * eb);  // one rank: nothing to fold
    r.finalize(sum, n);
    if (out && sum != out + at) copy_bytes(out + at, sum, n * eb, /*stream=*/true);
    if (push != kPushNone) DCOMM_RETURN_IF_ERROR(push_to_peers(ports, rank, peers, sum, at, n * eb, push));
  }
  return {};  // finish() fences the streamed stores
}
}  // namespace detail

namespace detail {
// Whether every rank's buffer (`field` of the descriptors: input or output region) is in a
// dcomm::mem_alloc block. Every rank sees the same descriptors, so all answer alike.
inline bool all_registered(const std::vector<BufferDescriptor>& peers, const BufferDescriptor& mine, int rank,
                           RegionRef BufferDescriptor::*field) {
  bool all = (mine.*field).fd >= 0;
  for (size_t p = 0; p < peers.size(); ++p) all &= static_cast<int>(p) == rank || (peers[p].*field).fd >= 0;
  return all;
}
}  // namespace detail

// send holds size x recv_count elements; rank r's reduced block r lands in recv. With
// `only_if_registered`, it runs only when every rank's input is from dcomm::mem_alloc (read
// through a mapping), else returns false having moved no data (see single_copy_all_reduce).
// `stream`: recv is written with streaming stores (a large output, stream_output()).
inline Result<bool> single_copy_reduce_scatter(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                                               const void* send, void* recv, size_t recv_count,
                                               bool only_if_registered = false, bool stream = false) {
  const size_t eb = r.elem_bytes, total = recv_count * ports.size() * eb;
  const auto mine = detail::descriptor_of(send, total);
  auto peers = detail::swap_descriptors(ports, rank, mine);
  if (!peers.ok()) return peers.status();
  if (only_if_registered && !detail::all_registered(*peers, mine, rank, &detail::BufferDescriptor::input_region))
    return false;
  // Fold block `rank` into recv: addresses are shifted so block `rank` sits at offset 0.
  const size_t shift = static_cast<size_t>(rank) * recv_count * eb;
  for (auto& d : *peers) d.address += shift;
  DCOMM_RETURN_IF_ERROR(detail::fold_chunk(ports, rank, r, *peers, static_cast<const char*>(send) + shift,
                                           static_cast<char*>(recv), 0, recv_count, detail::kPushNone, stream));
  DCOMM_RETURN_IF_ERROR(detail::finish(ports, rank));
  return true;
}

namespace detail {
// A staged all_reduce, a piece of size x kTileBytes at a time (a tile a rank). For piece i, rank
// r folds chunk r of the piece from every rank's input (as fold_chunk reads them: through the
// kernel, or mapped) into slot i % kStagedSlots of its staging block (`stage` in the
// descriptors, which every peer maps) and says so to every peer; once all have, each rank copies
// the piece out of the blocks, chunk q from rank q's, with plain loads. So the finished chunks
// are read where they lie instead of written into each peer's output through the kernel (which
// pins every page and reads each line of a cold output first). A rank's "piece i is folded"
// also says it is done copying piece i - 1 out, so the slot of piece i - kStagedSlots is free.
// In place, a rank copies piece i out only once every rank has folded it from its input.
// `peers[rank]` is this rank's own descriptor.
inline Status staged_all_reduce(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                                const std::vector<BufferDescriptor>& peers, const char* send, char* recv, size_t count,
                                bool stream) {
  const int size = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes, slot_bytes = peers[static_cast<size_t>(rank)].piece;
  const size_t per_piece = slot_bytes / eb * static_cast<size_t>(size);
  std::vector<BufferDescriptor> inputs(peers);  // shifted to this rank's chunk of the piece
  for (size_t i = 0, at = 0; at < count; ++i, at += per_piece) {
    const ChunkedBuffer chunks{std::min(per_piece, count - at), size};
    const size_t in_slot = (i % kStagedSlots) * slot_bytes;
    const size_t shift = (at + chunks.off(rank)) * eb;
    for (size_t p = 0; p < peers.size(); ++p) inputs[p].address = peers[p].address + shift;
    char* slot = reinterpret_cast<char*>(peers[static_cast<size_t>(rank)].stage) + in_slot;
    DCOMM_RETURN_IF_ERROR(fold_chunk(ports, rank, r, inputs, send + shift, slot, 0,
                                     chunks.off(rank + 1) - chunks.off(rank), kPushNone, false));
    DCOMM_RETURN_IF_ERROR(post_all(ports, rank, nullptr, 0));  // chunk `rank` of piece i is folded
    DCOMM_RETURN_IF_ERROR(await_all_done(ports, rank));
    for (int k = 0; k < size; ++k) {  // from this rank's own chunk, in ring order
      const int q = (rank + k) % size;
      const BufferDescriptor& d = peers[static_cast<size_t>(q)];
      const size_t len = (chunks.off(q + 1) - chunks.off(q)) * eb;
      char* to = recv + (at + chunks.off(q)) * eb;
      if (q == rank) {
        copy_bytes(to, slot, len, stream);
        continue;
      }
      DCOMM_RETURN_IF_ERROR(
          ports[static_cast<size_t>(q)]->read_memory(to, d.stage + in_slot, len, d.stage_region, stream));
    }
  }
  // Nobody reads this rank's block or input once this returns (the next call may write them).
  return finish(ports, rank);
}
}  // namespace detail

// Reduce-scatter and all-gather in one pass: each rank folds its chunk from every input and
// pushes each finished tile into every output; with a `root` (>= 0: reduce), into the root's
// only, and only the root's recv is written. With `only_if_registered`, it runs only when every
// output written is in a dcomm::mem_alloc block (pushed with streaming stores, no read of the
// lines first); otherwise it returns false having moved no data, and every rank knows it alike
// from the descriptors, so all fall back to another algorithm together. `stream`: recv is
// written with streaming stores (a large output, stream_output()).
//
// With a `staging` block (all_reduce only; dispatch passes it where ranks outnumber the cores),
// where not every output is from mem_alloc, the finished chunks go through the ranks' blocks
// instead (staged_all_reduce), if every rank could reserve one: each says so in its
// descriptor (`piece`), so all decide alike.
inline Result<bool> single_copy_all_reduce(const std::vector<PeerPort*>& ports, int rank, const Reducer& r,
                                           const void* send, void* recv, size_t count, bool only_if_registered = false,
                                           int root = detail::kPushAll, bool stream = false,
                                           StagingBlock* staging = nullptr) {
  const int size = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes;
  const ChunkedBuffer chunks{count, size};
  const bool keeps = root == detail::kPushAll || rank == root;  // this rank's recv is written
  auto mine = detail::descriptor_of(send, count * eb, keeps ? recv : nullptr, keeps ? count * eb : 0);
  if (staging && root == detail::kPushAll && count && detail::any_other_process(ports, rank)) {
    const size_t slot = std::min(detail::kTileBytes, chunks.off(1) * eb);  // a rank's chunk of a piece
    detail::offer_stage(mine, *staging, slot, rank, "all_reduce");
  }
  auto peers = detail::swap_descriptors(ports, rank, mine);
  if (!peers.ok()) return peers.status();
  const bool registered = root == detail::kPushAll
                              ? detail::all_registered(*peers, mine, rank, &detail::BufferDescriptor::output_region)
                              : (rank == root ? mine : (*peers)[static_cast<size_t>(root)]).output_region.fd >= 0;
  (*peers)[static_cast<size_t>(rank)] = mine;
  if (!registered && detail::all_staged(*peers, mine)) {
    DCOMM_RETURN_IF_ERROR(detail::staged_all_reduce(ports, rank, r, *peers, static_cast<const char*>(send),
                                                    static_cast<char*>(recv), count, stream));
    return true;
  }
  if (only_if_registered && !registered) return false;
  const size_t first = chunks.off(rank), n = chunks.off(rank + 1) - first;
  DCOMM_RETURN_IF_ERROR(detail::fold_chunk(ports, rank, r, *peers, static_cast<const char*>(send),
                                           keeps ? static_cast<char*>(recv) : nullptr, first, n,
                                           rank == root ? detail::kPushNone : root, stream));
  DCOMM_RETURN_IF_ERROR(detail::finish(ports, rank));
  return true;
}

DCOMM_NAMESPACE_END
