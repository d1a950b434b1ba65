// dcomm-sim plan: what a training step's gradient all-reduce would cost on a cluster, before
// buying or renting it. The buckets of a DDP step are simulated with the algorithms dcomm runs
// (the ring and the trees recorded from their code, the recursive schedules as the data the
// communicator runs), every rank's result checked symbolically.
//
//   dcomm-sim plan --grad 1.4G --bucket 25M --compute-ms 120 --hosts 16 --gpus 8
//                  [--local-gbs 150] [--local-us 1] [--nic-gbps 400] [--nics 8] [--net-us 5]
//
// --grad: gradient bytes a step (float32); --bucket: DDP's bucket (25 MiB by default in
// torch); --compute-ms: forward and backward of one step; --hosts x --gpus: the ranks; within
// a host --local-gbs GB/s and --local-us a step (NVLink class by default); between hosts
// --nics NICs a host of --nic-gbps Gb/s, --net-us a step.
//
// Per algorithm: the time of one bucket and of the last (smaller) one, the all-reduce time a
// step, and the share of the step that communication takes: without overlap (step = compute +
// all-reduces) and overlapped as DDP does (bucket i is ready at (i+1)/B of the compute, the
// buckets go one after another, the step ends when the last is reduced). Also the algorithm
// dcomm's cost model picks for a bucket of that size on that cluster.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <dcomm/comm/algorithm_choice.hpp>
#include <dcomm/comm/cost_model.hpp>
#include <dcomm/sim/recorder.hpp>
#include <dcomm/sim/simulator.hpp>

#include "cli.hpp"

namespace dcomm_sim {

struct PlanArgs {
  double grad_bytes = 0, bucket_bytes = 25.0 * (1 << 20), compute_ms = 0;
  int hosts = 0, gpus = 0;
  double local_gbs = 150, local_us = 1.0, nic_gbps = 400, net_us = 5.0;
  int nics = 8;
};

// The time of each bucket in order, and the step: overlapped as above.
struct StepTime {
  double comm_us = 0, no_overlap_us = 0, overlapped_us = 0;
};
inline StepTime step_time(const std::vector<double>& bucket_us, double compute_us) {
  StepTime t;
  const size_t b = bucket_us.size();
  double done = 0;
  for (size_t i = 0; i < b; ++i) {
    const double ready = compute_us * static_cast<double>(i + 1) / static_cast<double>(b);
    done = std::max(done, ready) + bucket_us[i];
    t.comm_us += bucket_us[i];
  }
  t.no_overlap_us = compute_us + t.comm_us;
  t.overlapped_us = std::max(compute_us, done);
  return t;
}

inline std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1 << 20));
  return buf;
}

// The cluster's links as the simulator runs them and as dcomm's cost model sees them (reductions
// on the GPU: free).
struct Cluster {
  dcomm::SimNetwork net;
  dcomm::LinkModel link;
};
inline Cluster cluster(const PlanArgs& a) {
  Cluster c;
  c.net.ranks_per_host = a.gpus;
  c.net.local_alpha_us = a.local_us;
  c.net.local_bytes_per_us = a.local_gbs * 1e3;
  c.net.net_alpha_us = a.net_us;
  c.net.nic_bytes_per_us = a.nic_gbps / 8 * 1e3;
  c.net.nics_per_host = a.nics;
  c.link.alpha_us = a.local_us, c.link.beta_us_per_byte = 1 / c.net.local_bytes_per_us, c.link.gamma_us_per_byte = 0;
  c.link.net_alpha_us = a.net_us, c.link.net_beta_us_per_byte = 1 / (c.net.nic_bytes_per_us * a.nics / a.gpus);
  c.link.cache_bytes = 0;
  return c;
}

template <class Bytes>
int run_plan(int argc, char** argv, Bytes bytes_of) {
  PlanArgs a;
  auto number = [](auto* out) {
    return [out](const std::string& v) -> std::string {
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(std::atof(v.c_str()));
      return "";
    };
  };
  auto bytes = [&](double* out) {
    return [out, bytes_of](const std::string& v) -> std::string {
      *out = static_cast<double>(bytes_of(v));
      return "";
    };
  };
  dcomm_cli::Cli cli("dcomm-sim plan", "--grad BYTES --bucket BYTES --compute-ms MS --hosts H --gpus G [flags]",
                     "A training step's gradient all-reduce on a cluster: every algorithm simulated and checked,\n"
                     "the step's communication time against its compute.");
  cli.flag("--grad", "BYTES", "the gradients' bytes; K, M, G suffixes (required)", bytes(&a.grad_bytes))
      .flag("--bucket", "BYTES", "DDP's bucket size (default 25M)", bytes(&a.bucket_bytes))
      .flag("--compute-ms", "MS", "the step's compute, which communication overlaps (required)", number(&a.compute_ms))
      .flag("--hosts", "H", "hosts (required)", number(&a.hosts))
      .flag("--gpus", "G", "GPUs a host (required)", number(&a.gpus))
      .flag("--local-gbs", "GB/s", "bandwidth between the GPUs of a host (default 150)", number(&a.local_gbs))
      .flag("--local-us", "US", "latency between the GPUs of a host (default 1)", number(&a.local_us))
      .flag("--nic-gbps", "Gb/s", "a NIC's bandwidth (default 400)", number(&a.nic_gbps))
      .flag("--nics", "N", "NICs a host (default 8)", number(&a.nics))
      .flag("--net-us", "US", "latency between hosts (default 5)", number(&a.net_us))
      .parse(argc, argv, 2);
  if (a.grad_bytes < 4 || a.bucket_bytes < 4 || a.compute_ms < 0 || a.hosts < 1 || a.gpus < 1 || a.nics < 1 ||
      a.local_gbs <= 0 || a.nic_gbps <= 0)
    cli.fail("--grad, --compute-ms, --hosts and --gpus are required; sizes at least 4 bytes, counts at least 1");
  using namespace dcomm;
  const int n = a.hosts * a.gpus;
  const auto [net, link] = cluster(a);
  const size_t full = static_cast<size_t>(a.bucket_bytes) / 4;
  const size_t buckets = static_cast<size_t>((a.grad_bytes + a.bucket_bytes - 1) / a.bucket_bytes);
  const size_t last = std::max<size_t>(1, static_cast<size_t>(a.grad_bytes) / 4 - full * (buckets - 1));
  std::printf(
      "# %d hosts x %d GPUs = %d ranks; %.3g GB of gradients a step in %zu buckets of %s (the last %s); "
      "compute %.1f ms a step\n",
      a.hosts, a.gpus, n, a.grad_bytes / 1e9, buckets, mib(full * 4.0).c_str(), mib(last * 4.0).c_str(), a.compute_ms);
  std::printf("# within a host %.0f GB/s, %.1f us a step; between hosts %d NICs of %.0f Gb/s, %.1f us a step\n",
              a.local_gbs, a.local_us, a.nics, a.nic_gbps, a.net_us);
  std::printf("%-20s %13s %13s %14s %18s %18s\n", "algorithm", "bucket (us)", "last (us)", "a step (ms)",
              "share, no overlap", "share, overlapped");
  const LinkModel model;
  int failures = 0;
  const char* fastest = nullptr;
  double fastest_us = 0;
  auto row = [&](const char* name, auto simulate_count) {
    const SimResult b = simulate_count(full), l = simulate_count(last);
    if (!b.error.empty() || !l.error.empty()) {
      std::printf("%-20s FAILED: %s\n", name, (b.error.empty() ? l.error : b.error).c_str());
      ++failures;
      return;
    }
    std::vector<double> times(buckets, b.time_us);
    times.back() = l.time_us;
    const StepTime t = step_time(times, a.compute_ms * 1e3);
    if (!fastest || t.comm_us < fastest_us) fastest = name, fastest_us = t.comm_us;
    std::printf("%-20s %13.1f %13.1f %14.2f %17.1f%% %17.1f%%\n", name, b.time_us, l.time_us, t.comm_us / 1e3,
                100 * t.comm_us / t.no_overlap_us, 100 * (t.overlapped_us - a.compute_ms * 1e3) / t.overlapped_us);
  };
  auto sliced = [&](size_t count) { return recorded_tree_slice(count, model.slice_bytes / 4, 32); };
  if (n <= 4096)
    row("ring", [&](size_t c) {
      return simulate_recorded_all_reduce(n, c, model.slice_bytes / 4, 4, net, record_ring_all_reduce);
    });
  else std::printf("%-20s (not simulated above 4,096 ranks: 2(n-1) steps on each rank)\n", "ring");
  row("recursive_doubling", [&](size_t c) {
    return simulate(schedules_for(n, [&](int w, int x) { return schedule_recursive_doubling(w, x, c); }),
                    SimCollective::kAllReduce, c, 4, 0, net);
  });
  row("rabenseifner", [&](size_t c) {
    return simulate(schedules_for(n, [&](int w, int x) { return schedule_rabenseifner(w, x, c); }),
                    SimCollective::kAllReduce, c, 4, 0, net);
  });
  row("tree", [&](size_t c) { return simulate_recorded_all_reduce(n, c, sliced(c), 4, net, record_tree_all_reduce); });
  row("double_tree",
      [&](size_t c) { return simulate_recorded_all_reduce(n, c, sliced(c), 4, net, record_double_tree_all_reduce); });
  if (a.hosts > 1 && a.gpus > 1)
    row("hierarchical", [&](size_t c) {
      return simulate_recorded_all_reduce(n, c, sliced(c), 4, net, [&](int w, int x, size_t cc, size_t sl) {
        return record_hierarchical_all_reduce(w, x, cc, sl, a.gpus);
      });
    });
  if (fastest) std::printf("# fastest simulated: %s, %.2f ms of all-reduce a step\n", fastest, fastest_us / 1e3);
  // dcomm's choice: its cost model with this cluster's links.
  const Config defaults;
  for (size_t c : {full, last}) {
    const CallShape shape{OpKind::kAllReduce, c, 4, n, /*in_place=*/true, a.hosts};
    const Choice choice = choose_algorithm(shape, defaults, /*single_copy=*/false, link);
    std::printf("# dcomm's cost model picks %s for a %s bucket (its prediction: %.1f us)%s\n",
                to_string(choice.algorithm), mib(c * 4.0).c_str(), predict_us(choice.algorithm, shape, link),
                choice.algorithm == Algorithm::kDirect ? "; not simulated here" : "");
    if (c == last && last == full) break;
  }
  std::printf(
      "# overlapped: bucket i ready at (i+1)/%zu of the compute, the buckets reduced one after another; the "
      "share is the part of the step past the compute\n",
      buckets);
  return failures ? 1 : 0;
}

}  // namespace dcomm_sim
