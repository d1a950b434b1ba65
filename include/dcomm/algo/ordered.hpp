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
// Latency: two exchanges with every peer instead of the ring's 2(n-1) neighbour steps;
// memory: the received blocks, (n-1)/n of the buffer, in `scratch`.
#pragma once

#include <cstring>
#include <vector>

#include "dcomm/algo/p2p.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

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

// What a call reduces in fixed order: `blocks` are where each rank's block starts in the
// input (element offsets) and how long it is; this rank's folded block goes to `out`.
inline Status ordered_fold(const std::vector<PeerPort*>& ports, int rank, const Reducer& r, const char* input,
                           const std::vector<OrderedBlock>& blocks, char* out, std::vector<char>& scratch,
                           const Config& config) {
  const int n = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes;
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  scratch.resize(std::max<size_t>(1, mine.size * eb * static_cast<size_t>(n)));
  std::vector<P2POp> ops;
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
    ops.push_back(P2POp::send(input + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
    ops.push_back(
        P2POp::recv(scratch.data() + static_cast<size_t>(p) * mine.size * eb, mine.size * eb, DataType::kUint8, p));
  }
  DCOMM_RETURN_IF_ERROR(run_p2p(ops, rank, ports, config));
  // In place (out is this rank's own input block), its contribution is kept aside first:
  // the folds before it would overwrite it.
  const char* own = input + mine.begin * eb;
  if (out == own && rank >= 2) {
    std::memcpy(scratch.data() + static_cast<size_t>(rank) * mine.size * eb, own, mine.size * eb);
    own = scratch.data() + static_cast<size_t>(rank) * mine.size * eb;
  }
  auto contribution = [&](int p) { return p == rank ? own : scratch.data() + static_cast<size_t>(p) * mine.size * eb; };
  if (n == 1) detail::copy_if_distinct(out, contribution(0), mine.size * eb);
  else r.reduce(out, contribution(0), contribution(1), mine.size);
  for (int p = 2; p < n; ++p) r.reduce(out, out, contribution(p), mine.size);
  r.finalize(out, mine.size);
  return {};
}

inline std::vector<OrderedBlock> ordered_blocks(size_t count, int n) {
  std::vector<OrderedBlock> b(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) b[static_cast<size_t>(p)] = ordered_block(count, n, p);
  return b;
}

inline Status ordered_all_reduce(const std::vector<PeerPort*>& ports, int rank, const Reducer& r, const void* send,
                                 void* recv, size_t count, std::vector<char>& scratch, const Config& config) {
  const int n = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes;
  const auto blocks = ordered_blocks(count, n);
  char* out = static_cast<char*>(recv);
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  DCOMM_RETURN_IF_ERROR(
      ordered_fold(ports, rank, r, static_cast<const char*>(send), blocks, out + mine.begin * eb, scratch, config));
  std::vector<P2POp> ops;  // then every rank's folded block to every rank
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
    ops.push_back(P2POp::send(out + mine.begin * eb, mine.size * eb, DataType::kUint8, p));
    ops.push_back(P2POp::recv(out + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
  }
  return run_p2p(ops, rank, ports, config);
}

// recv_count elements per rank: block b of the input is [b * recv_count, (b + 1) * recv_count).
inline Status ordered_reduce_scatter(const std::vector<PeerPort*>& ports, int rank, const Reducer& r, const void* send,
                                     void* recv, size_t recv_count, std::vector<char>& scratch, const Config& config) {
  const int n = static_cast<int>(ports.size());
  std::vector<OrderedBlock> blocks(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) blocks[static_cast<size_t>(p)] = {static_cast<size_t>(p) * recv_count, recv_count};
  return ordered_fold(ports, rank, r, static_cast<const char*>(send), blocks, static_cast<char*>(recv), scratch,
                      config);
}

// The root gathers the folded blocks; recv is written on the root only.
inline Status ordered_reduce(const std::vector<PeerPort*>& ports, int rank, int root, const Reducer& r,
                             const void* send, void* recv, size_t count, std::vector<char>& scratch,
                             const Config& config) {
  const int n = static_cast<int>(ports.size());
  const size_t eb = r.elem_bytes;
  const auto blocks = ordered_blocks(count, n);
  const OrderedBlock mine = blocks[static_cast<size_t>(rank)];
  std::vector<char> folded(std::max<size_t>(1, mine.size * eb));
  char* out = rank == root ? static_cast<char*>(recv) + mine.begin * eb : folded.data();
  DCOMM_RETURN_IF_ERROR(ordered_fold(ports, rank, r, static_cast<const char*>(send), blocks, out, scratch, config));
  std::vector<P2POp> ops;
  if (rank != root) {
    ops.push_back(P2POp::send(out, mine.size * eb, DataType::kUint8, root));
  } else {
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      const OrderedBlock theirs = blocks[static_cast<size_t>(p)];
      ops.push_back(P2POp::recv(static_cast<char*>(recv) + theirs.begin * eb, theirs.size * eb, DataType::kUint8, p));
    }
  }
  return run_p2p(ops, rank, ports, config);
}

DCOMM_NAMESPACE_END
