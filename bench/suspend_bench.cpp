// What suspend() frees and what resume() costs (issue 38): N ranks as forked processes on this
// host (shared memory between them), every link connected (an exchange with every peer) and
// the scratch grown (an all_reduce of 64 MiB). Then each rank suspends; measured: what
// mem_stats() called suspendable (summed over ranks), the resident memory the ranks gave back
// (VmRSS, summed) and the shared memory this host gave back (/dev/shm's used bytes, which
// count files already unlinked but still mapped) plus the heap the ranks gave back (RssAnon):
// their ratio to suspendable is the target, at least 90%;
// then resume() (the slowest rank's time),
// and the first all_reduce after it against a warm one.
//   dcomm-suspend-bench [ranks (2)] [rounds (3)]
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <dcomm/dcomm.hpp>

#include "forked.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// A line of /proc/self/status in bytes (VmRSS: all resident; RssAnon: the heap's part).
long long status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string key;
  long long kb = 0;
  while (f >> key)
    if (key == field) return f >> kb, kb * 1024;
  return 0;
}

long long shm_used_bytes() {
  struct statvfs s {};
  if (statvfs("/dev/shm", &s) != 0) return 0;
  return static_cast<long long>((s.f_blocks - s.f_bfree) * s.f_frsize);
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sum (or max) over ranks of one value.
double over_ranks(dcomm::Communicator& c, double v, dcomm::ReduceOp op) {
  c.all_reduce(&v, &v, 1, dcomm::DataType::kFloat64, op).ignore();
  return v;
}

int run_rank(int rank, int n, const std::string& id_text, int rounds) {
  auto id = dcomm::UniqueId::parse(id_text);
  if (!id.ok()) return 4;
  auto comm = dcomm::Communicator::init(rank, n, *id);
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().message().c_str()), 4;
  dcomm::Communicator& c = **comm;
  std::vector<float> big(16u << 20, 1.f), small(256, 1.f);
  std::vector<int> mine(1, rank), theirs(static_cast<size_t>(n));
  auto warm_up = [&] {
    std::vector<dcomm::P2POp> ops;
    for (int p = 0; p < n; ++p)
      if (p != rank) {
        ops.push_back(dcomm::P2POp::send(mine.data(), 1, dcomm::DataType::kInt32, p));
        ops.push_back(dcomm::P2POp::recv(&theirs[static_cast<size_t>(p)], 1, dcomm::DataType::kInt32, p));
      }
    dcomm::Status s = c.p2p(std::move(ops));
    if (s.ok()) s = c.all_reduce(big.data(), big.data(), big.size(), dcomm::DataType::kFloat32, dcomm::ReduceOp::kMax);
    return s;
  };
  auto timed_small = [&] {
    c.barrier().ignore();
    auto t = Clock::now();
    c.all_reduce(small.data(), small.data(), small.size(), dcomm::DataType::kFloat32, dcomm::ReduceOp::kMax).ignore();
    return over_ranks(c, since(t), dcomm::ReduceOp::kMax);
  };
  if (rank == 0)
    std::printf("%6s %6s %14s %14s %14s %8s %12s %14s %12s\n", "ranks", "round", "suspendable", "rss freed",
                "shm+heap freed", "freed", "resume (ms)", "1st call (us)", "warm (us)");
  for (int round = 0; round < rounds; ++round) {
    if (dcomm::Status s = warm_up(); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 5;
    const double warm = timed_small();
    c.barrier().ignore();
    const double suspendable = over_ranks(c, static_cast<double>(c.mem_stats().suspendable), dcomm::ReduceOp::kSum);
    const long long rss0 = status_bytes("VmRSS:"), anon0 = status_bytes("RssAnon:"), shm0 = shm_used_bytes();
    if (dcomm::Status s = c.suspend(); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 6;
    // Every rank has suspended before anyone looks: the shared files go when both ends unmap.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const long long shm1 = shm_used_bytes();
    const double rss_freed = static_cast<double>(rss0 - status_bytes("VmRSS:"));
    const double heap_freed = static_cast<double>(anon0 - status_bytes("RssAnon:"));
    // A collective would be refused while suspended: the sums come after resume.
    auto t = Clock::now();
    if (dcomm::Status s = c.resume(); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 7;
    const double resume_s = over_ranks(c, since(t), dcomm::ReduceOp::kMax);
    const double first = timed_small();
    const double rss_sum = over_ranks(c, rss_freed, dcomm::ReduceOp::kSum);
    const double heap_sum = over_ranks(c, heap_freed, dcomm::ReduceOp::kSum);
    // Every rank read /dev/shm before the barrier in suspend() (nothing was released yet) and
    // again 0.5 s after its own release: the rank that looked last saw the most go.
    const double shm_freed = over_ranks(c, static_cast<double>(shm0 - shm1), dcomm::ReduceOp::kMax);
    // Each FIFO file is mapped by both of its ranks, so VmRSS counts it twice; what the host got
    // back is /dev/shm's drop and the heaps' (the scratch).
    const double freed = shm_freed + heap_sum;
    if (rank == 0)
      std::printf("%6d %6d %12.1f M %12.1f M %12.1f M %7.0f%% %12.2f %14.1f %12.1f\n", n, round, suspendable / 1048576,
                  rss_sum / 1048576, freed / 1048576, suspendable > 0 ? 100 * freed / suspendable : 0, resume_s * 1e3,
                  first * 1e6, warm * 1e6);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  if (n < 2 || rounds < 1) return std::fprintf(stderr, "usage: %s [ranks >= 2] [rounds >= 1]\n", argv[0]), 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // Forked before anything of dcomm exists in this process; rank 0 makes the id.
  return run_forked_with_id(n, [&](int r, const std::string& id_text) { return run_rank(r, n, id_text, rounds); });
}
