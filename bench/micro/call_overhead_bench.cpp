// What hardening adds to every call, measured alone (an 8-byte all_reduce takes ~0.25-0.4 us
// here): the one-thread-at-a-time guard, the call's stamp and its publication for peers, and
// the stamp written with a slot and checked when it is taken, next to a slot without them.
#include <benchmark/benchmark.h>

#include <atomic>
#include <vector>

#include <dcomm/comm/communicator.hpp>

using namespace dcomm;

static void BM_CallGuard(benchmark::State& state) {
  std::atomic<bool> busy{false};
  for (auto _ : state) {
    detail::CallGuard g(busy);
    benchmark::DoNotOptimize(g.entered());
  }
}
BENCHMARK(BM_CallGuard);

static void BM_StampAndPublish(benchmark::State& state) {
  AbortState abort;
  uint32_t seq = 0;
  for (auto _ : state) {
    CallStamp s = call_stamp(OpKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 2, 0, seq++);
    abort.publish_call(s, true);
    benchmark::DoNotOptimize(s);
    abort.end_call();
  }
}
BENCHMARK(BM_StampAndPublish);

// A producer commits an 8-byte slot and the consumer takes it: with the stamp written and
// compared, and without.
template <bool kStamped>
static void BM_SlotRoundTrip(benchmark::State& state) {
  std::vector<char> mem(fifo_bytes(512, 8) + 64);
  FifoRef f = FifoRef::initialize(mem.data(), 512, 8);
  const CallStamp stamp = call_stamp(OpKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 2, 0, 7);
  uint64_t head = 0, value = 42;
  size_t bad = 0;
  for (auto _ : state) {
    std::memcpy(f.payload(f.tail(std::memory_order_relaxed), 8), &value, 8);
    if constexpr (kStamped) f.commit(8, stamp);
    else f.commit(8);
    if (f.ready(head)) {
      if constexpr (kStamped) bad += !(f.stamp(head) == stamp);
      benchmark::DoNotOptimize(f.payload(head, 8));
      f.publish_head(++head);
    }
  }
  benchmark::DoNotOptimize(bad);
}
BENCHMARK_TEMPLATE(BM_SlotRoundTrip, false);
BENCHMARK_TEMPLATE(BM_SlotRoundTrip, true);
