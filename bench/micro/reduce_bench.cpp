// Host reduction throughput per type, next to memcpy in the same run. bytes_per_second counts
// memory traffic: a reduction reads two inputs and writes one output (3 x bytes), memcpy reads
// one and writes one (2 x bytes).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include <dcomm/reduce/host_reducer.hpp>

using namespace dcomm;

namespace {
void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * bytes));
}

void BM_Reduce(benchmark::State& state, DataType type, ReduceOp op) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / size_of(type);
  std::vector<char> a(bytes, 1), b(bytes, 1), out(bytes, 0);
  Reducer r = *make_host_reducer(type, op, 2);
  for (auto _ : state) {
    r.reduce(out.data(), a.data(), b.data(), count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * bytes));
}

// 256 KiB stays in cache (the slot-sized work of a collective); 64 MiB goes to memory.
void sizes(benchmark::internal::Benchmark* b) { b->Arg(256 << 10)->Arg(64 << 20); }
}  // namespace

BENCHMARK(BM_Memcpy)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, int8_sum, DataType::kInt8, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, uint8_max, DataType::kUint8, ReduceOp::kMax)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, int32_sum, DataType::kInt32, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, uint32_min, DataType::kUint32, ReduceOp::kMin)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, int64_sum, DataType::kInt64, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, uint64_prod, DataType::kUint64, ReduceOp::kProd)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float16_sum, DataType::kFloat16, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, bfloat16_sum, DataType::kBfloat16, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float32_sum, DataType::kFloat32, ReduceOp::kSum)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float32_max, DataType::kFloat32, ReduceOp::kMax)->Apply(sizes);
BENCHMARK_CAPTURE(BM_Reduce, float64_sum, DataType::kFloat64, ReduceOp::kSum)->Apply(sizes);
