// The same measurement as dcomm-bench through MPI, for side-by-side runs: float32 buffers
// allocated and touched once and reused for every size (so page faults are not timed), mean
// time per iteration of the slowest rank, nccl-tests' busbw factors.
//
//   mpirun -np 2 mpi-bench [all_reduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all]
//                          [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-i 1]
// -i 1: in place (MPI_IN_PLACE), as dcomm-bench's in-place column; MPI_Bcast always is, and
// all_to_all stays out of place (dcomm's in-place column runs it out of place too). reduce's
// root is rank 0.
//   mpirun -np 2 mpi-bench ddp_step|fsdp_step [-B sizes] [-n iters] [-w warmup]
// Prints: size_bytes time_us algbw_GBps busbw_GBps (one line per size; '#' comments). The
// steps (step_shapes.hpp) print one line: the step's bytes, its time, and busbw with the
// all_reduce factor (a reduce_scatter and an all_gather move what one all_reduce does).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "step_shapes.hpp"

namespace {
// The slowest rank's mean time of `once` in us, after `warmup` untimed calls and a barrier.
template <class F>
double timed(F once, int iters, int warmup) {
  for (int k = 0; k < warmup; ++k) once();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int k = 0; k < iters; ++k) once();
  double t = (MPI_Wtime() - t0) / iters * 1e6, tmax = 0;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

// ddp_step: every bucket MPI_Iallreduce'd in place, then MPI_Waitall; fsdp_step: per unit,
// MPI_Reduce_scatter_block into the shard, then MPI_Allgather from the parameters' shard.
int run_step(const std::string& coll, const std::string& list, int iters, int warmup, int rank, int n) {
  const bool ddp = coll == "ddp_step";
  const auto bytes =
      step_shapes::parse_list(list.empty() ? (ddp ? step_shapes::kDdpDefault : step_shapes::kFsdpDefault) : list);
  if (bytes.empty()) return std::fprintf(stderr, "mpi-bench: -B: a list of sizes, e.g. 1M,25M or 8x32M\n"), 2;
  const auto counts = step_shapes::element_counts(bytes, sizeof(float), static_cast<size_t>(n));
  size_t total = 0;
  for (size_t k : counts) total += k;
  std::vector<float> full(total, 1.0f), grads(ddp ? 0 : total, 1.0f), shards(ddp ? 0 : 2 * total / n, 1.0f);
  std::vector<MPI_Request> reqs(counts.size());
  auto once = [&] {
    size_t at = 0;
    for (size_t b = 0; b < counts.size(); ++b) {
      const int k = static_cast<int>(counts[b]), per = k / n;
      if (ddp) {
        MPI_Iallreduce(MPI_IN_PLACE, full.data() + at, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &reqs[b]);
      } else {
        MPI_Reduce_scatter_block(grads.data() + at, shards.data() + at / n, per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allgather(shards.data() + (total + at) / n, per, MPI_FLOAT, full.data() + at, per, MPI_FLOAT,
                      MPI_COMM_WORLD);
      }
      at += counts[b];
    }
    if (ddp) MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  };
  const double tmax = timed(once, iters, warmup);
  const double algbw = static_cast<double>(total * sizeof(float)) / tmax / 1e3;
  if (rank == 0) {
    std::printf("# mpi-bench %s, %d ranks, %zu calls\n# size_bytes time_us algbw_GBps busbw_GBps\n", coll.c_str(), n,
                ddp ? counts.size() : 2 * counts.size());
    std::printf("%zu %.3f %.3f %.3f\n", total * sizeof(float), tmax, algbw, algbw * 2.0 * (n - 1) / n);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  std::string coll = "all_reduce";
  size_t min_b = 8, max_b = 256 << 20;
  double factor = 4;
  int iters = 20, warmup = 5;
  bool in_place = false;
  std::string steps;  // -B
  int i = 1;
  if (i < argc && argv[i][0] != '-') coll = argv[i++];
  for (; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "-b") min_b = step_shapes::parse_bytes(argv[i + 1]);
    else if (f == "-e") max_b = step_shapes::parse_bytes(argv[i + 1]);
    else if (f == "-f") factor = std::atof(argv[i + 1]);
    else if (f == "-n") iters = std::atoi(argv[i + 1]);
    else if (f == "-w") warmup = std::atoi(argv[i + 1]);
    else if (f == "-B") steps = argv[i + 1];
    else if (f == "-i") in_place = std::atoi(argv[i + 1]) != 0;
  }
  if (coll == "ddp_step" || coll == "fsdp_step") {
    const int rc = run_step(coll, steps, iters, warmup, rank, n);
    MPI_Finalize();
    return rc;
  }
  std::vector<float> send(max_b / 4 + 16, 1.0f), recv(max_b / 4 + 16, 0.0f);
  const bool whole = coll == "all_reduce" || coll == "broadcast" || coll == "reduce";  // size: one rank's vector
  double bus = coll == "all_reduce"                      ? 2.0 * (n - 1) / n
               : coll == "broadcast" || coll == "reduce" ? 1.0
                                                         : double(n - 1) / n;
  if (rank == 0)
    std::printf("# mpi-bench %s, %d ranks, %s\n# size_bytes time_us algbw_GBps busbw_GBps\n", coll.c_str(), n,
                in_place ? "in place" : "out of place");
  static const char* kColls[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"};
  const int which = static_cast<int>(std::find(std::begin(kColls), std::end(kColls), coll) - std::begin(kColls));
  if (which == 6) return std::fprintf(stderr, "mpi-bench: unknown collective %s\n", coll.c_str()), MPI_Finalize(), 2;
  for (size_t bytes = min_b; bytes <= max_b; bytes = static_cast<size_t>(bytes * factor)) {
    size_t count = std::max<size_t>(bytes / 4, 1);
    const int per = static_cast<int>(std::max<size_t>(count / static_cast<size_t>(n), 1));
    // In place: the one buffer is recv; MPI_IN_PLACE stands for the input where the standard has it.
    const void* in = in_place ? MPI_IN_PLACE : send.data();
    const int c = static_cast<int>(count);
    auto once = [&] {  // no string compares inside the timing
      if (which == 0) MPI_Allreduce(in, recv.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (which == 1) MPI_Reduce_scatter_block(in, recv.data(), per, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (which == 2) MPI_Allgather(in, per, MPI_FLOAT, recv.data(), per, MPI_FLOAT, MPI_COMM_WORLD);
      else if (which == 3) MPI_Bcast(recv.data(), c, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else if (which == 4)  // in place, the root reads MPI_IN_PLACE and the others their one buffer
        MPI_Reduce(in_place && rank != 0 ? recv.data() : in, recv.data(), c, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      else MPI_Alltoall(send.data(), per, MPI_FLOAT, recv.data(), per, MPI_FLOAT, MPI_COMM_WORLD);
    };
    const double tmax = timed(once, iters, warmup);
    size_t shown = whole ? count * 4 : static_cast<size_t>(per) * static_cast<size_t>(n) * 4;
    double algbw = static_cast<double>(shown) / tmax / 1e3;
    if (rank == 0) std::printf("%zu %.3f %.3f %.3f\n", shown, tmax, algbw, algbw * bus);
    std::fflush(stdout);
    if (static_cast<size_t>(bytes * factor) <= bytes) break;
  }
  MPI_Finalize();
  return 0;
}
