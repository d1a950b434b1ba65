// The serial queue under the communicator's executor and the torch backend: jobs in submission
// order, one at a time; inline on the caller's thread only when idle; stop() runs what is left.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <dcomm/core/serial_queue.hpp>

using dcomm::SerialQueue;

TEST_CASE("serial queue: submission order, one job at a time, inline only when idle") {
  std::vector<int> order;
  std::atomic<int> running{0}, most{0};
  auto job = [&](int k) {
    return [&, k] {
      most = std::max(most.load(), ++running);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      order.push_back(k);  // jobs never overlap, so no lock
      --running;
    };
  };
  {
    SerialQueue q;
    const auto caller = std::this_thread::get_id();
    std::thread::id ran_on;
    CHECK(q.submit([&] { ran_on = std::this_thread::get_id(); }, true));  // idle: here
    CHECK(ran_on == caller);
    CHECK_FALSE(q.worker_started());
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    CHECK_FALSE(q.submit([gate] { gate.wait(); }, false));  // to the worker, which it holds up
    CHECK(q.worker_started());
    for (int k = 0; k < 50; ++k) CHECK_FALSE(q.submit(job(k), k % 2 == 0));  // queued: never inline
    release.set_value();
    q.stop();  // runs what is queued
  }
  CHECK(most.load() == 1);
  REQUIRE(order.size() == 50);
  for (int k = 0; k < 50; ++k) CHECK(order[static_cast<size_t>(k)] == k);
}

// After stop(), the queue still takes jobs: a queued one starts a new worker, which runs every
// later one too (a worker that had exited must not be mistaken for a live one).
TEST_CASE("serial queue: jobs after stop() still run") {
  SerialQueue q;
  std::atomic<int> ran{0};
  q.stop();  // nothing to stop
  for (int round = 0; round < 3; ++round) {
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    CHECK_FALSE(q.submit([gate] { gate.wait(); }, false));
    CHECK_FALSE(q.submit([&] { ++ran; }, true));  // the worker is busy: queued
    release.set_value();
    q.stop();
    CHECK(ran.load() == round + 1);
  }
  // Two jobs one after the other once stopped: the worker the first starts must stay for the
  // second.
  for (int k = 0; k < 2; ++k) {
    std::promise<void> done;
    CHECK_FALSE(q.submit([&] { done.set_value(); }, false));
    CHECK(done.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  }
}
