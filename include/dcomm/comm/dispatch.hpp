// The one dispatch from a collective to the algorithm that runs it on the host: the choice
// (comm/algorithm_choice.hpp, or a forced algorithm) picks an Algorithm, and this runs it over
// the links. Rings, chains and trees run over positions in the ring order (comm/facts.hpp);
// a block of reduce_scatter / all_gather belongs to the rank at its position.
#pragma once

#include <vector>

#include "dcomm/algo/chain.hpp"
#include "dcomm/algo/direct.hpp"
#include "dcomm/algo/hierarchical.hpp"
#include "dcomm/algo/ordered.hpp"
#include "dcomm/algo/recursive.hpp"
#include "dcomm/algo/ring.hpp"
#include "dcomm/algo/single_copy.hpp"
#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/facts.hpp"
#include "dcomm/comm/link_table.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/primitives.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

// What a collective runs on: this rank, what the ranks agreed, its links and working memory.
struct DispatchContext {
  int rank;
  const SetupFacts& facts;
  const Config& config;
  LinkTable& links;
  std::vector<char>& scratch;  // the schedules' working memory, reused call to call

  int size() const { return facts.size(); }
};

// Runs collective d (not point-to-point or barrier) with `algorithm` on every rank alike.
inline Status run_algorithm(const DispatchContext& c, const OpDesc& d, const Reducer& reducer, const CallShape& shape,
                            Algorithm algorithm) {
  const SetupFacts& f = c.facts;
  const int rank = c.rank, size = c.size();
  const size_t eb = reducer.elem_bytes;
  LinkTable& links = c.links;
  auto& scratch = c.scratch;
  switch (algorithm) {
    case Algorithm::kRing: break;
    case Algorithm::kDirect:
      DCOMM_RETURN_IF_ERROR(links.connect_all(f.order));
      return direct_all_reduce(links.all(), rank, reducer, d.send, d.recv, d.count);
    case Algorithm::kOrdered:
      DCOMM_RETURN_IF_ERROR(links.connect_all(f.order));
      if (d.kind == OpKind::kReduceScatter)
        return ordered_reduce_scatter(links.all(), rank, reducer, d.send, d.recv, d.count, scratch, c.config);
      if (d.kind == OpKind::kReduce)
        return ordered_reduce(links.all(), rank, d.root, reducer, d.send, d.recv, d.count, scratch, c.config);
      return ordered_all_reduce(links.all(), rank, reducer, d.send, d.recv, d.count, scratch, c.config);
    case Algorithm::kSingleCopy:
    case Algorithm::kSingleCopyIfRegistered: {
      DCOMM_RETURN_IF_ERROR(links.connect_all(f.order));
      if (d.kind == OpKind::kAllGather) return single_copy_all_gather(links.all(), rank, d.send, d.recv, d.count * eb);
      if (d.kind == OpKind::kBroadcast) return single_copy_broadcast(links.all(), rank, d.root, d.send, d.recv, d.count * eb);
      const bool only_if_registered = algorithm == Algorithm::kSingleCopyIfRegistered;
      auto ran = d.kind == OpKind::kReduceScatter
                     ? single_copy_reduce_scatter(links.all(), rank, reducer, d.send, d.recv, d.count, only_if_registered)
                     : single_copy_all_reduce(links.all(), rank, reducer, d.send, d.recv, d.count, only_if_registered);
      if (!ran.ok() || *ran) return ran.status();
      DCOMM_LOG(kTrace, kSubsysColl, rank, "not every buffer is from mem_alloc: ring instead");
      break;
    }
    default: {  // the schedules and trees over all peers (algo/recursive.hpp), in the ring order
      DCOMM_RETURN_IF_ERROR(links.connect_all(f.order));
      const PeerSet ps{links.all_by_position(), f.pos, c.config};
      const int root = f.pos_of[static_cast<size_t>(d.root)];
      switch (d.kind) {
        case OpKind::kAllReduce:
          if (algorithm == Algorithm::kHierarchical)
            return hierarchical_all_reduce(ps, f.host_at, reducer, d.send, d.recv, d.count, scratch);
          if (algorithm == Algorithm::kRecursiveDoubling)
            return recursive_doubling_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
          if (algorithm == Algorithm::kDoubleTree) return double_tree_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
          if (algorithm == Algorithm::kRabenseifner) return rabenseifner_all_reduce(ps, reducer, d.send, d.recv, d.count);
          return tree_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
        case OpKind::kReduceScatter: return halving_reduce_scatter(ps, f.order, reducer, d.send, d.recv, d.count, scratch);
        case OpKind::kAllGather:  // its blocks are the output's: in rank order
          return doubling_all_gather({links.all(), rank, c.config}, d.send, d.recv, d.count * eb);
        case OpKind::kBroadcast: return tree_broadcast(ps, root, d.send, d.recv, d.count * eb);
        case OpKind::kReduce: return tree_reduce(ps, reducer, root, d.send, d.recv, d.count, scratch);
        default: return make_error(ErrorCode::kInternal, "no ", to_string(algorithm), " for ", to_string(d.kind));
      }
    }
  }
  // The ring and the chains.
  PeerPort* next = size > 1 ? links.port(f.at_position(f.pos + 1)) : nullptr;
  PeerPort* prev = size > 1 ? links.port(f.at_position(f.pos - 1)) : nullptr;
  Primitives prims(prev, next, reducer, stream_output(shape, c.config));
  RingBuffers b{static_cast<const char*>(d.send), static_cast<char*>(d.recv), d.count, f.order.data()};
  const int root = f.pos_of[static_cast<size_t>(d.root)];
  switch (d.kind) {
    case OpKind::kAllReduce: return ring_all_reduce(prims, f.pos, size, b);
    case OpKind::kReduceScatter: return ring_reduce_scatter(prims, f.pos, size, b);
    case OpKind::kAllGather: return ring_all_gather(prims, f.pos, size, b);
    case OpKind::kBroadcast: return chain_broadcast(prims, f.pos, size, root, b);
    case OpKind::kReduce: return chain_reduce(prims, f.pos, size, root, b);
    default: return make_error(ErrorCode::kInternal, "unhandled operation");
  }
}

DCOMM_NAMESPACE_END
