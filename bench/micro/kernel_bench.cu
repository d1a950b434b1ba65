// Device reduction kernels per type, next to the device-to-device copy in the same run (the
// bound a streaming kernel can reach). bytes_per_second counts memory traffic: a reduction
// reads two inputs and writes one output (3 x bytes); a copy reads one and writes one (2 x).
// Times come from CUDA events around each launch (manual time). Without a GPU every benchmark
// says so and is skipped.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <dcomm/reduce/kernels.cuh>

using namespace dcomm;

namespace {
struct DeviceBuffers {
  void* a = nullptr;
  void* b = nullptr;
  void* out = nullptr;
  bool ok = false;
  explicit DeviceBuffers(size_t bytes) {
    ok = cudaMalloc(&a, bytes) == cudaSuccess && cudaMalloc(&b, bytes) == cudaSuccess &&
         cudaMalloc(&out, bytes) == cudaSuccess && cudaMemset(a, 0, bytes) == cudaSuccess &&
         cudaMemset(b, 0, bytes) == cudaSuccess;
  }
  ~DeviceBuffers() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(out);
  }
};

bool have_device(benchmark::State& state) {
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

// Times `launch` with events, one launch per iteration.
template <class Launch>
void timed(benchmark::State& state, Launch launch, double traffic_bytes) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  launch();  // warm up
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * traffic_bytes));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

void BM_DeviceMemcpy(benchmark::State& state) {
  if (!have_device(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  DeviceBuffers buf(bytes);
  if (!buf.ok) return state.SkipWithError("cudaMalloc failed");
  timed(
      state, [&] { cudaMemcpyAsync(buf.out, buf.a, bytes, cudaMemcpyDeviceToDevice); },
      2.0 * static_cast<double>(bytes));
}

void BM_CopyKernel(benchmark::State& state) {
  if (!have_device(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  DeviceBuffers buf(bytes);
  if (!buf.ok) return state.SkipWithError("cudaMalloc failed");
  timed(
      state, [&] { copy_on_device(buf.out, nullptr, buf.a, bytes, nullptr).ignore(); },
      2.0 * static_cast<double>(bytes));
}

void BM_ReduceKernel(benchmark::State& state, DataType type, ReduceOp op) {
  if (!have_device(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  DeviceBuffers buf(bytes);
  if (!buf.ok) return state.SkipWithError("cudaMalloc failed");
  const size_t count = bytes / size_of(type);
  timed(
      state, [&] { reduce_on_device(buf.out, nullptr, buf.a, buf.b, count, type, op, 2, nullptr).ignore(); },
      3.0 * static_cast<double>(bytes));
}

// 4 MiB stays in L2; 256 MiB goes to HBM (the issue's measure).
void sizes(benchmark::internal::Benchmark* b) { b->Arg(4 << 20)->Arg(256 << 20)->UseManualTime(); }
}  // namespace

BENCHMARK(BM_DeviceMemcpy)->Apply(sizes);
BENCHMARK(BM_CopyKernel)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float32_sum, DataType::kFloat32, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, bfloat16_sum, DataType::kBfloat16, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float16_sum, DataType::kFloat16, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float8_e4m3_sum, DataType::kFloat8E4M3, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float8_e5m2_sum, DataType::kFloat8E5M2, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float64_sum, DataType::kFloat64, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, int32_sum, DataType::kInt32, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, int8_max, DataType::kInt8, ReduceOp::kMax)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceKernel, float32_avg, DataType::kFloat32, ReduceOp::kAvg)->Apply(sizes);
