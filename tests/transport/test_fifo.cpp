#include <doctest/doctest.h>

#include <thread>
#include <vector>

#include <dcomm/transport/fifo.hpp>
#include <dcomm/transport/transport.hpp>

using namespace dcomm;

TEST_CASE("fifo: slots fill, wrap and keep their sizes; small payloads ride in the header line") {
  Config c;
  c.slot_bytes = 256;
  c.slots = 3;
  HeapFifo mem(c);
  FifoRef f = mem.fifo;
  REQUIRE(f.valid());
  for (uint64_t round = 0; round < 10; ++round) {
    for (int i = 0; i < 3; ++i) {
      REQUIRE(f.writable());
      uint64_t bytes = i == 1 ? 200 : static_cast<uint64_t>(i) + 1;  // one slot past the inline limit
      uint64_t t = f.tail(std::memory_order_relaxed);
      CHECK_FALSE(f.ready(t));
      f.payload(t, bytes)[bytes - 1] = static_cast<char>(round * 3 + static_cast<uint64_t>(i));
      f.commit(bytes);
      CHECK(f.ready(t));
    }
    CHECK_FALSE(f.writable());  // three slots, all full
    for (int i = 0; i < 3; ++i) {
      uint64_t h = f.head(std::memory_order_relaxed);
      REQUIRE(f.ready(h));
      uint64_t bytes = f.size(h);
      CHECK(bytes == (i == 1 ? 200 : static_cast<uint64_t>(i) + 1));
      CHECK(f.payload(h, bytes)[bytes - 1] == static_cast<char>(round * 3 + static_cast<uint64_t>(i)));
      CHECK((f.payload(h, bytes) - f.payload(h, 1)) == (bytes > kInlineBytes ? 48 : 0));
      f.publish_head(h + 1);
    }
    CHECK_FALSE(f.ready(f.head(std::memory_order_relaxed)));
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
      std::memcpy(f.payload(f.tail(std::memory_order_relaxed), sizeof i), &i, sizeof i);
      f.commit(sizeof i);
    }
  });
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    while (!f.ready(i)) std::this_thread::yield();  // slot i's sequence number, as PeerPort polls it
    uint64_t v;
    std::memcpy(&v, f.payload(i, sizeof v), sizeof v);
    bad += v != i;
    f.publish_head(i + 1);
  }
  producer.join();
  CHECK(bad == 0);
}
