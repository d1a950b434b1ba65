// One-sided put + signal on device memory (DeviceOneSided) against the device communicator's
// send/recv (issue 38's target: at least 80% of send/recv's bandwidth at 16 MiB), 2 ranks as
// threads sharing GPU 0 (what one GPU can show: NVLink between two GPUs is not at hand), and
// a plain device-to-device copy of the same bytes beside them (the ceiling: a put is that
// copy plus a one-thread signal kernel). Rank 0 moves `iters` messages of each size to rank 1
// each way; rank 1 waits for them on its stream. Alternating passes; medians. Exit 77 without
// a GPU.
//   dcomm-device-one-sided-bench [passes (3)] [max bytes (64M)]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/comm/device_one_sided.cuh>
#include <dcomm/dcomm.cuh>

#include "forked.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Seconds for body() and its stream's work, the slower rank's.
template <class F>
double timed(dcomm::Communicator& c, cudaStream_t s, F&& body) {
  return slowest_seconds(c, [&]() -> dcomm::Status {
    DCOMM_RETURN_IF_ERROR(body());
    return dcomm::cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  });
}

int run_rank(dcomm::Communicator& c, int passes, size_t max_bytes) {
  const int rank = c.rank();
  const bool puts_first = std::getenv("DCOMM_BENCH_PUTS_FIRST") != nullptr;
  cudaSetDevice(0);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  char *window = nullptr, *src = nullptr, *copy = nullptr;
  if (cudaMalloc(&window, max_bytes) != cudaSuccess || cudaMalloc(&src, max_bytes) != cudaSuccess ||
      cudaMalloc(&copy, max_bytes) != cudaSuccess)
    return std::fprintf(stderr, "rank %d: cudaMalloc failed\n", rank), 5;
  cudaMemset(src, rank + 1, max_bytes);
  cudaDeviceSynchronize();
  // DCOMM_BENCH_NO_P2P=1: no device communicator beside the windows (and no send/recv column).
  const bool p2p_too = std::getenv("DCOMM_BENCH_NO_P2P") == nullptr;
  dcomm::Result<std::unique_ptr<dcomm::DeviceCommunicator>> dev = std::unique_ptr<dcomm::DeviceCommunicator>();
  if (p2p_too) dev = dcomm::DeviceCommunicator::create(c, 0);
  if (!dev.ok()) return std::fprintf(stderr, "%s\n", dev.status().message().c_str()), 5;
  auto one = dcomm::DeviceOneSided::create(c, 0);
  if (!one.ok()) return std::fprintf(stderr, "%s\n", one.status().message().c_str()), 5;
  auto win = (*one)->register_window(window, max_bytes);
  if (!win.ok()) return std::fprintf(stderr, "%s\n", win.status().message().c_str()), 5;
  if (rank == 0)
    std::printf("%10s %6s %16s %16s %16s %8s %8s\n", "size (B)", "iters", "send/recv GB/s", "put+signal GB/s",
                "D2D copy GB/s", "put/p2p", "put/copy");
  for (size_t bytes = 1 << 20; bytes <= max_bytes; bytes *= 4) {
    const int iters = 20;
    std::vector<double> t_p2p, t_put, t_copy;
    for (int p = 0; p < passes; ++p) {
      if (p2p_too)
        t_p2p.push_back(timed(c, s, [&]() -> dcomm::Status {
          for (int i = 0; i < iters; ++i)
            DCOMM_RETURN_IF_ERROR(rank == 0 ? (*dev)->send(src, bytes, dcomm::DataType::kUint8, 1, s)
                                            : (*dev)->recv(window, bytes, dcomm::DataType::kUint8, 0, s));
          return {};
        }));
      t_put.push_back(timed(c, s, [&]() -> dcomm::Status {
        // DCOMM_BENCH_PUTS_FIRST=1: rank 1 enqueues its wait only once rank 0's puts are
        // enqueued and done (a diagnosis: whether a wait already spinning holds the puts back).
        if (rank == 1) {
          if (puts_first) c.barrier().ignore();
          return (*one)->wait({{iters, 0, 0, 0}}, s);
        }
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) DCOMM_RETURN_IF_ERROR((*one)->put(src, bytes, 1, *win, 0, 0, 0, s));
        dcomm::Status done = dcomm::cuda_status(cudaStreamSynchronize(s), "cudaStreamSynchronize (puts)");
        const double took = std::chrono::duration<double>(Clock::now() - t0).count();
        if (took > 1.0)
          std::fprintf(stderr, "rank 0: %d puts of %zu bytes took %.1f s on its stream\n", iters, bytes, took);
        if (puts_first) c.barrier().ignore();
        return done;
      }));
      t_copy.push_back(timed(c, s, [&]() -> dcomm::Status {
        for (int i = 0; rank == 0 && i < iters; ++i)
          DCOMM_RETURN_IF_ERROR(
              dcomm::cuda_status(cudaMemcpyAsync(copy, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"));
        return {};
      }));
    }
    const double gb = static_cast<double>(bytes) * iters / 1e9;
    const double p2p = p2p_too ? gb / median(t_p2p) : 0.0, put = gb / median(t_put), cp = gb / median(t_copy);
    if (rank == 0)
      std::printf("%10zu %6d %16.1f %16.1f %16.1f %8.2f %8.2f\n", bytes, iters, p2p, put, cp, put / p2p, put / cp);
  }
  c.barrier().ignore();
  one->reset();
  dev->reset();
  cudaFree(window);
  cudaFree(src);
  cudaFree(copy);
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int passes = 3;
  size_t max_bytes = 64 << 20;
  if (!count_and_max_bytes(argc, argv, &passes, &max_bytes)) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 77;
  }
  auto comms = dcomm::Communicator::create_local(2);
  if (!comms.ok()) return std::fprintf(stderr, "%s\n", comms.status().message().c_str()), 4;
  std::vector<int> rc(2, 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back(
        [&, r] { rc[static_cast<size_t>(r)] = run_rank(*(*comms)[static_cast<size_t>(r)], passes, max_bytes); });
  for (auto& t : ranks) t.join();
  return std::max(rc[0], rc[1]);
}
