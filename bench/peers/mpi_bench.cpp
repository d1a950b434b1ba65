// The same measurement as dcomm-bench through MPI, for side-by-side runs: float32 buffers
// allocated and touched once and reused for every size (so page faults are not timed), mean
// time per iteration of the slowest rank, nccl-tests' busbw factors.
//
//   mpirun -np 2 mpi-bench [all_reduce|reduce_scatter|all_gather|broadcast] [-b min] [-e max]
//                          [-f factor] [-n iters] [-w warmup]
// Prints: size_bytes time_us algbw_GBps busbw_GBps (one line per size; '#' comments).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {
size_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K') v *= 1024;
  else if (*end == 'M') v *= 1024 * 1024;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
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
  int i = 1;
  if (i < argc && argv[i][0] != '-') coll = argv[i++];
  for (; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "-b") min_b = parse_bytes(argv[i + 1]);
    else if (f == "-e") max_b = parse_bytes(argv[i + 1]);
    else if (f == "-f") factor = std::atof(argv[i + 1]);
    else if (f == "-n") iters = std::atoi(argv[i + 1]);
    else if (f == "-w") warmup = std::atoi(argv[i + 1]);
  }
  std::vector<float> send(max_b / 4 + 16, 1.0f), recv(max_b / 4 + 16, 0.0f);
  double bus = coll == "all_reduce" ? 2.0 * (n - 1) / n : coll == "broadcast" ? 1.0 : double(n - 1) / n;
  if (rank == 0) std::printf("# mpi-bench %s, %d ranks\n# size_bytes time_us algbw_GBps busbw_GBps\n", coll.c_str(), n);
  for (size_t bytes = min_b; bytes <= max_b; bytes = static_cast<size_t>(bytes * factor)) {
    size_t count = std::max<size_t>(bytes / 4, 1);
    size_t per = std::max<size_t>(count / static_cast<size_t>(n), 1);
    const int which = coll == "all_reduce" ? 0 : coll == "reduce_scatter" ? 1 : coll == "all_gather" ? 2 : 3;
    auto once = [&] {  // no string compares inside the timing
      if (which == 0)
        MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (which == 1)
        MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(per), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (which == 2)
        MPI_Allgather(send.data(), static_cast<int>(per), MPI_FLOAT, recv.data(), static_cast<int>(per), MPI_FLOAT,
                      MPI_COMM_WORLD);
      else MPI_Bcast(recv.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
    };
    for (int k = 0; k < warmup; ++k) once();
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int k = 0; k < iters; ++k) once();
    double t = (MPI_Wtime() - t0) / iters * 1e6, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    size_t shown = coll == "all_reduce" || coll == "broadcast" ? count * 4 : per * static_cast<size_t>(n) * 4;
    double algbw = static_cast<double>(shown) / tmax / 1e3;
    if (rank == 0) std::printf("%zu %.3f %.3f %.3f\n", shown, tmax, algbw, algbw * bus);
    std::fflush(stdout);
    if (static_cast<size_t>(bytes * factor) <= bytes) break;
  }
  MPI_Finalize();
  return 0;
}
