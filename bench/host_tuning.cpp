// dcomm-host-tuning: what the host tuning (comm/host_tuning.hpp) measures on this machine, how
// long it takes, and what it chooses; run it beside a load (a memory-bandwidth hog, say) to see
// the values it would choose there.
//
//   dcomm-host-tuning [--reps K] [--ranks N]
//
// First, what the tuning adds to a communicator's set-up: N ranks (forked processes, 2 by
// default; 0 skips this) set up a communicator with the tuning off, then with an empty cache of
// their own (the host measure and the shape's thresholds are measured), then again (read from
// that cache); each line is the slowest rank's set-up and the thresholds rank 0 took. Then each
// repetition measures the host from scratch (no cache), as the first communicator on a host
// does; then the cache is read as later set-ups read it. Prints one line per repetition: the
// time taken, the two measured values and DCOMM_CMA_BYTES as it would be chosen.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dcomm/dcomm.hpp>

#include "../tools/cli.hpp"
#include "forked.hpp"

namespace {
// A single-copy threshold's run of sizes, "64K-256K" (through the kernel from the first, behind
// again from the second; "64K-" where it is not; "rule": not timed, all_gather's or broadcast's by
// DCOMM_CMA_BYTES's rule, recursive doubling's by the cost model).
std::string run_of(size_t from, size_t until) {
  if (from == dcomm::kNotMeasured) return "rule";
  auto text = [](size_t b) {
    return b % (1u << 20) == 0 ? std::to_string(b >> 20) + "M"
           : b % 1024 == 0     ? std::to_string(b >> 10) + "K"
                               : std::to_string(b);
  };
  return text(from) + "-" + (until == dcomm::kNoUpperBound ? "" : text(until));
}

// One communicator's set-up on every rank, timed; rank 0 prints the slowest rank's and what it took.
int set_up(int rank, int n, const std::string& id_text, const char* what) {
  auto id = dcomm::UniqueId::parse(id_text);
  if (!id.ok()) return 4;
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = dcomm::Communicator::init(rank, n, *id);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!comm.ok()) return std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().message().c_str()), 4;
  dcomm::Communicator& c = **comm;
  if (!c.all_reduce(&ms, &ms, 1, dcomm::DataType::kFloat64, dcomm::ReduceOp::kMax).ok()) return 4;
  if (rank == 0)
    std::printf("  %-30s %8.2f %10zu %12s %14s %8zu %12s %12s %12s %10s\n", what, ms, c.config().cma_bytes,
                run_of(c.config().cma_reduce_bytes, c.config().cma_reduce_until_bytes).c_str(),
                run_of(c.config().cma_reduce_scatter_bytes, c.config().cma_reduce_scatter_until_bytes).c_str(),
                c.config().direct_bytes,
                run_of(c.config().cma_reduce_root_bytes, c.config().cma_reduce_root_until_bytes).c_str(),
                run_of(c.config().cma_all_gather_bytes, c.config().cma_all_gather_until_bytes).c_str(),
                run_of(c.config().cma_broadcast_bytes, c.config().cma_broadcast_until_bytes).c_str(),
                run_of(c.config().recursive_doubling_bytes, c.config().recursive_doubling_until_bytes).c_str());
  std::fflush(stdout);  // the fork's child leaves by _exit
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 5, ranks = 2;
  dcomm_cli::Cli cli("dcomm-host-tuning", "[--reps K] [--ranks N]",
                     "The host tuning's measurement on this machine, timed.");
  cli.flag("--reps", "K", "repetitions (default 5)", [&](const std::string& v) {
    reps = std::atoi(v.c_str());
    return reps >= 1 ? "" : "K must be at least 1";
  });
  cli.flag("--ranks", "N", "ranks whose set-up is timed (default 2; 0: none)", [&](const std::string& v) {
    ranks = std::atoi(v.c_str());
    return ranks == 0 || (ranks >= 2 && ranks <= 64) ? "" : "N must be 0 or 2 to 64";
  });
  cli.parse(argc, argv);
  if (ranks > 0) {  // forked before anything of dcomm exists in this process
    const std::string cache = "/tmp/dcomm-host-tuning-bench-" + std::to_string(getpid());
    std::remove(cache.c_str());
    std::printf(
        "# a set-up of %d ranks (processes), the slowest rank's; the DCOMM_*_BYTES it took (CMA_REDUCE*: single\n"
        "# copy through the kernel from the first size, behind the ring again from the second; ALL_GATHER,\n"
        "# BROADCAST: single copy's run up to 2M; REC_DOUBL.: all_reduce's recursive doubling's run up to\n"
        "# 512K; 'rule': not timed yet, DCOMM_CMA_BYTES's rule or the cost model's)\n"
        "# %-30s %8s %10s %12s %14s %8s %12s %12s %12s %10s\n",
        ranks, "tuning", "ms", "CMA", "CMA_REDUCE", "CMA_REDUCE_SC.", "DIRECT", "CMA_RED_ROOT", "ALL_GATHER",
        "BROADCAST", "REC_DOUBL.");
    // Off; with no cache; then from the cache, set-up after set-up (each goes on with what the
    // budget left), until the shape is known whole or has had its tries, and once more: a set-up
    // that times the shape's pace only.
    const char* passes[4] = {"off (DCOMM_HOST_TUNING=off)", "measured (no cache)", "read from the cache",
                             "known: its pace only"};
    std::fflush(stdout);  // not copied into the children
    const char* what = passes[0];
    setenv("DCOMM_HOST_TUNING", "off", 1);
    for (int set_ups = 0; set_ups < 3 + dcomm::kShapeTries; ++set_ups) {
      if (run_forked_with_id(ranks, [&](int r, const std::string& id) { return set_up(r, ranks, id, what); }) != 0)
        return std::fprintf(stderr, "dcomm-host-tuning: a set-up failed\n"), 1;
      if (what == passes[3]) break;
      unsetenv("DCOMM_HOST_TUNING");
      setenv("DCOMM_HOST_TUNING_CACHE", cache.c_str(), 1);
      std::string why;
      const auto cached = dcomm::read_host_tuning(cache, dcomm::host_signature(), &why);
      const dcomm::ShapeTuning* shape = cached ? cached->for_shape(std::to_string(ranks) + "-processes") : nullptr;
      what = what == passes[0]                                                                      ? passes[1]
             : shape && shape->pace_ns && (shape->complete() || shape->tries >= dcomm::kShapeTries) ? passes[3]
                                                                                                    : passes[2];
    }
    std::remove(cache.c_str());
    unsetenv("DCOMM_HOST_TUNING_CACHE");
  }
  std::printf("# %s\n# %8s %10s %12s %12s\n", dcomm::host_signature().c_str(), "ms", "cma_us", "copy_GB/s",
              "cma_bytes");
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = dcomm::measure_host();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!m.ok()) return std::fprintf(stderr, "dcomm-host-tuning: %s\n", m.status().message().c_str()), 1;
    std::printf("  %8.2f %10.3f %12.2f %12zu\n", ms, m->cma_us, m->copy_gbs, dcomm::cma_bytes_for(*m));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const dcomm::HostTuning t = dcomm::host_tuning();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("# a set-up's host_tuning(): %.2f ms, %s; DCOMM_CMA_BYTES %zu\n", ms, t.source.c_str(), t.cma_bytes);
  return 0;
}
