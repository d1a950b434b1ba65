// Tuning the cost model to the links at start (DCOMM_LINK_MODEL=measure): time the ring (8 B
// and 4 MiB all_reduce, 4 MiB all_gather) and fit the model's step latency and per-byte costs
// to it; every rank takes the largest (slowest) value of each, so all agree.
// DCOMM_LINK_MODEL_FILE=f reads them from f when f was written for the same ranks per core,
// else measures and writes f. The calls go through the communicator's dispatch with the ring
// forced, not through the public API or the configuration.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/comm/cost_model.hpp"
#include "dcomm/comm/facts.hpp"
#include "dcomm/comm/host_tuning.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// Runs one collective on every rank through the dispatch; with an algorithm, that one.
using RunCollective = std::function<Status(const OpDesc&, std::optional<Algorithm>)>;

namespace detail {
// A call's mean time: one untimed, then the best of three means of `iters` (start-up noise,
// ranks still starting, only slows a round down).
template <class Call>
Result<double> timed_us(int iters, Call&& call) {
  DCOMM_RETURN_IF_ERROR(call());
  Status s;
  const double us = best_mean_us(3, iters, [&] {
    if (s.ok()) s = call();
  });
  if (!s.ok()) return s;
  return us;
}

// fit: alpha_us, beta_us_per_byte, gamma_us_per_byte.
inline Status measure_link(int size, const RunCollective& run, double fit[3]) {
  const size_t big = 4u << 20;
  std::vector<char> in(big, 0), out(big, 0);  // the all_gather's output is `big` too (big / size per rank)
  auto ring = [&](OpKind kind, size_t count, DataType type) {
    return run(OpDesc{kind, in.data(), out.data(), count, type, ReduceOp::kSum}, Algorithm::kRing);
  };
  auto small = timed_us(100, [&] { return ring(OpKind::kAllReduce, 2, DataType::kFloat32); });
  auto reduce = timed_us(2, [&] { return ring(OpKind::kAllReduce, big / 4, DataType::kFloat32); });
  auto gather =
      timed_us(2, [&] { return ring(OpKind::kAllGather, big / static_cast<size_t>(size), DataType::kUint8); });
  for (const Status& s : {small.status(), reduce.status(), gather.status()})
    if (!s.ok()) return s.with_context("measuring the links (DCOMM_LINK_MODEL)");
  const double n = size, S = static_cast<double>(big);
  fit[0] = *small / (2 * (n - 1));                                            // ring: 2(n-1) steps
  fit[1] = std::max(1e-9, (*gather - (n - 1) * fit[0]) / ((n - 1) / n * S));  // all_gather: bytes only
  fit[2] = std::max(1e-9, (*reduce - 2 * (n - 1) * fit[0] - 2 * (n - 1) / n * S * fit[1]) / ((n - 1) / n * S));
  return {};
}
}  // namespace detail

// Collective over the communicator; `link` starts as the model for the agreed load
// (comm/facts.hpp) and ends measured or loaded, the same on every rank.
inline Status tune_link_model(LinkModel& link, int rank, int size, const RunCollective& run) {
  const std::string mode = env_or("DCOMM_LINK_MODEL", "default"), file = env_or("DCOMM_LINK_MODEL_FILE");
  if (mode != "default" && mode != "measure")
    return invalid_argument("DCOMM_LINK_MODEL='", mode, "' is not one of default, measure");
  if (size < 2 || (mode == "default" && file.empty())) return {};
  const double load = link.alpha_us / LinkModel{}.alpha_us;  // for_load's factor: identifies the setting
  double fit[3] = {0, 0, 0};
  bool loaded = false;
  if (!file.empty()) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    if (auto f = parse_link_model(line); f && std::abs(f->load - load) < 1e-9) {
      fit[0] = f->alpha_us, fit[1] = f->beta_us_per_byte, fit[2] = f->gamma_us_per_byte;
      loaded = true;
    }
  }
  // Every rank must agree whether to measure: the file may exist on some hosts only.
  uint8_t need = loaded ? 0 : 1, any_need = 0;
  DCOMM_RETURN_IF_ERROR(
      run(OpDesc{OpKind::kAllReduce, &need, &any_need, 1, DataType::kUint8, ReduceOp::kMax}, std::nullopt));
  if (any_need) DCOMM_RETURN_IF_ERROR(detail::measure_link(size, run, fit));
  double agreed[3];
  DCOMM_RETURN_IF_ERROR(
      run(OpDesc{OpKind::kAllReduce, fit, agreed, 3, DataType::kFloat64, ReduceOp::kMax}, std::nullopt));
  link.alpha_us = agreed[0], link.beta_us_per_byte = agreed[1], link.gamma_us_per_byte = agreed[2];
  if (any_need && !file.empty() && rank == 0)
    std::ofstream(file) << format_link_model({load, agreed[0], agreed[1], agreed[2]});
  DCOMM_LOG(kInfo, kSubsysTuning, rank, any_need ? "measured" : "loaded", " link model: step ", link.alpha_us, " us, ",
            1e-3 / link.beta_us_per_byte, " GB/s a link, reduction ", 1e-3 / link.gamma_us_per_byte, " GB/s");
  return {};
}

namespace detail {
inline constexpr size_t kCrossoverFirst = 16u << 10, kCrossoverLast = 4u << 20;
inline constexpr double kCrossoverBudgetUs = 40'000;  // the bound on a first set-up is 50 ms

// Rank 0's walk up the sizes, for all_reduce [0] and reduce_scatter [1]: the next size to time
// (0: done) and the size found (0: none, the budget ran out).
struct CrossoverSweep {
  size_t next[2] = {kCrossoverFirst, kCrossoverFirst};
  size_t found[2] = {0, 0};
  bool ahead_before[2] = {false, false};

  // Single copy was ahead at next[k], or not. Ahead at two sizes in a row: the first of them.
  // Behind at the last size: twice it (the FIFO algorithms were ahead through it).
  void record(int k, bool ahead) {
    const size_t at = next[k];
    if (ahead && ahead_before[k]) found[k] = at / 2, next[k] = 0;
    else if (at >= kCrossoverLast) found[k] = ahead ? at : 2 * at, next[k] = 0;
    else next[k] = 2 * at;
    ahead_before[k] = ahead;
  }
};
}  // namespace detail

// Collective over a communicator whose ranks can all read each other's memory (one host, at
// most kAllPeerMaxRanks): from which size single copy reduces ahead of what the cost model
// would run otherwise, for all_reduce and reduce_scatter. Both are timed side by side (float32
// sums, one untimed call, then the best of three means of two) at 16 KiB, 32 KiB, ... 4 MiB,
// out of place (in place with more ranks than cores, where out of place keeps to the FIFO
// unless the buffers are from mem_alloc), at most 40 ms in all. Rank 0's clock decides and
// every rank follows its plan, so all time the same calls and take the same values; rank 0
// adds them to the host's cache under `shape`. A threshold a variable or the program chose
// is neither timed nor changed.
inline Status tune_reduce_crossover(Config& config, const SetupFacts& facts, int rank, const std::string& shape,
                                    const RunCollective& run) {
  const int size = facts.size();
  const bool in_place = facts.link.load > 1;
  std::vector<float> in(detail::kCrossoverLast / sizeof(float), 0.0f), out(in.size(), 0.0f);
  Config without = config;
  without.cma_reduce_bytes = without.cma_reduce_scatter_bytes = 0;
  const detail::ChosenThresholds chosen = detail::chosen_thresholds(config);
  detail::CrossoverSweep sweep;
  const OpKind kinds[2] = {OpKind::kAllReduce, OpKind::kReduceScatter};
  const auto t0 = std::chrono::steady_clock::now();
  std::string timings;
  for (;;) {
    double plan[2] = {0, 0}, agreed[2] = {0, 0};
    if (rank == 0) plan[0] = static_cast<double>(sweep.next[0]), plan[1] = static_cast<double>(sweep.next[1]);
    DCOMM_RETURN_IF_ERROR(
        run(OpDesc{OpKind::kAllReduce, plan, agreed, 2, DataType::kFloat64, ReduceOp::kMax}, std::nullopt));
    if (agreed[0] == 0 && agreed[1] == 0) break;
    for (int k : {0, 1}) {
      if (agreed[k] == 0) continue;
      const bool rs = kinds[k] == OpKind::kReduceScatter;
      const size_t count = static_cast<size_t>(agreed[k]) / sizeof(float) / static_cast<size_t>(rs ? size : 1);
      float* recv = !in_place ? out.data() : rs ? in.data() + static_cast<size_t>(rank) * count : in.data();
      const OpDesc d{kinds[k], in.data(), recv, count, DataType::kFloat32, ReduceOp::kSum};
      const CallShape call{kinds[k], count, sizeof(float), size, in_place, facts.hosts};
      const Algorithm other = choose_algorithm(call, without, facts.single_copy, facts.link).algorithm;
      auto fifo = detail::timed_us(2, [&] { return run(d, other); });
      auto single = detail::timed_us(2, [&] { return run(d, Algorithm::kSingleCopy); });
      for (const Status& s : {fifo.status(), single.status()})
        if (!s.ok()) return s.with_context("measuring where single copy reduces ahead (the host tuning)");
      if (rank != 0) continue;
      timings += detail::cat(" ", to_string(kinds[k]), " ", call.bytes(), ": ", to_string(other), " ", *fifo,
                             " us, single_copy ", *single, " us;");
      sweep.record(k, *single < *fifo);
    }
    if (rank == 0 && std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() >
                         detail::kCrossoverBudgetUs)
      sweep.next[0] = sweep.next[1] = 0;
  }
  double found[2] = {0, 0}, agreed[2] = {0, 0};
  if (rank == 0) found[0] = static_cast<double>(sweep.found[0]), found[1] = static_cast<double>(sweep.found[1]);
  DCOMM_RETURN_IF_ERROR(
      run(OpDesc{OpKind::kAllReduce, found, agreed, 2, DataType::kFloat64, ReduceOp::kMax}, std::nullopt));
  // Where the budget ran out: the compiled-in value, kept in the cache too (not timed again).
  const size_t all_reduce = agreed[0] > 0 ? static_cast<size_t>(agreed[0]) : Config{}.cma_reduce_bytes;
  const size_t reduce_scatter = agreed[1] > 0 ? static_cast<size_t>(agreed[1]) : Config{}.cma_reduce_scatter_bytes;
  if (!chosen.all_reduce) config.cma_reduce_bytes = all_reduce;
  if (!chosen.reduce_scatter) config.cma_reduce_scatter_bytes = reduce_scatter;
  if (rank == 0) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    DCOMM_LOG(kInfo, kSubsysTuning, rank, shape, ": single copy reduces from ", all_reduce, " (all_reduce), ",
              reduce_scatter, " bytes (reduce_scatter); measured in ", ms, " ms",
              agreed[0] > 0 && agreed[1] > 0 ? "" : " (the budget ran out: the rest compiled-in)",
              chosen.all_reduce || chosen.reduce_scatter ? " (a variable or the program chose one: that one kept)" : "",
              ":", timings);
    remember_reduce_crossover({shape, all_reduce, reduce_scatter});
  }
  return {};
}

DCOMM_NAMESPACE_END
