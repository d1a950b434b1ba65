// Threads as ranks (Gloo's test/base_test.h pattern): make a communicator per rank in this
// process and run a function on each rank's own thread.
#pragma once

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <dcomm/dcomm.hpp>

namespace dcomm_test {

inline dcomm::Config test_config(dcomm::TransportChoice transport = dcomm::TransportChoice::kAuto,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  dcomm::Config c;
  c.slot_bytes = 256;  // tiny slots: every test count spans several slots and rounds
  c.slots = 4;
  c.timeout = timeout;
  c.transport = transport;
  return c;
}

using Comms = std::vector<std::unique_ptr<dcomm::Communicator>>;

template <class F>
void on_ranks(Comms& comms, F f) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) threads.emplace_back([&, r] { f(*comms[r]); });
  for (auto& t : threads) t.join();
}

}  // namespace dcomm_test
