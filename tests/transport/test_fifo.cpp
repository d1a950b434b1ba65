#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include <thread>
#include <vector>

#include <dcomm/prims/peer.hpp>
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
      CHECK((f.payload(h, bytes) - f.payload(h, 1)) ==
            static_cast<std::ptrdiff_t>(bytes > kInlineBytes ? kSlotHeaderBytes - kInlineOffset : 0));
      f.publish_head(h + 1);
    }
    CHECK_FALSE(f.ready(f.head(std::memory_order_relaxed)));
  }
  CHECK_FALSE(f.producer_closed());
  f.close_producer();
  CHECK(f.producer_closed());
}

TEST_CASE("fifo: a slot's stamp and payload travel as one run of bytes (wire) and land where they belong") {
  const size_t slot_bytes = 256, slots = 4;
  std::vector<char> a(fifo_bytes(slot_bytes, slots) + 64), b(a.size());
  FifoRef out = FifoRef::initialize(a.data(), slot_bytes, slots), in = FifoRef::initialize(b.data(), slot_bytes, slots);
  for (uint64_t bytes : {0, 1, 31, 32, 33, 100, 256}) {
    CAPTURE(bytes);
    const uint64_t t = out.tail(std::memory_order_relaxed);
    char* p = out.payload(t, bytes);
    for (uint64_t i = 0; i < bytes; ++i) p[i] = static_cast<char>(i * 7 + bytes);
    const CallStamp stamp{0x1234567800000000ull | bytes, 99 + bytes};
    out.commit(bytes, stamp);
    // A wire moves wire_bytes(bytes) from wire(); the receiver learns the size from the run.
    const uint64_t run = FifoRef::wire_bytes(bytes);
    CHECK(run <= out.max_wire_bytes());
    std::memcpy(in.wire(t), out.wire(t), run);
    uint64_t got = 0;
    REQUIRE(FifoRef::payload_of_wire(run, &got));
    CHECK(got == bytes);
    in.set_size(t, got);
    in.publish_tail(t + 1);
    CHECK(in.stamp(t) == stamp);
    CHECK(std::memcmp(in.payload(t, got), p, bytes) == 0);
    in.publish_head(t + 1);
    out.publish_head(t + 1);
  }
  // Lengths no run has are refused.
  uint64_t n = 0;
  for (uint64_t bad : {0, 15, 49, 64, 80}) CHECK_FALSE(FifoRef::payload_of_wire(bad, &n));
}

// A rendezvous slot: the size word carries both flags and the real size, larger than a slot;
// its header run (what a wire sends first) has a length no other run has, and brings the size
// to the receiving slot.
TEST_CASE("fifo: a rendezvous slot's header run carries its size, and no other run is mistaken for one") {
  const size_t slot_bytes = 256, slots = 4;
  std::vector<char> a(fifo_bytes(slot_bytes, slots)), b(a.size());
  FifoRef out = FifoRef::initialize(a.data(), slot_bytes, slots), in = FifoRef::initialize(b.data(), slot_bytes, slots);
  std::vector<char> message(100000, 'x');
  const uint64_t t = out.tail(std::memory_order_relaxed);
  out.commit_ref(message.data(), message.size(), CallStamp{7, 8}, /*rendezvous=*/true);
  CHECK(out.by_reference(t));
  CHECK(out.rendezvous(t));
  CHECK(out.size(t) == message.size());
  CHECK(out.source(t, message.size()) == message.data());
  // The header run: the stamp and inline area, then the size (UcxLink sends it as an iov).
  std::memcpy(in.wire(t), out.wire(t), FifoRef::kRendezvousRun - sizeof(uint64_t));
  const uint64_t size = message.size();
  std::memcpy(in.wire(t) + FifoRef::kRendezvousRun - sizeof(uint64_t), &size, sizeof size);
  CHECK(in.rendezvous_size(t) == message.size());
  CHECK(in.stamp(t) == CallStamp{7, 8});
  uint64_t n = 0;
  CHECK_FALSE(FifoRef::payload_of_wire(FifoRef::kRendezvousRun, &n));
  for (uint64_t bytes = 0; bytes <= slot_bytes; ++bytes) CHECK(FifoRef::wire_bytes(bytes) != FifoRef::kRendezvousRun);
  // A plain slot of the same FIFO carries neither flag.
  out.publish_head(t + 1);
  out.commit(8, CallStamp{1, 2});
  CHECK_FALSE(out.rendezvous(t + 1));
  CHECK_FALSE(out.by_reference(t + 1));
}

// The rank posts where slot k's payload lands; the wire holds it only for that slot and only
// while it stays posted, and the rank sees the hold (busy) until the wire lets go.
TEST_CASE("landing: held only for the posted slot while posted; withdrawn, never held again") {
  Landing l;
  char buf[64];
  CHECK(l.hold(0, 64) == nullptr);
  l.post(5, buf, sizeof buf);
  CHECK(l.hold(4, 99) == nullptr);  // a header for slot 4 with nothing posted for it: said so
  CHECK(l.unposted.load() == 5);
  CHECK(l.unposted_bytes.load() == 99);
  CHECK(l.busy.load() == 0);
  CHECK(l.hold(5, 64) == buf);
  CHECK(l.bytes == sizeof buf);
  CHECK(l.busy.load() == 1);
  l.slot.store(0);  // withdrawn (PeerPort::withdraw_landing), while the wire still holds it
  CHECK_FALSE(l.posted(5));
  CHECK(l.busy.load() == 1);
  l.release();
  CHECK(l.busy.load() == 0);
  CHECK(l.hold(5, 64) == nullptr);
  CHECK(l.busy.load() == 0);
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

// More lines than slots (shared-memory and in-process FIFOs): a message of up to kSmallBytes
// takes only a line, so up to `lines` of them queue; a larger one also takes a data area,
// shared by every `slots`-th line, so only `slots` of those queue.
TEST_CASE("fifo: with more lines than slots, line-sized messages queue on every line and larger ones on the slots") {
  Config c;
  c.slot_bytes = 1024;
  c.slots = 3;
  const size_t lines = 8;
  HeapFifo mem(c, lines);
  FifoRef f = mem.fifo;
  REQUIRE(f.valid());
  CHECK(f.lines_apart());
  CHECK(f.lines() == lines);
  CHECK(f.slots() == 3);
  CHECK(mem.bytes == fifo_bytes(c.slot_bytes, 3, lines));
  CHECK(mem.bytes < fifo_bytes(c.slot_bytes, lines));  // cheaper than as many full slots
  CHECK_FALSE(HeapFifo(c).fifo.lines_apart());         // one line per slot: the wires' layout
  // Every payload of every size lies in the FIFO's memory, past its header.
  for (uint64_t i = 0; i < 2 * lines; ++i)
    for (uint64_t bytes : {0, 1, 32, 33, 448, 449, 1024}) {
      const char* p = f.payload(i, bytes);
      CHECK(p >= mem.memory + sizeof(FifoHeader));
      CHECK(p + bytes <= mem.memory + mem.bytes);
    }
  for (uint64_t round = 0; round < 4; ++round) {
    const uint64_t base = f.tail(std::memory_order_relaxed);
    // Three large messages fill the data areas; line-sized ones still fit, up to the lines.
    for (int i = 0; i < 3; ++i) {
      REQUIRE(f.writable(kSmallBytes + 1));
      std::memset(f.payload(f.tail(std::memory_order_relaxed), c.slot_bytes), 'A' + i, c.slot_bytes);
      f.commit(c.slot_bytes);
    }
    CHECK_FALSE(f.writable(kSmallBytes + 1));
    for (size_t i = 3; i < lines; ++i) {
      REQUIRE(f.writable(kSmallBytes));
      const uint64_t bytes = i % 2 ? kSmallBytes : kInlineBytes;
      std::memset(f.payload(f.tail(std::memory_order_relaxed), bytes), 'a' + static_cast<int>(i), bytes);
      f.commit(bytes);
    }
    CHECK_FALSE(f.writable(0));
    // None overwrote another.
    for (uint64_t i = 0; i < lines; ++i) {
      const uint64_t h = base + i, bytes = f.size(h);
      REQUIRE(f.ready(h));
      const char want = i < 3 ? static_cast<char>('A' + i) : static_cast<char>('a' + i);
      CHECK(bytes == (i < 3 ? c.slot_bytes : i % 2 ? kSmallBytes : kInlineBytes));
      const char* p = f.payload(h, bytes);
      CHECK(std::count(p, p + bytes, want) == static_cast<std::ptrdiff_t>(bytes));
    }
    // A large message waits until fewer than `slots` are queued ahead of it: the data area it
    // takes is that of the slot `slots` before it.
    f.publish_head(base + 1);
    CHECK(f.writable(kSmallBytes));
    CHECK_FALSE(f.writable(kSmallBytes + 1));
    f.publish_head(base + lines - 3);
    CHECK_FALSE(f.writable(kSmallBytes + 1));
    f.publish_head(base + lines - 2);
    CHECK(f.writable(kSmallBytes + 1));
    f.publish_head(base + lines);
  }
}

// A consumer takes the first `bytes` of a data area for the producer's next write: one store to
// each of those cache lines, none past them, and nothing in the slot's line.
TEST_CASE("fifo: take_area stores to each cache line of the area's first bytes and nowhere else") {
  Config c;
  c.slot_bytes = 1024;
  c.slots = 3;
  for (size_t lines : {size_t{0}, size_t{8}}) {
    CAPTURE(lines);
    HeapFifo mem(c, lines);
    FifoRef f = mem.fifo;
    for (uint64_t i = 0; i < 4; ++i) {
      REQUIRE(f.writable(c.slot_bytes));
      char* p = f.payload(i, c.slot_bytes);
      std::memset(p, 'x', c.slot_bytes);
      f.commit(c.slot_bytes);
      const std::vector<char> line(f.payload(i, kInlineBytes) - kInlineOffset,
                                   f.payload(i, kInlineBytes) - kInlineOffset + kSlotHeaderBytes);
      f.take_area(i, 300);  // lines at 0, 64, ..., 256: five
      for (size_t k = 0; k < c.slot_bytes; ++k) {
        CAPTURE(k);
        CHECK(p[k] == (k < 300 && k % kSlotHeaderBytes == 0 ? 0 : 'x'));
      }
      CHECK(std::memcmp(line.data(), f.payload(i, kInlineBytes) - kInlineOffset, kSlotHeaderBytes) == 0);
      CHECK(f.size(i) == c.slot_bytes);
      f.publish_head(i + 1);
    }
  }
}

// What a consumer takes: DCOMM_TAKE_AREA_BYTES when set (0: nothing), else the L2 over twice the
// data areas, or nothing where the L2's size is unknown.
TEST_CASE("take_area_bytes: the setting, else this core's L2 over twice the FIFO's data areas") {
  Config c;
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  CHECK(take_area_bytes(c, 8) == (l2 > 0 ? static_cast<uint64_t>(l2) / 16 : 0));
  CHECK(take_area_bytes(c, 4) == (l2 > 0 ? static_cast<uint64_t>(l2) / 8 : 0));
  c.take_area_bytes = 0;
  CHECK(take_area_bytes(c, 8) == 0);
  c.take_area_bytes = 4096;
  CHECK(take_area_bytes(c, 8) == 4096);
}

TEST_CASE("fifo: with more lines than slots, a producer and a consumer thread pass mixed sizes intact") {
  Config c;
  c.slot_bytes = 1024;
  c.slots = 3;
  HeapFifo mem(c, 16);
  FifoRef f = mem.fifo;
  const uint64_t n = 200'000;
  // Sizes from 0 to a whole slot, mostly small, in a fixed pseudo-random order.
  auto size_of = [&](uint64_t i) -> uint64_t {
    const uint64_t x = (i * 2654435761u) >> 7;
    return x % 4 == 0 ? x % (c.slot_bytes + 1) : x % (kSmallBytes + 1);
  };
  auto byte_of = [](uint64_t i, uint64_t k) { return static_cast<char>(i * 31 + k); };
  std::thread producer([&] {
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t bytes = size_of(i);
      while (!f.writable(bytes)) std::this_thread::yield();
      char* p = f.payload(f.tail(std::memory_order_relaxed), bytes);
      for (uint64_t k = 0; k < bytes; ++k) p[k] = byte_of(i, k);
      f.commit(bytes);
    }
  });
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; ++i) {
    while (!f.ready(i)) std::this_thread::yield();
    const uint64_t bytes = f.size(i);
    bad += bytes != size_of(i);
    const char* p = f.payload(i, bytes);
    for (uint64_t k = 0; k < bytes; ++k) bad += p[k] != byte_of(i, k);
    // As PeerPort::release_recv does: the area's lines taken before the slot goes back (on
    // every other one, whole or in part), which the producer's next payload there overwrites.
    if (bytes > kSmallBytes && i % 2) f.take_area(i, i % 4 == 1 ? bytes : bytes / 2);
    f.publish_head(i + 1);
  }
  producer.join();
  CHECK(bad == 0);
}
