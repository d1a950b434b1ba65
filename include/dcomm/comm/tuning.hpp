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

#include "dcomm/comm/cost_model.hpp"
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
// fit: alpha_us, beta_us_per_byte, gamma_us_per_byte.
inline Status measure_link(int size, const RunCollective& run, double fit[3]) {
  const size_t big = 4u << 20;
  std::vector<char> in(big, 0), out(big, 0);  // the all_gather's output is `big` too (big / size per rank)
  auto ring = [&](OpKind kind, size_t count, DataType type) {
    return run(OpDesc{kind, in.data(), out.data(), count, type, ReduceOp::kSum}, Algorithm::kRing);
  };
  // The best of three means: start-up noise (ranks still starting) only slows a run down.
  auto mean_us = [&](int iters, auto&& call) -> Result<double> {
    DCOMM_RETURN_IF_ERROR(call());  // warm-up
    Status s;
    const double us = best_mean_us(3, iters, [&] {
      if (s.ok()) s = call();
    });
    if (!s.ok()) return s;
    return us;
  };
  auto small = mean_us(100, [&] { return ring(OpKind::kAllReduce, 2, DataType::kFloat32); });
  auto reduce = mean_us(2, [&] { return ring(OpKind::kAllReduce, big / 4, DataType::kFloat32); });
  auto gather = mean_us(2, [&] { return ring(OpKind::kAllGather, big / static_cast<size_t>(size), DataType::kUint8); });
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

DCOMM_NAMESPACE_END
