// Two ranks as threads, one all_reduce: proves the package's target carries what a user needs.
#include <dcomm/dcomm.hpp>

#include <atomic>
#include <thread>

int main() {
  auto comms = dcomm::Communicator::create_local(2);
  if (!comms.ok()) return 1;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::vector<float> v(100, static_cast<float>(r + 1));
      auto s = (*comms)[static_cast<size_t>(r)]->all_reduce(std::span(v), dcomm::ReduceOp::kSum);
      if (!s.ok() || v[99] != 3.0f) ++wrong;
    });
  for (auto& t : threads) t.join();
  return wrong;
}
