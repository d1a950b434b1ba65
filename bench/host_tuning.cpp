// dcomm-host-tuning: what the host tuning (comm/host_tuning.hpp) measures on this machine, how
// long it takes, and what it chooses; run it beside a load (a memory-bandwidth hog, say) to see
// the values it would choose there.
//
//   dcomm-host-tuning [--reps K]
//
// Each repetition measures from scratch (no cache), as the first communicator on a host does;
// then the cache is read as later set-ups read it. Prints one line per repetition: the time
// taken, the two measured values and DCOMM_CMA_BYTES as it would be chosen.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <dcomm/dcomm.hpp>

#include "../tools/cli.hpp"

int main(int argc, char** argv) {
  int reps = 5;
  dcomm_cli::Cli cli("dcomm-host-tuning", "[--reps K]", "The host tuning's measurement on this machine, timed.");
  cli.flag("--reps", "K", "repetitions (default 5)", [&](const std::string& v) {
    reps = std::atoi(v.c_str());
    return reps >= 1 ? "" : "K must be at least 1";
  });
  cli.parse(argc, argv);
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
