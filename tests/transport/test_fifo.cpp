#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <dcomm/transport/fifo.hpp>
#include <dcomm/transport/transport.hpp>

using namespace dcomm;

TEST_CASE("fifo: slots fill, wrap and keep their sizes") {
  Config c;
  c.slot_bytes = 256;
  c.slots = 3;
  HeapFifo mem(c);
  FifoRef f = mem.fifo;
  REQUIRE(f.valid());
  for (uint64_t round = 0; round < 10; ++round) {
    for (int i = 0; i < 3; ++i) {
      REQUIRE(f.writable());
      f.data(f.tail(std::memory_order_relaxed))[0] = static_cast<char>(round * 3 + static_cast<uint64_t>(i));
      f.commit(static_cast<uint64_t>(i) + 1);
    }
    CHECK_FALSE(f.writable());  // three slots, all full
    for (int i = 0; i < 3; ++i) {
      REQUIRE(f.readable());
      uint64_t h = f.head(std::memory_order_relaxed);
      CHECK(f.size(h) == static_cast<uint64_t>(i) + 1);
      CHECK(f.data(h)[0] == static_cast<char>(round * 3 + static_cast<uint64_t>(i)));
      f.release();
    }
    CHECK_FALSE(f.readable());
  }
  CHECK_FALSE(f.producer_closed());
  f.close_producer();
  CHECK(f.producer_closed());
}

TEST_CASE("fifo: a producer and a consumer thread pass a million slots in order") {
  Config c;
  c.slot_bytes = 64;
  c.slots = 4;
  HeapFifo mem(c);
  FifoRef f = mem.fifo;
  const uint64_t n = 1'000'000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < n; ++i) {
      while (!f.writable()) std::this_thread::yield();
      std::memcpy(f.data(f.tail(std::memory_order_relaxed)), &i, sizeof i);
      f.commit(sizeof i);
    }
  });
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    while (!f.readable()) std::this_thread::yield();
    uint64_t v;
    std::memcpy(&v, f.data(f.head(std::memory_order_relaxed)), sizeof v);
    bad += v != i;
    f.release();
  }
  producer.join();
  CHECK(bad == 0);
}
