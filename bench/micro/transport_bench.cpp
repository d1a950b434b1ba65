// Ping-pong between two ranks (threads of this process) per transport: latency at 8 B and
// bandwidth at 1 MiB (bytes_per_second counts both directions), and all_reduce latency at
// 8 B. Rank 1 echoes on its own thread; a message whose first byte is 1 tells it to stop.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include <dcomm/dcomm.hpp>

using namespace dcomm;

namespace {
Config config_for(TransportChoice t) {
  Config c;
  c.transport = t;
  c.timeout = std::chrono::seconds(30);
  return c;
}

void BM_PingPong(benchmark::State& state, TransportChoice transport) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto comms = Communicator::create_local(2, config_for(transport));
  if (!comms.ok()) return state.SkipWithError(comms.status().message().c_str());
  Communicator& a = *(*comms)[0];
  Communicator& b = *(*comms)[1];
  std::thread echo([&] {
    std::vector<uint8_t> buf(bytes);
    for (;;) {
      if (!b.recv(std::span(buf), 0).ok() || buf[0] == 1) return;
      if (!b.send(std::span(buf), 0).ok()) return;
    }
  });
  std::vector<uint8_t> buf(bytes, 0);
  for (auto _ : state) {
    if (!a.send(std::span(buf), 1).ok() || !a.recv(std::span(buf), 1).ok()) {
      state.SkipWithError("ping-pong failed");
      break;
    }
  }
  buf[0] = 1;
  (void)a.send(std::span(buf), 1);
  echo.join();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * bytes));
}

void BM_AllReduce8B(benchmark::State& state, TransportChoice transport) {
  auto comms = Communicator::create_local(2, config_for(transport));
  if (!comms.ok()) return state.SkipWithError(comms.status().message().c_str());
  Communicator& a = *(*comms)[0];
  Communicator& b = *(*comms)[1];
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    double v[1] = {1};
    // The peer keeps calling until told to stop through a flag it reads between calls; the
    // last call of rank 0 below is matched by one more call here.
    while (!stop.load()) (void)b.all_reduce(std::span(v), ReduceOp::kSum);
  });
  double v[1] = {1};
  for (auto _ : state) (void)a.all_reduce(std::span(v), ReduceOp::kSum);
  stop = true;
  (void)a.all_reduce(std::span(v), ReduceOp::kSum);
  peer.join();
}
}  // namespace

BENCHMARK_CAPTURE(BM_PingPong, inproc, TransportChoice::kInproc)->Arg(8)->Arg(1 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_PingPong, shm, TransportChoice::kShm)->Arg(8)->Arg(1 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_PingPong, tcp, TransportChoice::kTcp)->Arg(8)->Arg(1 << 20)->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduce8B, inproc, TransportChoice::kInproc)->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduce8B, shm, TransportChoice::kShm)->UseRealTime();
BENCHMARK_CAPTURE(BM_AllReduce8B, tcp, TransportChoice::kTcp)->UseRealTime();
