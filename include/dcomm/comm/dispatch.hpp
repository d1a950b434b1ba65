// The one dispatch from a collective to the algorithm that runs it on the host:
// dispatch_collective finds the call's shape, the choice (comm/algorithm_choice.hpp, or a
// forced algorithm) picks an Algorithm, and run_algorithm, the one place that makes the
// executors, runs it over the links (core/algorithms.hpp lists which algorithm runs which
// collective). Rings, chains and trees run over positions in the ring order (comm/facts.hpp);
// a block of reduce_scatter / all_gather belongs to the rank at its position.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "dcomm/algo/chain.hpp"
#include "dcomm/algo/ordered.hpp"
#include "dcomm/algo/on_ports.hpp"
#include "dcomm/algo/ring.hpp"
#include "dcomm/algo/single_copy.hpp"
#include "dcomm/algo/single_copy_reduce.hpp"
#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/facts.hpp"
#include "dcomm/comm/link_table.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/landing_prims.hpp"
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
  ChoiceCache& choices;        // the choices of recent call shapes
  StagingBlock& staging;       // memory the peers map, for a broadcast root's staged pieces

  int size() const { return facts.size(); }
};

namespace detail {
// The ring and the chains, between this rank's neighbours in the ring order.
inline Status run_ring(const DispatchContext& c, const OpDesc& d, const Reducer& reducer, const CallShape& shape) {
  const SetupFacts& f = c.facts;
  const int size = c.size();
  PeerPort* next = size > 1 ? c.links.port(f.at_position(f.pos + 1)) : nullptr;
  PeerPort* prev = size > 1 ? c.links.port(f.at_position(f.pos - 1)) : nullptr;
  RingBuffers b{static_cast<const char*>(d.send), static_cast<char*>(d.recv), d.count, f.order.data()};
  const int root = f.pos_of[static_cast<size_t>(d.root)];
  auto run = [&](auto& prims) -> Status {
    Status s = [&]() -> Status {
      switch (d.kind) {
        case OpKind::kAllReduce: return ring_all_reduce(prims, f.pos, size, b);
        case OpKind::kReduceScatter: return ring_reduce_scatter(prims, f.pos, size, b);
        case OpKind::kAllGather: return ring_all_gather(prims, f.pos, size, b);
        case OpKind::kBroadcast: return chain_broadcast(prims, f.pos, size, root, b);
        case OpKind::kReduce: return chain_reduce(prims, f.pos, size, root, b);
        default: return make_error(ErrorCode::kInternal, "unhandled operation");
      }
    }();
    return s.ok() ? prims.wait_sent() : s;  // the wire has read what went by reference
  };
  if (f.every_link_lands && ring_by_rendezvous(shape, c.config)) {
    LandingPrimitives prims(prev, next, reducer, c.scratch, c.config.slot_bytes * static_cast<size_t>(c.config.slots));
    return run(prims);
  }
  Primitives prims(prev, next, reducer, stream_output(shape, c.config), /*by_reference=*/true);
  return run(prims);
}

// Every rank reads the others' buffers in place (kSingleCopyIfRegistered: when all are from
// mem_alloc); false when it did not run, and the ring runs instead.
inline Result<bool> run_single_copy(const DispatchContext& c, const OpDesc& d, const Reducer& reducer,
                                    const CallShape& shape, bool only_if_registered) {
  LinkTable& links = c.links;
  const size_t eb = reducer.elem_bytes;
  // The staging block where DCOMM_STAGED_COPY says to stage: 1 always, auto where `auto_rule`.
  auto staging_if = [&](bool auto_rule) {
    return c.config.staged_copy == 1 || (c.config.staged_copy < 0 && auto_rule) ? &c.staging : nullptr;
  };
  if (d.kind == OpKind::kAllGather) {
    // Staged where the ranks outnumber the cores over kMaxTunedLoad times (8 processes on 2
    // cores: 0.37-0.98x the time of pushing through the kernel at 16 KiB-8 MiB out of place,
    // 0.72-0.91x in place from 512 KiB, where the choice takes single copy). 4 processes went
    // either way with the VM's stretches (0.41-0.92x, then 1.3-1.9x), 2 processes behind at most
    // sizes (1.1-1.9x). Figures: docs/benchmarking.md, "Figures behind the comments".
    DCOMM_RETURN_IF_ERROR(single_copy_all_gather(links.all(), c.rank, d.send, d.recv, d.count * eb,
                                                 stream_output(shape, c.config),
                                                 staging_if(c.facts.link.load > kMaxTunedLoad)));
    return true;
  }
  if (d.kind == OpKind::kBroadcast) {
    // Staged where the ranks outnumber the cores over kMaxTunedLoad times (8 processes on 2
    // cores: 0.55-0.82x the time of reading the root's buffer through the kernel at 128 KiB-
    // 8 MiB), and with more ranks than cores in place from where it runs in eighths (4 processes
    // on 2 cores: 0.67-0.97x from 2 MiB; either way below, and out of place). 2 processes took
    // 1.3-4x. Figures: docs/benchmarking.md, "Figures behind the comments".
    const double load = c.facts.link.load;
    StagingBlock* staging =
        staging_if(load > kMaxTunedLoad || (load > 1 && shape.in_place && shape.bytes() >= kStagedEighthsFrom));
    DCOMM_RETURN_IF_ERROR(single_copy_broadcast(links.all(), c.rank, d.root, d.send, d.recv, d.count * eb,
                                                c.config.cma_bytes, staging, buffers_leave_cache(shape, c.config)));
    return true;
  }
  const bool stream = stream_output(shape, c.config);
  if (d.kind == OpKind::kReduceScatter)
    return single_copy_reduce_scatter(links.all(), c.rank, reducer, d.send, d.recv, d.count, only_if_registered,
                                      stream);
  // all_reduce's finished chunks staged out of place where the ranks outnumber the cores over
  // kMaxTunedLoad times (8 processes on 2 cores, 1-4 MiB: 0.66-0.83x the time of the ring, which
  // ran there when not every output is from mem_alloc; 0.99-1.10 from 8 MiB). In place, single
  // copy through the kernel was ahead of it. Figures: docs/benchmarking.md, "Figures behind the
  // comments".
  return single_copy_all_reduce(
      links.all(), c.rank, reducer, d.send, d.recv, d.count, only_if_registered,
      d.kind == OpKind::kReduce ? d.root : detail::kPushAll, stream,
      d.kind == OpKind::kAllReduce ? staging_if(c.facts.link.load > kMaxTunedLoad && !shape.in_place) : nullptr);
}

// The schedules and trees over all peers (algo/on_ports.hpp), in the ring order.
inline Status run_over_peers(const DispatchContext& c, const OpDesc& d, const Reducer& reducer, Algorithm algorithm) {
  const SetupFacts& f = c.facts;
  const PeerSet ps{c.links.all_by_position(), f.pos, c.config};
  const int root = f.pos_of[static_cast<size_t>(d.root)];
  auto& scratch = c.scratch;
  switch (d.kind) {
    case OpKind::kAllReduce:
      if (algorithm == Algorithm::kHierarchical)
        return hierarchical_all_reduce(ps, f.host_at, reducer, d.send, d.recv, d.count, scratch);
      if (algorithm == Algorithm::kRecursiveDoubling)
        return recursive_doubling_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
      if (algorithm == Algorithm::kDoubleTree)
        return double_tree_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
      if (algorithm == Algorithm::kRabenseifner) return rabenseifner_all_reduce(ps, reducer, d.send, d.recv, d.count);
      return tree_all_reduce(ps, reducer, d.send, d.recv, d.count, scratch);
    case OpKind::kReduceScatter: return halving_reduce_scatter(ps, f.order, reducer, d.send, d.recv, d.count, scratch);
    case OpKind::kAllGather:  // its blocks are the output's: in rank order
      return doubling_all_gather({c.links.all(), c.rank, c.config}, d.send, d.recv, d.count * reducer.elem_bytes);
    case OpKind::kBroadcast: return tree_broadcast(ps, root, d.send, d.recv, d.count * reducer.elem_bytes);
    case OpKind::kReduce: return tree_reduce(ps, reducer, root, d.send, d.recv, d.count, scratch);
    default: return make_error(ErrorCode::kInternal, "no ", to_string(algorithm), " for ", to_string(d.kind));
  }
}
}  // namespace detail

// Runs collective d (not point-to-point or barrier) with `algorithm` on every rank alike: the
// ring and chains between neighbours; every other algorithm connects to every peer first.
inline Status run_algorithm(const DispatchContext& c, const OpDesc& d, const Reducer& reducer, const CallShape& shape,
                            Algorithm algorithm) {
  if (!runs(algorithm, d.kind))  // core/algorithms.hpp's list
    return make_error(ErrorCode::kInternal, "no ", to_string(algorithm), " for ", to_string(d.kind));
  if (algorithm == Algorithm::kRing) return detail::run_ring(c, d, reducer, shape);
  const int rank = c.rank;
  LinkTable& links = c.links;
  DCOMM_RETURN_IF_ERROR(links.connect_all(c.facts.order));
  switch (algorithm) {
    case Algorithm::kDirect:
      if (d.kind == OpKind::kReduceScatter)
        return direct_reduce_scatter({links.all(), rank, c.config}, reducer, d.send, d.recv, d.count);
      if (d.kind == OpKind::kAllGather)
        return direct_all_gather({links.all(), rank, c.config}, d.send, d.recv, d.count * reducer.elem_bytes);
      return direct_all_reduce({links.all(), rank, c.config}, reducer, d.send, d.recv, d.count);
    case Algorithm::kOrdered:
      return ordered(d.kind, {links.all(), rank, c.config}, reducer, d.root, d.send, d.recv, d.count, c.scratch);
    case Algorithm::kSingleCopy:
    case Algorithm::kSingleCopyIfRegistered: {
      auto ran = detail::run_single_copy(c, d, reducer, shape, algorithm == Algorithm::kSingleCopyIfRegistered);
      if (!ran.ok() || *ran) return ran.status();
      DCOMM_LOG(kTrace, kSubsysColl, rank, "not every buffer is from mem_alloc: ring instead");
      return detail::run_ring(c, d, reducer, shape);
    }
    default: return detail::run_over_peers(c, d, reducer, algorithm);
  }
}

// The choice for a collective of `shape` (comm/algorithm_choice.hpp, with what the ranks agreed).
inline Choice choose_for(const SetupFacts& f, const Config& config, const CallShape& shape) {
  return choose_algorithm(shape, config, f.single_copy, f.link);
}
// The cost model's time for a collective of this shape, by the algorithm it would run.
inline double predict_call_us(const SetupFacts& f, const Config& config, const CallShape& shape) {
  return predict_us(choose_for(f, config, shape).algorithm, shape, f.link);
}

// In place as every rank sees it alike: reduce_scatter's output is block `rank` of its
// input, all_gather's input is block `rank` of its output (so only rank 0's pointers are
// equal), the others share one buffer.
inline bool in_place_everywhere(const OpDesc& d, size_t eb, int rank) {
  const size_t block = static_cast<size_t>(rank) * d.count * eb;
  if (d.kind == OpKind::kReduceScatter) return static_cast<const char*>(d.send) + block == d.recv;
  if (d.kind == OpKind::kAllGather) return static_cast<const char*>(d.recv) + block == d.send;
  return d.send == d.recv;
}

// DCOMM_DEBUG_SUBSYS=TUNING: the choice and every candidate's predicted time.
inline void log_tuning(const DispatchContext& c, const CallShape& shape, const Choice& choice) {
  std::string line;
  for (Algorithm a : candidates(shape, c.config, c.facts.single_copy))
    line += detail::cat(" ", to_string(a), "=", predict_us(a, shape, c.facts.link), "us");
  DCOMM_LOG(kInfo, kSubsysTuning, c.rank, to_string(shape.kind), " ", shape.bytes(), " bytes on ", shape.ranks,
            " ranks: ", to_string(choice.algorithm), " (", choice.reason, "); predicted:", line);
}

inline Status dispatch_collective(const DispatchContext& c, const OpDesc& d, std::optional<Algorithm> forced);

namespace detail {
// A duel's trial has ended (comm/duel.hpp): every rank takes the slowest rank's fastest calls,
// one all_reduce (max) of two numbers over the ring, and all decide alike.
inline Status settle_duel(const DispatchContext& c, const CallShape& shape, ChosenShape& chosen) {
  std::array<double, 2> slowest = chosen.duel.fastest();
  DCOMM_RETURN_IF_ERROR(dispatch_collective(
      c, {OpKind::kAllReduce, slowest.data(), slowest.data(), slowest.size(), DataType::kFloat64, ReduceOp::kMax},
      Algorithm::kRing));
  const Algorithm was = chosen.choice.algorithm, rival = chosen.duel.rival();
  if (chosen.duel.decide(slowest, chosen.choice.algorithm)) chosen.choice.reason = "duel";
  DCOMM_LOG(kInfo, kSubsysTuning, c.rank, to_string(shape.kind), " ", shape.bytes(), " bytes on ", shape.ranks,
            " ranks, the slowest rank's fastest calls: ", to_string(was), " ", slowest[0], " us, ", to_string(rival),
            " ", slowest[1], " us: ", to_string(chosen.choice.algorithm), " from now on (the next trial in ",
            chosen.duel.gap(), " calls)");
  return {};
}
}  // namespace detail

// Collective d (not point-to-point or barrier) from the call to the algorithm: its reducer,
// its shape, the choice (or `forced`: tuning.hpp's measurements, a duel's agreement), the run.
inline Status dispatch_collective(const DispatchContext& c, const OpDesc& d, std::optional<Algorithm> forced) {
  auto reducer = make_host_reducer(d.type, d.op, c.size());
  if (!reducer.ok()) return reducer.status();
  const size_t eb = reducer->elem_bytes;
  const CallShape shape{d.kind, d.count, eb, c.size(), in_place_everywhere(d, eb, c.rank), c.facts.hosts};
  ChosenShape* chosen = forced ? nullptr : &c.choices.get(shape, [&] {
    const Choice choice = choose_for(c.facts, c.config, shape);
    const auto rival = duel_rival(shape, c.config, c.facts.single_copy, c.facts.link, choice.algorithm);
    return ChosenShape{choice, rival ? Duel(*rival) : Duel()};
  });
  const Algorithm algorithm = chosen ? chosen->duel.next(chosen->choice.algorithm) : *forced;
  DCOMM_LOG(kTrace, kSubsysColl, c.rank, to_string(d.kind), " count ", d.count, " ", to_string(d.type), " ",
            to_string(d.op), " root ", d.root, shape.in_place ? " in place" : "", " via ", to_string(algorithm));
  if (chosen && Logger::instance().enabled(LogLevel::kInfo, kSubsysTuning)) log_tuning(c, shape, chosen->choice);
  if (!chosen || !chosen->duel.active()) return run_algorithm(c, d, *reducer, shape, algorithm);
  using Clock = std::chrono::steady_clock;
  const bool timed = chosen->duel.timed();
  const Clock::time_point t0 = timed ? Clock::now() : Clock::time_point{};
  DCOMM_RETURN_IF_ERROR(run_algorithm(c, d, *reducer, shape, algorithm));
  const double us = timed ? std::chrono::duration<double, std::micro>(Clock::now() - t0).count() : 0;
  return chosen->duel.record(us) ? detail::settle_duel(c, shape, *chosen) : Status{};
}

DCOMM_NAMESPACE_END
