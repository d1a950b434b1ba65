// Reductions in one fixed order (DCOMM_DETERMINISTIC=1): every element is folded as
// ((x_0 (+) x_1) (+) x_2) ... (+) x_{n-1}, x_r being rank r's contribution, whatever the size,
// the transport, the slots or the timing, so results are the same bits from run to run and
// equal to direct all_reduce's (algo/direct.hpp folds in the same order).
//
// The schedule: the buffer is cut into n blocks by rank (the first count % n one element
// longer). Each rank sends block b of its input to rank b and receives block `rank` of every
// other rank's (one batch of sends and receives: the same bytes as the ring's reduce-scatter),
// then folds its block in rank order. all_reduce then sends its folded block to every other
// rank and receives theirs (the ring all-gather's bytes again); reduce sends it to the root.
// Latency: two exchanges with every peer instead of the ring's 2(n-1) neighbour steps.
//
// Written once over peer-addressed primitives, as direct is (algo/tree_collectives.hpp lists
// them), plus one more:
//   exchange(ops)   one batch of sends and receives with any peers (P2POp, counts in bytes),
//                   progressing together so that no order of them deadlocks
// The host's ports run it (algo/on_ports.hpp: run_p2p), and so does the simulator's recorder.
// `scratch`: ordered_scratch_elems(count, n) elements (the received blocks, and reduce's
// folded block off the root).
#pragma once

#include <cstddef>
#include <vector>

#include "dcomm/algo/p2p_op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

// Block b of `count` elements cut in n: [begin, begin + size).
struct OrderedBlock {
  size_t begin, size;
};
inline OrderedBlock ordered_block(size_t count, int n, int b) {
  const size_t un = static_cast<size_t>(n), ub = static_cast<size_t>(b);
  const size_t q = count / un, rem = count % un;
  return {ub * q + (ub < rem ? ub : rem), q + (ub < rem ? 1 : 0)};
}

inline std::vector<OrderedBlock> ordered_blocks(size_t count, int n) {
  std::vector<OrderedBlock> b(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) b[static_cast<size_t>(p)] = ordered_block(count, n, p);
  return b;
}

// The scratch the three need: n + 1 of the largest block.
inline size_t ordered_scratch_elems(size_t count, int n) {
  return (static_cast<size_t>(n) + 1) * ordered_block(count, n, 0).size;
}

namespace detail {
// Every other rank's block `rank` of the input into scratch (block p's at p x mine), then this
// rank's block folded in rank order into `out`. `blocks`: where each rank's block starts in the
// input (elements) and how long it is.
template <class Ops>
Status ordered_fold(Ops& o, int rank, int size, const char* input, const std::vector<OrderedBlock>& blocks, char* out,
                    char* scratch) {
  const size_t eb = o.elem_bytes();
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  auto received = [&](int p) { return scratch + static_cast<size_t>(p) * mine.size * eb; };
  std::vector<P2POp> ops;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
    ops.push_back(P2POp::send(input + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
    ops.push_back(P2POp::recv(received(p), mine.size * eb, DataType::kUint8, p));
  }
  DCOMM_RETURN_IF_ERROR(o.exchange(ops));
  // In place (out is this rank's own input block), its contribution is kept aside first:
  // the folds before it would overwrite it.
  const char* own = input + mine.begin * eb;
  if (out == own && rank >= 2) {
    DCOMM_RETURN_IF_ERROR(o.local_copy(received(rank), own, mine.size));
    own = received(rank);
  }
  auto contribution = [&](int p) -> const char* { return p == rank ? own : received(p); };
  if (size == 1) DCOMM_RETURN_IF_ERROR(o.local_copy(out, contribution(0), mine.size));
  else DCOMM_RETURN_IF_ERROR(o.local_reduce(out, contribution(0), contribution(1), mine.size));
  for (int p = 2; p < size; ++p) DCOMM_RETURN_IF_ERROR(o.local_reduce(out, out, contribution(p), mine.size));
  return o.finalize(out, mine.size);
}
}  // namespace detail

template <class Ops>
Status ordered_all_reduce(Ops& o, int rank, int size, const char* send, char* recv, size_t count, char* scratch) {
  const size_t eb = o.elem_bytes();
  const auto blocks = ordered_blocks(count, size);
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  DCOMM_RETURN_IF_ERROR(detail::ordered_fold(o, rank, size, send, blocks, recv + mine.begin * eb, scratch));
  std::vector<P2POp> ops;  // then every rank's folded block to every rank
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
    ops.push_back(P2POp::send(recv + mine.begin * eb, mine.size * eb, DataType::kUint8, p));
    ops.push_back(P2POp::recv(recv + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
  }
  return o.exchange(ops);
}

// recv_count elements per rank: block b of the input is [b * recv_count, (b + 1) * recv_count).
template <class Ops>
Status ordered_reduce_scatter(Ops& o, int rank, int size, const char* send, char* recv, size_t recv_count,
                              char* scratch) {
  std::vector<OrderedBlock> blocks(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) blocks[static_cast<size_t>(p)] = {static_cast<size_t>(p) * recv_count, recv_count};
  return detail::ordered_fold(o, rank, size, send, blocks, recv, scratch);
}

// The root gathers the folded blocks; recv is written on the root only.
template <class Ops>
Status ordered_reduce(Ops& o, int rank, int size, int root, const char* send, char* recv, size_t count, char* scratch) {
  const size_t eb = o.elem_bytes();
  const auto blocks = ordered_blocks(count, size);
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  // Off the root the folded block lands after the received ones.
  char* out = rank == root ? recv + mine.begin * eb : scratch + static_cast<size_t>(size) * mine.size * eb;
  DCOMM_RETURN_IF_ERROR(detail::ordered_fold(o, rank, size, send, blocks, out, scratch));
  std::vector<P2POp> ops;
  if (rank != root) {
    ops.push_back(P2POp::send(out, mine.size * eb, DataType::kUint8, root));
  } else {
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
      ops.push_back(P2POp::recv(recv + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
    }
  }
  return o.exchange(ops);
}

DCOMM_NAMESPACE_END
