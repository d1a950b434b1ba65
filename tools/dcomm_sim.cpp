// dcomm-sim: the all_reduce schedules dcomm runs (algo/schedule.hpp), simulated at scale
// without moving data: predicted time per algorithm by size and rank count, with every
// rank's result checked symbolically.
//
//   dcomm-sim                      1,024 and 65,536 ranks on 8-GPU hosts, 400 Gb/s per NIC
//   dcomm-sim -n 8,64 -s 8,1M      other rank counts and sizes
//   dcomm-sim --local 8            one host of 8 CPU ranks with the cost model's parameters for
//                                  this machine (compare with dcomm-bench -N 8 and DCOMM_ALGO)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dcomm/comm/cost_model.hpp>
#include <dcomm/sim/simulator.hpp>

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
}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks{1024, 65536};
  std::vector<size_t> sizes{8, 1 << 20, size_t{1} << 30};
  SimNetwork net;
  bool local = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n" && i + 1 < argc) {
      ranks.clear();
      for (auto& r : split(argv[++i])) ranks.push_back(std::atoi(r.c_str()));
    } else if (a == "-s" && i + 1 < argc) {
      sizes.clear();
      for (auto& s : split(argv[++i])) sizes.push_back(bytes_of(s));
    } else if (a == "--local" && i + 1 < argc) {
      local = true;
      int n = std::atoi(argv[++i]);
      ranks = {n};
      sizes = {8, 512, 4096, 32768, 512 << 10, 4 << 20, 32 << 20};
      // One host; the cost model's parameters with n ranks on this machine's cores.
      const double load = static_cast<double>(n) / std::max(1, std::atoi(std::getenv("DCOMM_SIM_CORES") ? std::getenv("DCOMM_SIM_CORES") : "2"));
      LinkModel m = LinkModel::for_load(load);
      net.ranks_per_host = n;
      net.local_alpha_us = m.alpha_us;
      net.local_bytes_per_us = 1.0 / m.beta_us_per_byte;
      net.reduce_bytes_per_us = 1.0 / m.gamma_us_per_byte;
    } else {
      std::fprintf(stderr, "usage: dcomm-sim [-n ranks,...] [-s bytes,...] [--local ranks]\n");
      return 2;
    }
  }
  if (local)
    std::printf("# one host, %d ranks: step %.2f us, %.2f GB/s a link, reduction %.2f GB/s (cost model for this machine)\n",
                ranks[0], net.local_alpha_us, net.local_bytes_per_us / 1e3, net.reduce_bytes_per_us / 1e3);
  else
    std::printf("# %d ranks per host; within a host %.1f us, %.0f GB/s; between hosts %.1f us, %d NICs of %.0f GB/s; "
                "fat tree, contention at the NICs\n",
                net.ranks_per_host, net.local_alpha_us, net.local_bytes_per_us / 1e3, net.net_alpha_us, net.nics_per_host,
                net.nic_bytes_per_us / 1e3);
  std::printf("# all_reduce, float32; predicted time in us; every rank's result checked symbolically ('ok')\n");
  std::printf("%8s %9s %14s %14s %14s %14s\n", "ranks", "size", "ring", "rec_doubling", "rabenseifner", "tree");
  int failures = 0;
  for (int n : ranks) {
    for (size_t bytes : sizes) {
      const size_t count = std::max<size_t>(bytes / 4, 1);
      std::printf("%8d %9s", n, human(bytes).c_str());
      auto run = [&](auto gen) {
        auto r = simulate(schedules_for(n, gen), SimCollective::kAllReduce, count, 4, 0, net);
        if (!r.error.empty()) {
          std::printf(" %14s", "FAILED");
          std::fprintf(stderr, "dcomm-sim: %d ranks, %s: %s\n", n, human(bytes).c_str(), r.error.c_str());
          ++failures;
        } else {
          std::printf(" %11.1f ok", r.time_us);
        }
      };
      if (n <= 4096) {
        run([&](int w, int x) { return schedule_ring_all_reduce(w, x, count); });
      } else {
        // Every ring step is alike: one chunk to the next rank, which is off the host for one
        // rank in ranks_per_host. Timed from the schedule's shape, not checked symbolically
        // (n chunks on n ranks would be n^2 pieces).
        const double chunk = static_cast<double>(count) * 4 / n;
        const double step = net.net_alpha_us + chunk / net.nic_bytes_per_us;
        std::printf(" %11.1f an", 2.0 * (n - 1) * step);
      }
      run([&](int w, int x) { return schedule_recursive_doubling(w, x, count); });
      run([&](int w, int x) { return schedule_rabenseifner(w, x, count); });
      run([&](int w, int x) { return schedule_tree_all_reduce(w, x, count); });
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("# ok: simulated and checked; an: the ring above 4,096 ranks, timed analytically; the tree is simulated "
              "unpipelined (dcomm's trees pipeline slices)\n");
  return failures ? 1 : 0;
}
