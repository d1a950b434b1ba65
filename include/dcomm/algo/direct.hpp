// Direct all_reduce for small messages: every rank sends its whole buffer to every other rank,
// then folds the n buffers in rank order 0, 1, ..., n-1, so every rank computes the same
// expression and gets the same bits. One exchange instead of the ring's 2(n-1) dependent
// steps: at 8 bytes on two ranks that halves the latency. It moves (n-1) x the data per rank,
// so it is only chosen for messages of a few KiB (Config::direct_bytes).
//
// Written once over peer-addressed primitives (algo/tree_collectives.hpp lists them, plus
// local_reduce): the host's ports run it (algo/on_ports.hpp), and so does the simulator's
// recorder (sim/recorder.hpp).
#pragma once

#include <cstddef>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

inline constexpr size_t kDirectMaxBytes = 16384;

namespace detail {
// Receives count elements from every peer and folds them with this rank's `mine` in rank
// order into acc, then finalizes (avg) and copies the result to recv.
template <class Ops>
Status fold_in_rank_order(Ops& o, int rank, int size, const char* mine, char* recv, size_t count, char* acc) {
  for (int p = 0; p < size; ++p) {
    if (p == rank)
      DCOMM_RETURN_IF_ERROR(p == 0 ? o.local_copy(acc, mine, count) : o.local_reduce(acc, acc, mine, count));
    else DCOMM_RETURN_IF_ERROR(p == 0 ? o.recv(p, acc, count) : o.recv_reduce(p, acc, acc, count));
  }
  DCOMM_RETURN_IF_ERROR(o.finalize(acc, count));
  return o.local_copy(recv, acc, count);
}
}  // namespace detail

// count elements, at most one slot; acc: count elements of scratch (in place, recv is the
// input that the peers are sent, so the fold cannot land there).
template <class Ops>
Status direct_all_reduce(Ops& o, int rank, int size, const char* send, char* recv, size_t count, char* acc) {
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(o.send(p, send, count));
  return detail::fold_in_rank_order(o, rank, size, send, recv, count, acc);
}

// count elements per rank (the input holds n blocks of count), at most one slot; acc: count
// elements of scratch (in place, recv is block `rank` of the input, read after the sends).
template <class Ops>
Status direct_reduce_scatter(Ops& o, int rank, int size, const char* send, char* recv, size_t count, char* acc) {
  const size_t block = count * o.elem_bytes();
  auto block_of = [&](int p) { return send + static_cast<size_t>(p) * block; };
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(o.send(p, block_of(p), count));
  return detail::fold_in_rank_order(o, rank, size, block_of(rank), recv, count, acc);
}

// count elements per rank, at most one slot; recv: n blocks of count (in place, send is block
// `rank` of it).
template <class Ops>
Status direct_all_gather(Ops& o, int rank, int size, const char* send, char* recv, size_t count) {
  const size_t block = count * o.elem_bytes();
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(o.send(p, send, count));
  DCOMM_RETURN_IF_ERROR(o.local_copy(recv + static_cast<size_t>(rank) * block, send, count));
  for (int p = 0; p < size; ++p)
    if (p != rank) DCOMM_RETURN_IF_ERROR(o.recv(p, recv + static_cast<size_t>(p) * block, count));
  return {};
}

DCOMM_NAMESPACE_END
