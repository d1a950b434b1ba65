// gather, scatter and all-to-all, defined once: which of a rank's blocks goes to which peer and
// which block each peer's message fills (`for_each_move`). Everything that runs them reads
// this: the communicator (comm/exchange_calls.hpp) and both adapters turn the moves into one
// batch of sends and receives (`exchange_ops`: algo/p2p.hpp runs it on the host, the device
// communicator's group on a GPU), and the simulator runs them as a schedule
// (`schedule_exchange`).
//
// A side's data are blocks, one per rank it talks to: gather sends one block (block 0) and the
// root receives n, block r from rank r; scatter is the reverse; all-to-all sends block r to rank
// r and receives block r from rank r, the blocks of any sizes (all_to_all_v). A rank's own
// block is a send to itself and a receive from itself (a local copy), left out when both are
// the same memory (in place).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "dcomm/algo/p2p_op.hpp"
#include "dcomm/algo/schedule.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

enum class Exchange { kGather, kScatter, kAllToAll };

inline const char* exchange_name(Exchange what) {
  return what == Exchange::kGather ? "gather" : what == Exchange::kScatter ? "scatter" : "all_to_all";
}

// This rank sends its send block `block` to `peer`, or receives `peer`'s message into its
// receive block `block`.
struct BlockMove {
  bool send;
  int peer;
  int block;
};

// The moves of rank `rank` of `size`, each passed to `f` in turn until it returns false. All-to-
// all goes round the ranks from this one (to rank+k, from rank-k), so that the ranks do not all
// start with rank 0.
template <class F>
void for_each_move(Exchange what, int rank, int size, int root, F&& f) {
  switch (what) {
    case Exchange::kGather:
      if (!f(BlockMove{true, root, 0})) return;
      for (int r = 0; rank == root && r < size; ++r)
        if (!f(BlockMove{false, r, r})) return;
      break;
    case Exchange::kScatter:
      for (int r = 0; rank == root && r < size; ++r)
        if (!f(BlockMove{true, r, r})) return;
      f(BlockMove{false, root, 0});
      break;
    case Exchange::kAllToAll:
      for (int k = 0; k < size; ++k) {
        const int to = (rank + k) % size, from = (rank - k + size) % size;
        if (!f(BlockMove{true, to, to}) || !f(BlockMove{false, from, from})) return;
      }
      break;
  }
}

// One block of a side: where it lies and its element count.
struct Block {
  const void* at;
  size_t count;
};

// Blocks of one buffer: `counts[r]` elements at `displs[r]` (elements; MPI's displacements).
inline std::vector<Block> blocks_of(const void* buf, std::span<const size_t> counts, std::span<const size_t> displs,
                                    DataType type) {
  std::vector<Block> out;
  out.reserve(counts.size());
  for (size_t r = 0; r < counts.size(); ++r)
    out.push_back({static_cast<const char*>(buf) + displs[r] * size_of(type), counts[r]});
  return out;
}
// `n` equal blocks of `count` elements, one after another, as a side of exchange_ops (a list
// not made: a small batch's cost was mostly allocations).
struct EqualBlocks {
  const char* base;
  size_t count, stride, n;
  size_t size() const { return n; }
  Block operator[](size_t r) const { return {base + r * stride, count}; }
};

// The batch of sends and receives of this rank's moves over its blocks (`send` and `recv`
// hold the blocks the moves name: see above; a span of Blocks, or EqualBlocks). An unknown data
// type, a block a move needs that is missing, a root out of range, or a receive from itself of
// another size than its send fails with the operation's name.
template <class Sends, class Recvs>
Result<std::vector<P2POp>> exchange_ops(Exchange what, int rank, int size, int root, const Sends& send,
                                        const Recvs& recv, DataType type) {
  const char* name = exchange_name(what);
  if (!is_valid(type)) return invalid_argument(name, ": unknown data type ", static_cast<int>(type));
  if (what != Exchange::kAllToAll && (root < 0 || root >= size))
    return invalid_argument(name, " on rank ", rank, ": root ", root, " is out of range for ", size, " ranks");
  std::vector<P2POp> ops;
  ops.reserve(what == Exchange::kAllToAll || rank == root ? 2 * static_cast<size_t>(size) : 2);
  Block self_send{};          // this rank's block to itself: its receive follows, and the pair is left
  bool self_pending = false;  // out when both are the same memory
  Status error;
  for_each_move(what, rank, size, root, [&](BlockMove m) {
    const size_t have = m.send ? send.size() : recv.size();
    if (static_cast<size_t>(m.block) >= have) {
      error = invalid_argument(name, " on rank ", rank, ": ", have, " ", m.send ? "send" : "receive",
                               " block(s) given, block ", m.block, " needed");
      return false;
    }
    const Block b = m.send ? Block(send[static_cast<size_t>(m.block)]) : Block(recv[static_cast<size_t>(m.block)]);
    if (m.peer == rank && m.send) {
      self_send = b, self_pending = true;
    } else if (m.peer == rank && self_pending) {
      if (self_send.count != b.count) {
        error = invalid_argument(name, " on rank ", rank, ": its own block has ", self_send.count,
                                 " element(s) to send and ", b.count, " to receive");
        return false;
      }
      if (self_send.at != b.at) {
        ops.push_back(P2POp::send(self_send.at, self_send.count, type, rank));
        ops.push_back(P2POp::recv(const_cast<void*>(b.at), b.count, type, rank));
      }
    } else {
      ops.push_back(m.send ? P2POp::send(b.at, b.count, type, m.peer)
                           : P2POp::recv(const_cast<void*>(b.at), b.count, type, m.peer));
      ops.back().all_to_all = what == Exchange::kAllToAll;
    }
    return true;
  });
  if (!error.ok()) return error;
  return ops;
}

// MPI_Gather, MPI_Scatter and MPI_Alltoall's layout (NCCL's too): blocks of `count` elements,
// rank r's at r*count of the root's side (gather's receive, scatter's send) or of both sides
// (all-to-all); the single block is the whole of the other side. In place as those define it
// (gather: send == recv + root*count on the root; all-to-all: send == recv).
inline Result<std::vector<P2POp>> equal_exchange_ops(Exchange what, int rank, int size, int root, const void* send,
                                                     void* recv, size_t count, DataType type) {
  const bool blocks_sent = what == Exchange::kAllToAll || (what == Exchange::kScatter && rank == root);
  const bool blocks_received = what == Exchange::kAllToAll || (what == Exchange::kGather && rank == root);
  auto side = [&](const void* buf, bool blocks) {  // the side of one block: that block, once
    return EqualBlocks{static_cast<const char*>(buf), count, count * size_of(type),
                       blocks ? static_cast<size_t>(size) : 1};
  };
  return exchange_ops(what, rank, size, root, side(send, blocks_sent), side(recv, blocks_received), type);
}

// The moves as a schedule for the simulator (sim/simulator.hpp, SimCollective's exchanges):
// the working buffer holds the n send blocks of `count` elements, then the n receive blocks.
inline Schedule schedule_exchange(Exchange what, int size, int rank, size_t count, int root) {
  const size_t n = static_cast<size_t>(size);
  auto block = [&](bool send, int b) {
    const size_t at = (send ? 0 : n) + static_cast<size_t>(b);
    return Range{at * count, (at + 1) * count};
  };
  Schedule s;
  for_each_move(what, rank, size, root, [&](BlockMove m) {
    if (m.peer != rank)
      s.push_back(m.send ? detail::send_only(m.peer, block(true, m.block))
                         : detail::recv_only(m.peer, block(false, m.block), false, false));
    else if (!m.send)
      s.push_back(detail::local_copy(block(true, what == Exchange::kGather ? 0 : rank), block(false, m.block)));
    return true;
  });
  return s;
}

DCOMM_NAMESPACE_END
