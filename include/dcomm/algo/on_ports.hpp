// The algorithms over all peers, on the host's ports. Recursive doubling and Rabenseifner
// all_reduce, recursive halving reduce_scatter and recursive doubling all_gather are schedules
// as data (algo/schedule.hpp, which also explains how any world size folds to a power of two),
// run over the ports: each exchange is a p2p batch, so two partners sending to each other never
// deadlock. The pipelined binary trees (algo/tree_collectives.hpp), direct (algo/direct.hpp),
// hierarchical (algo/hierarchical.hpp) and ordered (algo/ordered.hpp) are written over
// peer-addressed primitives, which PortOps runs over the ports.
//
// Steps and bytes per rank (S the buffer, log = log2 p; see docs/algorithms.md):
//   recursive doubling all_reduce: log steps, each the whole buffer (S log)
//   Rabenseifner all_reduce: 2 log steps, S/2 + S/4 + ... each way (2S(p-1)/p)
//   halving reduce_scatter / doubling all_gather: log steps, S(p-1)/p
//   binary tree broadcast / reduce: depth log(n) slices of pipeline fill, then S per link
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "dcomm/algo/direct.hpp"
#include "dcomm/algo/hierarchical.hpp"
#include "dcomm/algo/ordered.hpp"
#include "dcomm/algo/p2p.hpp"
#include "dcomm/algo/schedule.hpp"
#include "dcomm/algo/tree.hpp"
#include "dcomm/algo/tree_collectives.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/prims/peer_prims.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

// Runs a schedule over the ports: `buf` is the working buffer (elements of `eb` bytes). Each
// transfer is one p2p batch (its send and receive progress together). A reducing receive
// folds each slot into the buffer as it arrives, unless the same step still sends from that
// range (recursive doubling sends and folds the whole buffer): then it lands in `tmp` and is
// folded after. A swap that copies (send to and receive from one peer, no fold: the
// all-gather half of Rabenseifner, between hosts too in the hierarchical all_reduce) lands
// straight in the buffer where the wire can (P2POp::by_rendezvous). The slot size must be a multiple
// of `eb`.
inline Status run_schedule(const std::vector<PeerPort*>& ports, int rank, const Config& config, const Schedule& s,
                           const Reducer* r, size_t eb, char* buf, char* tmp = nullptr) {
  for (const Step& st : s) {
    if (st.kind == Step::Kind::kFinalize) {
      if (r) r->finalize(buf + st.recv.begin * eb, st.recv.size());
      continue;
    }
    if (st.kind == Step::Kind::kCopy) {
      if (st.recv.size() && st.send.begin != st.recv.begin)
        std::memmove(buf + st.recv.begin * eb, buf + st.send.begin * eb, st.recv.size() * eb);
      continue;
    }
    const bool overlap = st.send_peer >= 0 && st.send.begin < st.recv.end && st.recv.begin < st.send.end;
    const bool staged = st.reduce && overlap;
    if (staged && !tmp)
      return make_error(ErrorCode::kInternal, "schedule folds into a range it sends, without a buffer");
    char* dst = buf + st.recv.begin * eb;
    P2POp ops[2];
    size_t n = 0;
    if (st.send_peer >= 0)
      ops[n++] = P2POp::send(buf + st.send.begin * eb, st.send.size() * eb, DataType::kUint8, st.send_peer);
    if (st.recv_peer >= 0) {
      ops[n] = P2POp::recv(staged ? tmp : dst, st.recv.size() * eb, DataType::kUint8, st.recv_peer);
      if (st.reduce && !staged) ops[n].fold = r, ops[n].peer_first = st.peer_first;
      ++n;
    }
    if (n == 2 && st.send_peer == st.recv_peer && !st.reduce) ops[0].by_rendezvous = ops[1].by_rendezvous = true;
    DCOMM_RETURN_IF_ERROR(run_p2p(std::span<const P2POp>(ops, n), rank, ports, config));
    if (staged) {
      if (st.peer_first) r->reduce(dst, tmp, dst, st.recv.size());
      else r->reduce(dst, dst, tmp, st.recv.size());
    }
  }
  return {};
}

// The ports of a communicator, for schedules that talk to arbitrary peers.
struct PeerSet {
  const std::vector<PeerPort*>& ports;  // ports[p]: to rank p (null for this rank)
  int rank;
  const Config& config;
  int size() const { return static_cast<int>(ports.size()); }
};

// The host's executor of the algorithms over peers: the primitives over the ports
// (prims/peer_prims.hpp), and schedules run over them (run_schedule).
class PortOps : public PeerPrims {
 public:
  PortOps(const PeerSet& ps, const Reducer* r, size_t elem_bytes)
      : PeerPrims(ps.ports, r, elem_bytes, ps.config), ps_(ps) {}
  Status run(const Schedule& s, char* buf, char* tmp) {
    return run_schedule(ps_.ports, ps_.rank, ps_.config, s, reducer(), elem_bytes(), buf, tmp);
  }
  // One batch of sends and receives with any peers (algo/p2p.hpp).
  Status exchange(std::span<const P2POp> ops) { return run_p2p(ops, ps_.rank, ps_.ports, ps_.config); }

 private:
  const PeerSet& ps_;
};

namespace detail {
inline char* scratch_of(std::vector<char>& scratch, size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}
// An all_reduce schedule run in `recv` (which starts as a copy of the input); `tmp` (count
// elements) for the steps that fold into the range they send.
inline Status run_all_reduce(const PeerSet& ps, const Schedule& s, const Reducer& r, const void* send, void* recv,
                             size_t count, char* tmp = nullptr) {
  copy_if_distinct(recv, send, count * r.elem_bytes);
  if (count == 0) return {};
  return run_schedule(ps.ports, ps.rank, ps.config, s, &r, r.elem_bytes, static_cast<char*>(recv), tmp);
}
}  // namespace detail

// Recursive doubling: log p exchanges of the whole buffer (algo/schedule.hpp).
inline Status recursive_doubling_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv,
                                            size_t count, std::vector<char>& scratch) {
  return detail::run_all_reduce(ps, schedule_recursive_doubling(ps.size(), ps.rank, count), r, send, recv, count,
                                detail::scratch_of(scratch, count * r.elem_bytes));
}

// Rabenseifner: recursive halving reduce-scatter, then recursive doubling all-gather.
inline Status rabenseifner_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count) {
  return detail::run_all_reduce(ps, schedule_rabenseifner(ps.size(), ps.rank, count), r, send, recv, count);
}

// reduce_scatter by recursive halving, on a working copy of the input (send: n blocks of
// recv_count) laid out by position: block p of the copy is the block of rank order[p] (the
// ranks' positions in ps; empty order = the identity). This position's block is copied out
// at the end.
inline Status halving_reduce_scatter(const PeerSet& ps, const std::vector<int>& order, const Reducer& r,
                                     const void* send, void* recv, size_t recv_count, std::vector<char>& scratch) {
  if (recv_count == 0) return {};
  const size_t block = recv_count * r.elem_bytes, total = block * static_cast<size_t>(ps.size());
  char* work = detail::scratch_of(scratch, total);  // a working copy of the input
  for (size_t p = 0; p < static_cast<size_t>(ps.size()); ++p)
    std::memcpy(work + p * block,
                static_cast<const char*>(send) + (order.empty() ? p : static_cast<size_t>(order[p])) * block, block);
  DCOMM_RETURN_IF_ERROR(run_schedule(ps.ports, ps.rank, ps.config,
                                     schedule_halving_reduce_scatter(ps.size(), ps.rank, recv_count), &r, r.elem_bytes,
                                     work));
  std::memmove(recv, work + static_cast<size_t>(ps.rank) * block, block);
  return {};
}

// all_gather by recursive doubling, in the output (recv: n blocks of bytes_per_rank).
inline Status doubling_all_gather(const PeerSet& ps, const void* send, void* recv, size_t bytes_per_rank) {
  char* out = static_cast<char*>(recv);
  detail::copy_if_distinct(out + static_cast<size_t>(ps.rank) * bytes_per_rank, send, bytes_per_rank);
  if (bytes_per_rank == 0) return {};
  return run_schedule(ps.ports, ps.rank, ps.config, schedule_doubling_all_gather(ps.size(), ps.rank, bytes_per_rank),
                      nullptr, 1, out);
}

// The algorithms over peer-addressed primitives, over the ports: slices of one slot.
inline Status tree_broadcast(const PeerSet& ps, int root, const void* send, void* recv, size_t bytes) {
  PortOps o(ps, nullptr, 1);
  return tree_broadcast(o, ps.rank, ps.size(), root, static_cast<const char*>(send), static_cast<char*>(recv), bytes);
}

inline Status tree_reduce(const PeerSet& ps, const Reducer& r, int root, const void* send, void* recv, size_t count,
                          std::vector<char>& scratch) {
  PortOps o(ps, &r, r.elem_bytes);
  return tree_reduce(o, ps.rank, ps.size(), root, static_cast<const char*>(send), static_cast<char*>(recv), count,
                     detail::scratch_of(scratch, o.slice_elems() * r.elem_bytes));
}

inline Status tree_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count,
                              std::vector<char>& scratch) {
  PortOps o(ps, &r, r.elem_bytes);
  return tree_all_reduce(o, ps.rank, ps.size(), static_cast<const char*>(send), static_cast<char*>(recv), count,
                         detail::scratch_of(scratch, o.slice_elems() * r.elem_bytes));
}

inline Status double_tree_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count,
                                     std::vector<char>& scratch) {
  PortOps o(ps, &r, r.elem_bytes);
  return double_tree_all_reduce(o, ps.rank, ps.size(), static_cast<const char*>(send), static_cast<char*>(recv), count,
                                detail::scratch_of(scratch, 2 * o.slice_elems() * r.elem_bytes));
}

// count * elem_bytes <= kDirectMaxBytes and <= a slot; the fold lands on the stack.
inline Status direct_all_reduce(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count) {
  PortOps o(ps, &r, r.elem_bytes);
  alignas(64) char acc[kDirectMaxBytes];
  return direct_all_reduce(o, ps.rank, ps.size(), static_cast<const char*>(send), static_cast<char*>(recv), count, acc);
}

// The same, for reduce_scatter (count: per rank) and all_gather (bytes per rank); ps by rank.
inline Status direct_reduce_scatter(const PeerSet& ps, const Reducer& r, const void* send, void* recv, size_t count) {
  PortOps o(ps, &r, r.elem_bytes);
  alignas(64) char acc[kDirectMaxBytes];
  return direct_reduce_scatter(o, ps.rank, ps.size(), static_cast<const char*>(send), static_cast<char*>(recv), count,
                               acc);
}
inline Status direct_all_gather(const PeerSet& ps, const void* send, void* recv, size_t bytes_per_rank) {
  PortOps o(ps, nullptr, 1);
  return direct_all_gather(o, ps.rank, ps.size(), static_cast<const char*>(send), static_cast<char*>(recv),
                           bytes_per_rank);
}

// In one fixed order (algo/ordered.hpp); count as the call's (reduce_scatter: per rank).
inline Status ordered(OpKind kind, const PeerSet& ps, const Reducer& r, int root, const void* send, void* recv,
                      size_t count, std::vector<char>& scratch) {
  PortOps o(ps, &r, r.elem_bytes);
  const int n = ps.size();
  const bool scatter = kind == OpKind::kReduceScatter;
  const size_t total = scatter ? count * static_cast<size_t>(n) : count;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  char* tmp = detail::scratch_of(scratch, std::max<size_t>(1, ordered_scratch_elems(total, n) * r.elem_bytes));
  if (scatter) return ordered_reduce_scatter(o, ps.rank, n, in, out, count, tmp);
  if (kind == OpKind::kReduce) return ordered_reduce(o, ps.rank, n, root, in, out, count, tmp);
  return ordered_all_reduce(o, ps.rank, n, in, out, count, tmp);
}

// host_of[r]: the host index of rank r of ps.
inline Status hierarchical_all_reduce(const PeerSet& ps, const std::vector<int>& host_of, const Reducer& r,
                                      const void* send, void* recv, size_t count, std::vector<char>& scratch) {
  PortOps o(ps, &r, r.elem_bytes);
  return hierarchical_all_reduce(o, ps.rank, host_of, static_cast<const char*>(send), static_cast<char*>(recv), count,
                                 detail::scratch_of(scratch, o.slice_elems() * r.elem_bytes));
}

DCOMM_NAMESPACE_END
