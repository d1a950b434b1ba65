// dcomm-sim: the all_reduce algorithms dcomm runs, simulated at scale without moving data:
// the recursive schedules as the data the communicator runs (algo/schedule.hpp), the ring, the
// trees, direct and hierarchical recorded from their code (sim/recorder.hpp). Predicted time per algorithm by size
// and rank count, with every rank's result checked symbolically.
//
//   dcomm-sim                      1,024 and 65,536 ranks on 8-GPU hosts, 400 Gb/s per NIC
//   dcomm-sim -n 8,64 -s 8,1M      other rank counts and sizes
//   dcomm-sim --slots 16 --max-slices 128   deeper FIFOs (DCOMM_SLOTS), more slices a call at scale
//   dcomm-sim --local 8            one host of 8 CPU ranks sharing this machine's cores (--cores)
//                                  (compare: bench/peers/compare.py -N 8 --algos ... --sim)
//   dcomm-sim --exchanges          gather, scatter and all_to_all instead (algo/exchange.hpp)
//   dcomm-sim plan --grad 1.4G --bucket 25M --compute-ms 120 --hosts 16 --gpus 8
//                                  a training step's gradient all-reduce on a cluster (sim_plan.hpp)
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include <dcomm/algo/exchange.hpp>
#include <dcomm/comm/cost_model.hpp>
#include <dcomm/sim/recorder.hpp>
#include <dcomm/sim/simulator.hpp>

#include "cli.hpp"
#include "sim_plan.hpp"

using namespace dcomm;

namespace {
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}
size_t bytes_of(const std::string& t) {
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  std::string u(end);
  double m = u == "K" ? 1 << 10 : u == "M" ? 1 << 20 : u == "G" ? 1 << 30 : 1;
  return static_cast<size_t>(v * m);
}
std::string human(size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// gather, scatter (root 0) and all_to_all from algo/exchange.hpp's one definition, each rank's
// buffer `bytes` (blocks of bytes / n); all_to_all's n^2 messages only up to 1,024 ranks.
// Returns the number of failures.
int run_exchanges(const std::vector<int>& ranks, const std::vector<size_t>& sizes, const SimNetwork& net) {
  std::printf(
      "# gather, scatter (root 0), all_to_all: float32, each rank's buffer the size; predicted time in us; "
      "every block's place checked symbolically ('ok')\n");
  std::printf("%8s %9s %19s %19s %19s\n", "ranks", "size", "gather", "scatter", "all_to_all");
  int failures = 0;
  for (int n : ranks)
    for (size_t bytes : sizes) {
      const size_t block = std::max<size_t>(bytes / 4 / static_cast<size_t>(n), 1);
      std::printf("%8d %9s", n, human(bytes).c_str());
      for (auto [what, sim] : {std::pair{Exchange::kGather, SimCollective::kGather},
                               std::pair{Exchange::kScatter, SimCollective::kScatter},
                               std::pair{Exchange::kAllToAll, SimCollective::kAllToAll}}) {
        if (what == Exchange::kAllToAll && n > 1024) {
          std::printf(" %19s", "-");
          continue;
        }
        SimResult r = simulate(schedules_for(n, [&](int w, int x) { return schedule_exchange(what, w, x, block, 0); }),
                               sim, block * static_cast<size_t>(n), 4, block, net);
        if (r.error.empty()) {
          std::printf(" %16.1f ok", r.time_us);
          continue;
        }
        std::printf(" %19s", "FAILED");
        std::fprintf(stderr, "dcomm-sim: %s, %d ranks, %s: %s\n", exchange_name(what), n, human(bytes).c_str(),
                     r.error.c_str());
        ++failures;
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  std::printf(
      "# -: all_to_all above 1,024 ranks (n^2 messages) not simulated; the model charges a message to its "
      "sender's link only, so gather's incast at the root is not modelled (its time is a lower bound)\n");
  return failures;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "plan") return dcomm_sim::run_plan(argc, argv, bytes_of);
  std::vector<int> ranks{1024, 65536};
  std::vector<size_t> sizes{8, 1 << 20, size_t{1} << 30};
  SimNetwork net;
  bool local = false, exchanges = false;
  // --local: CPU ranks over shared memory on this machine's cores. Copies and reductions at
  // the cost model's unloaded rates (comm/cost_model.hpp: LinkModel); the processor time of a
  // step and the wake-up after a wait were fitted (bench/peers/fit_sim.py) to all_reduce on 8
  // ranks over 2 cores, each algorithm forced, 7 sizes from 8 B to 32 MiB, median of 3, in two
  // separate compare.py runs: 23 and 18 of 28 within 25% (2.0 and 0.3 before: 17 and 17).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  double wake_us = 2.5, step_cpu_us = 0.1;
  int slots = 0;  // the FIFOs' depth, which bounds how far the double tree runs ahead (0: as the communicator's)
  size_t max_slices = 32;  // at scale, the trees' slices a call at most (0: slot-sized, as the host runs them)
  auto number = [](auto* out) {
    return [out](const std::string& v) -> std::string {
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(std::atof(v.c_str()));
      return "";
    };
  };
  dcomm_cli::Cli("dcomm-sim", "[flags] | plan [flags]",
                 "dcomm's all_reduce algorithms simulated at scale without moving data: predicted time per\n"
                 "algorithm by size and rank count, every rank's result checked symbolically. `dcomm-sim plan\n"
                 "--help`: a training step's gradient all-reduce on a cluster.")
      .flag("-n", "ranks,...", "rank counts (default 1024,65536; 8-GPU hosts, 400 Gb/s per NIC)",
            [&](const std::string& v) -> std::string {
              ranks.clear();
              for (auto& r : split(v)) ranks.push_back(std::atoi(r.c_str()));
              return "";
            })
      .flag("-s", "bytes,...", "sizes; K, M, G suffixes (default 8,1M,1G)",
            [&](const std::string& v) -> std::string {
              sizes.clear();
              for (auto& b : split(v)) sizes.push_back(bytes_of(b));
              return "";
            })
      .flag("--slots", "n",
            "FIFO depth (DCOMM_SLOTS), which bounds how far the double tree runs ahead (default: the communicator's, "
            "log2 n + 1 and at least 8)",
            number(&slots))
      .flag("--max-slices", "n", "at scale, the trees' slices a call at most (0: slot-sized, as the host runs them)",
            number(&max_slices))
      .flag("--local", "ranks", "one host of this many CPU ranks sharing this machine's cores instead",
            [&](const std::string& v) -> std::string {
              local = true;
              const int n = std::atoi(v.c_str());
              ranks = {n};
              sizes = {8, 512, 4096, 32768, 512 << 10, 4 << 20, 32 << 20};
              net.ranks_per_host = n;
              return "";
            })
      .flag("--exchanges", "", "gather, scatter and all_to_all (each rank's buffer the size; root 0) instead",
            [&](const std::string&) -> std::string {
              exchanges = true;
              return "";
            })
      .flag("--cores", "c", "--local: the cores the ranks share (default this process's)", number(&cores))
      .flag("--wake", "us", "--local: the wake-up after a wait (default 2.5)", number(&wake_us))
      .flag("--step-cpu", "us", "--local: the processor time of a step (default 0.1)", number(&step_cpu_us))
      .parse(argc, argv);
  const LinkModel model;
  auto local_net = [&]() {  // the CPU model
    SimNetwork m = net;
    m.local_alpha_us = model.alpha_us;
    m.local_bytes_per_us = 1e12;  // the copies are the processors' work, below
    m.cores_per_host = cores;
    m.copy_bytes_per_us = 2.0 / model.beta_us_per_byte;  // beta counts a copy in and a copy out
    m.reduce_bytes_per_us = 1.0 / model.gamma_us_per_byte;
    m.wake_us = wake_us;
    m.step_cpu_us = step_cpu_us;
    return m;
  };
  if (local)
    std::printf(
        "# one host, %d ranks on %d cores: copy %.0f GB/s, reduce %.0f GB/s a core, step %.1f us "
        "of a core, wake-up %.1f us after a wait\n",
        ranks[0], cores, 2.0 / model.beta_us_per_byte / 1e3, 1.0 / model.gamma_us_per_byte / 1e3, step_cpu_us, wake_us);
  else
    std::printf(
        "# %d ranks per host; within a host %.1f us, %.0f GB/s; between hosts %.1f us, %d NICs of %.0f GB/s; "
        "fat tree, contention at the NICs\n",
        net.ranks_per_host, net.local_alpha_us, net.local_bytes_per_us / 1e3, net.net_alpha_us, net.nics_per_host,
        net.nic_bytes_per_us / 1e3);
  if (exchanges) return run_exchanges(ranks, sizes, local ? local_net() : net) ? 1 : 0;
  std::printf("# all_reduce, float32; predicted time in us; every rank's result checked symbolically ('ok')\n");
  std::printf("%8s %9s %19s %19s %19s %19s %19s %19s %19s %19s\n", "ranks", "size", "ring", "recursive_doubling",
              "rabenseifner", "tree", "double_tree", "hierarchical", "direct", "ordered");
  int failures = 0;
  for (int n : ranks) {
    for (size_t bytes : sizes) {
      const size_t count = std::max<size_t>(bytes / 4, 1);
      std::printf("%8d %9s", n, human(bytes).c_str());
      const SimNetwork at = local ? local_net() : net;
      // The trees pipeline slot-sized slices (512 KiB); at scale at most max_slices a call.
      const size_t slice = recorded_tree_slice(count, model.slice_bytes / 4, local ? 0 : max_slices);
      const size_t ring_slice = model.slice_bytes / 4;  // the ring's slices are slots at every scale
      auto report = [&](const SimResult& r) {
        if (!r.error.empty()) {
          std::printf(" %19s", "FAILED");
          std::fprintf(stderr, "dcomm-sim: %d ranks, %s: %s\n", n, human(bytes).c_str(), r.error.c_str());
          ++failures;
        } else {
          std::printf(" %16.1f ok", r.time_us);
        }
      };
      auto run = [&](auto gen) { report(simulate(schedules_for(n, gen), SimCollective::kAllReduce, count, 4, 0, at)); };
      auto recorded = [&](auto record, size_t slice_elems) {
        report(simulate_recorded_all_reduce(n, count, slice_elems, 4, at, record));
      };
      if (n <= 4096) {
        recorded(record_ring_all_reduce, ring_slice);
      } else {
        // Every ring step is alike: one chunk to the next rank, which is off the host for one
        // rank in ranks_per_host. Timed from the schedule's shape, not run: the ring takes
        // 2(n-1) steps on each of n ranks (8.6e9 messages at 65,536 ranks).
        const double chunk = static_cast<double>(count) * 4 / n;
        const double step = net.net_alpha_us + chunk / net.nic_bytes_per_us;
        std::printf(" %16.1f an", 2.0 * (n - 1) * step);
      }
      run([&](int w, int x) { return schedule_recursive_doubling(w, x, count); });
      run([&](int w, int x) { return schedule_rabenseifner(w, x, count); });
      recorded(record_tree_all_reduce, slice);
      recorded(
          [&](int w, int x, size_t c, size_t sl) {
            return record_double_tree_all_reduce_slots(w, x, c, sl, slots > 0 ? slots : fifo_slots(Config{}, w));
          },
          slice);
      // Hierarchical: the host's tree in the trees' slices, Rabenseifner among the hosts' leaders.
      if (at.ranks_per_host > 1 && at.ranks_per_host < n)
        recorded([&](int w, int x, size_t c,
                     size_t sl) { return record_hierarchical_all_reduce(w, x, c, sl, at.ranks_per_host); },
                 slice);
      else std::printf(" %19s", "-");
      // Direct: for a few KiB within a host (the model charges a sender nothing per message
      // beyond its bytes, so over many ranks direct would look cheaper than it is).
      if (bytes <= kDirectMaxBytes && (local || n <= at.ranks_per_host)) recorded(record_direct_all_reduce, count);
      else std::printf(" %19s", "-");
      // Ordered (DCOMM_DETERMINISTIC): within a host, as direct (n - 1 messages a rank each way,
      // which the model charges by their bytes only).
      if (local || n <= at.ranks_per_host)
        recorded([](int w, int x, size_t c, size_t sl) { return record_ordered(OpKind::kAllReduce, w, x, c, sl); },
                 ring_slice);
      else std::printf(" %19s", "-");
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf(
      "# ok: simulated and checked; an: the ring above 4,096 ranks, timed analytically; trees pipelined in "
      "512 KiB slices (at scale, at most %zu slices; the double tree over FIFOs of %s slots); -: not chosen there "
      "(hierarchical: one host; direct: above %zu bytes or across hosts; ordered: across hosts)\n",
      max_slices, slots > 0 ? std::to_string(slots).c_str() : "the communicator's (log2 n + 1, at least 8)",
      kDirectMaxBytes);
  return failures ? 1 : 0;
}
