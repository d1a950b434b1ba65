// The staging FIFO every transport exposes: a single-producer single-consumer ring of
// fixed-size slots in memory both sides can reach (heap for threads, a shared mapping for
// processes; for TCP a local FIFO at each end, with the proxy thread moving slots over the
// socket). The producer owns `tail`, the consumer owns `head`. Lock-free 64-bit atomics work
// across processes in a shared mapping.
//
// Each slot opens with one cache line: a sequence number, the byte count, the producer's
// stamp (16 bytes that say which call made the slot: the consumer checks them against its own
// call, so ranks that make different calls fail instead of mixing data; see core/call.hpp),
// and up to 32 bytes of payload inline. The consumer polls that line's sequence number (not
// `tail`), so a small message costs one cache-line transfer to the consumer and one back to
// the producer, the least two cores can do (the "LL" idea of NCCL's low-latency protocol).
// Larger payloads follow in the slot's data area. A link that moves slots over a wire moves
// the stamp and the payload as one run of bytes (wire() / wire_bytes()).
//
// The ranks' own FIFOs (shared memory, threads) have more slots than data areas: `lines`
// slots (DCOMM_SMALL_SLOTS) of 512 bytes, with room for a payload of up to kSmallBytes after
// the first line, and `slots` data areas (DCOMM_SLOTS x DCOMM_SLOT_BYTES) that slot i uses as
// area i % slots. A producer may be `lines` small messages ahead of its consumer but only
// `slots` large ones (room()), so a loop of small calls (broadcasts: the root never waits for
// an answer) queues many before it waits, while the memory stays that of the data areas.
//
// A slot may instead refer to its payload where the producer keeps it (commit_ref): the size
// word's top bit marks it and the inline area holds the address. Only a proxied link's send
// FIFO carries such slots: its wire reads the payload from there (source()), so a large send
// is never copied into the FIFO, and the slot is released (head) only once the wire is done
// reading it.
//
// A slot so sent may also be a rendezvous (the size word's next bit): its payload, of any size,
// is for the receiver's own buffer. The wire carries the stamp and size first and the payload
// only once the receiving rank has said where it goes (transport/transport.hpp's Landing); the
// receiving link then marks the slot of its FIFO the same way, and the payload is already
// where the rank wanted it.
//
// FifoRef is a trivially copyable view: the same idea as MSCCL++'s device handles, so a
// future device-side consumer can take it by value.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

struct alignas(64) FifoHeader {
  static constexpr uint64_t kMagic = 0x64636f6d6d46494full;  // "dcommFIO"
  uint64_t magic;
  uint64_t slot_bytes;
  uint64_t slots;                          // slots with a data area: room for messages of more than kSmallBytes
  uint64_t lines;                          // slots in all (at least `slots`): room for messages of up to kSmallBytes
  alignas(64) std::atomic<uint64_t> tail;  // slots committed by the producer
  alignas(64) std::atomic<uint64_t> head;  // slots released by the consumer
  // Set by a side that shuts down cleanly: no more slots will come / be consumed.
  alignas(64) std::atomic<uint32_t> producer_closed;
  std::atomic<uint32_t> consumer_closed;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "dcomm needs lock-free 64-bit atomics for shared memory");

inline constexpr size_t kSlotHeaderBytes = 64;
inline constexpr size_t kStampOffset = 16;   // seq, size, then the stamp (two words)
inline constexpr size_t kInlineOffset = 32;  // then the inline payload
inline constexpr size_t kInlineBytes = kSlotHeaderBytes - kInlineOffset;
// A FIFO with more lines than slots (see FifoRef::slot) gives each line this much room after
// its first cache line, for a message too large to go inline.
inline constexpr size_t kSmallBytes = 448;
inline constexpr size_t kLineBytes = kSlotHeaderBytes + kSmallBytes;
// At most this much of a data area is taken early (own_area_early): half the smallest L1 data
// cache of the cores dcomm runs on (32 KiB), where the prefetches land, so the first lines are
// not evicted by the last before the producer writes them. A message larger than that costs
// many times a cache line's transfer anyway.
inline constexpr size_t kOwnAreaBytes = size_t{16} << 10;
inline constexpr uint64_t kByReference = uint64_t{1} << 63;  // in the size word: see commit_ref
inline constexpr uint64_t kRendezvous = uint64_t{1} << 62;   // in the size word: see above
inline constexpr uint64_t kSizeFlags = kByReference | kRendezvous;

// A slot's stamp is the call's (core/call.hpp): two words the producer writes with the payload,
// which the transports move without reading.
using SlotStamp = CallStamp;

// `lines`: slots in all, of which `slots` have a data area (fewer lines than slots: as many).
inline size_t fifo_bytes(size_t slot_bytes, size_t slots, size_t lines = 0) {
  if (lines <= slots) return sizeof(FifoHeader) + slots * (kSlotHeaderBytes + slot_bytes);
  return sizeof(FifoHeader) + lines * kLineBytes + slots * slot_bytes;
}

class FifoRef {
 public:
  FifoRef() = default;
  explicit FifoRef(void* memory) : h_(static_cast<FifoHeader*>(memory)) {}

  // Lays out a FIFO in `memory` (fifo_bytes(slot_bytes, slots, lines) of it).
  static FifoRef initialize(void* memory, size_t slot_bytes, size_t slots, size_t lines = 0) {
    auto* h = new (memory) FifoHeader{};
    h->magic = FifoHeader::kMagic;
    h->slot_bytes = slot_bytes;
    h->slots = slots;
    h->lines = std::max(lines, slots);
    h->tail.store(0, std::memory_order_relaxed);
    h->head.store(0, std::memory_order_relaxed);
    h->producer_closed.store(0, std::memory_order_relaxed);
    h->consumer_closed.store(0, std::memory_order_relaxed);
    FifoRef f(memory);
    for (uint64_t i = 0; i < h->lines; ++i) std::memset(f.slot(i), 0, kSlotHeaderBytes);  // seq 0: nothing yet
    std::atomic_thread_fence(std::memory_order_release);
    return f;
  }

  bool valid() const { return h_ && h_->magic == FifoHeader::kMagic; }
  size_t slot_bytes() const { return h_->slot_bytes; }
  uint64_t slots() const { return h_->slots; }
  uint64_t lines() const { return h_->lines; }
  bool lines_apart() const { return h_->lines != h_->slots; }  // lines apart from the data areas (slot())
  // How many slots a producer may have ahead of the consumer's head when the next one holds
  // `bytes`: every line for a message that fits in a line, else the slots with a data area.
  uint64_t room(uint64_t bytes) const { return bytes <= kSmallBytes ? h_->lines : h_->slots; }

  uint64_t tail(std::memory_order mo = std::memory_order_acquire) const { return h_->tail.load(mo); }
  uint64_t head(std::memory_order mo = std::memory_order_acquire) const { return h_->head.load(mo); }

  // Where slot `index` (a running count; wraps over the ring) keeps a payload of `bytes`.
  char* payload(uint64_t index, uint64_t bytes) const {
    if (bytes <= kInlineBytes) return slot(index) + kInlineOffset;
    return bytes <= kSmallBytes ? slot(index) + kSlotHeaderBytes : data(index);
  }
  uint64_t size(uint64_t index) const { return size_word(index) & ~kSizeFlags; }
  // Whether the slot's payload stays in the producer's memory (commit_ref), and where the
  // payload of a slot of `bytes` is to be read from, either way.
  bool by_reference(uint64_t index) const { return (size_word(index) & kByReference) != 0; }
  bool rendezvous(uint64_t index) const { return (size_word(index) & kRendezvous) != 0; }
  const char* source(uint64_t index, uint64_t bytes) const {
    if (!by_reference(index)) return payload(index, bytes);
    const char* p;
    std::memcpy(&p, slot(index) + kInlineOffset, sizeof p);
    return p;
  }
  void set_size(uint64_t index, uint64_t bytes) const { *reinterpret_cast<uint64_t*>(slot(index) + 8) = bytes; }
  SlotStamp stamp(uint64_t index) const {
    SlotStamp s;
    std::memcpy(&s, slot(index) + kStampOffset, sizeof s);
    return s;
  }
  void set_stamp(uint64_t index, const SlotStamp& s) const { std::memcpy(slot(index) + kStampOffset, &s, sizeof s); }

  // What a wire moves for slot `index`: its stamp and `bytes` of payload, contiguous from
  // wire(index); the receiving link lands them at wire() of its own slot and recovers the
  // payload size from the run's length (payload_of_wire: nothing when the length is no run's).
  // Only for a FIFO with as many lines as slots (the wire transports' own).
  char* wire(uint64_t index) const { return slot(index) + kStampOffset; }
  static uint64_t wire_bytes(uint64_t bytes) {
    return (bytes <= kInlineBytes ? kInlineOffset : kSlotHeaderBytes) - kStampOffset + bytes;
  }
  uint64_t max_wire_bytes() const { return wire_bytes(slot_bytes()); }
  // What a wire moves for a rendezvous slot first: the stamp, the inline area and the payload's
  // size (8 bytes), a run of a length no other slot makes; the size lands at the receiving
  // slot's data area (rendezvous_size()).
  static constexpr uint64_t kRendezvousRun = kSlotHeaderBytes - kStampOffset + sizeof(uint64_t);
  uint64_t rendezvous_size(uint64_t index) const {
    uint64_t n;
    std::memcpy(&n, data(index), sizeof n);
    return n;
  }
  // The sending side: puts the payload's size after the inline area, making the run contiguous
  // (a slot sent by reference leaves its data area unused).
  void set_rendezvous_size(uint64_t index, uint64_t n) const { std::memcpy(data(index), &n, sizeof n); }
  static bool payload_of_wire(uint64_t wire, uint64_t* bytes) {
    if (wire >= kSlotHeaderBytes - kStampOffset + kInlineBytes + 1)
      return *bytes = wire - (kSlotHeaderBytes - kStampOffset), true;
    if (wire >= kInlineOffset - kStampOffset && wire <= kInlineOffset - kStampOffset + kInlineBytes)
      return *bytes = wire - (kInlineOffset - kStampOffset), true;
    return false;
  }
  // Slot `index` is complete: its sequence number becomes index + 1.
  void mark_ready(uint64_t index) const { seq(index).store(index + 1, std::memory_order_release); }
  bool ready(uint64_t index) const { return seq(index).load(std::memory_order_acquire) == index + 1; }
  // A consumer that is behind (the next slot is already ready) asks for a later slot's first
  // line early, so its transfer from the producer's core overlaps the slots before it.
  void prefetch(uint64_t index) const { __builtin_prefetch(slot(index), 0, 3); }

  // Producer side.
  bool writable(uint64_t bytes = UINT64_MAX) const { return tail(std::memory_order_relaxed) - head() < room(bytes); }
  void commit(uint64_t bytes, const SlotStamp& stamp = {}) const { commit_word(bytes, stamp); }
  // A slot whose `bytes` (more than kInlineBytes) stay at `data`, which must not change until
  // the consumer releases the slot; `rendezvous`: for the receiver's own buffer (see above).
  void commit_ref(const void* data, uint64_t bytes, const SlotStamp& stamp, bool rendezvous = false) const {
    std::memcpy(slot(tail(std::memory_order_relaxed)) + kInlineOffset, &data, sizeof data);
    commit_word(bytes | kByReference | (rendezvous ? kRendezvous : 0), stamp);
  }
  // What own_early (below) does for a slot's line, for a data area: the producer takes the first
  // `bytes` of slot `index`'s data area (the one the next message of more than kSmallBytes
  // fills), which the consumer read a ring ago, while it waits for its peer rather than store
  // by store as it fills the area. Only
  // when the area is free (the consumer released slot index - slots()); `bytes` the message
  // just sent, at most kOwnAreaBytes.
  void own_area_early(uint64_t index, uint64_t bytes) const {
    own_early(data(index), std::min<uint64_t>({bytes, slot_bytes(), kOwnAreaBytes}));
  }
  // Consumer side, for a slot whose payload is in its data area (more than kSmallBytes), before
  // the slot is released: one store to each cache line of the first `bytes` of the area. The
  // producer's next write there then takes lines one core holds, instead of lines the consumer
  // still shares after reading them, which a store must first take from it, line by line at
  // the head of the store buffer: 2 processes on the AMD EPYC, a 32 KiB copy into an area the
  // peer had read took 3.7 us, into one it had read and then written 0.9 (the reading side's
  // stores 0.3), about as much as writing lines no other core held (docs/benchmarking.md).
  // What it writes is nobody's data: the producer refills the area before it commits a slot
  // there.
  void take_area(uint64_t index, uint64_t bytes) const {
    char* p = data(index);
    for (uint64_t at = 0; at < bytes; at += kSlotHeaderBytes)
      std::atomic_ref<char>(p[at]).store(0, std::memory_order_relaxed);
  }
  // For a producer that completes slots out of band (the TCP proxy): slots [tail, t) are full.
  void publish_tail(uint64_t t) const {
    for (uint64_t i = tail(std::memory_order_relaxed); i < t; ++i) mark_ready(i);
    h_->tail.store(t, std::memory_order_release);
  }

  // Consumer side: the consumer keeps its own count of slots taken (it polls ready(index)) and
  // publishes them as `head`, in batches if it likes (see PeerPort::release_recv).
  void publish_head(uint64_t hd) const { h_->head.store(hd, std::memory_order_release); }

  bool producer_closed() const { return h_->producer_closed.load(std::memory_order_acquire) != 0; }
  bool consumer_closed() const { return h_->consumer_closed.load(std::memory_order_acquire) != 0; }
  void close_producer() const { h_->producer_closed.store(1, std::memory_order_release); }
  void close_consumer() const { h_->consumer_closed.store(1, std::memory_order_release); }

 private:
  void commit_word(uint64_t size_word, const SlotStamp& stamp) const {
    uint64_t t = tail(std::memory_order_relaxed);
    set_size(t, size_word);
    set_stamp(t, stamp);
    mark_ready(t);
    h_->tail.store(t + 1, std::memory_order_release);
    const uint64_t bytes = size_word & kSizeFlags ? 0 : size_word;
    own_early(slot(t + 1 + h_->lines / 2),
              kSlotHeaderBytes + (bytes <= kInlineBytes || bytes > kSmallBytes ? 0 : bytes));
  }
  // The producer takes a slot's first line for writing half a ring before it fills the slot.
  // The consumer read that line last (a ring ago), so a store to it must first take it from the
  // consumer's core; taken early, the store does not wait for that at the head of the store
  // buffer, where it held up every later store of the call (docs/benchmarking.md, "Figures
  // behind the comments"). A hint only: either side may touch the line at any time.
  // The payload after the first cache line, of the size just sent, is taken with it, so a loop
  // of calls of one size takes what the next such message will write. `bytes` from `p`.
  static void own_early(char* p, uint64_t bytes) {
    for (uint64_t at = 0; at < bytes; at += kSlotHeaderBytes) {
#if defined(__x86_64__)
      asm volatile("prefetchw %0" ::"m"(p[at]));  // a no-op on the few x86-64 CPUs without it
#else
      __builtin_prefetch(p + at, 1, 3);
#endif
    }
  }
  uint64_t size_word(uint64_t index) const { return *reinterpret_cast<const uint64_t*>(slot(index) + 8); }
  std::atomic_ref<uint64_t> seq(uint64_t index) const {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(slot(index)));
  }
  // Where slot `index` opens and where its data area is. With as many lines as slots, each
  // slot's line is followed by its data area (what a wire moves from wire() is contiguous).
  // With more lines, the lines (kLineBytes each, room for kSmallBytes after the first cache
  // line) come first and slot i's larger payload goes to data area i % slots: that area is
  // free once slot i - slots is released, which room() ensures.
  char* slot(uint64_t index) const {
    const uint64_t stride = lines_apart() ? kLineBytes : kSlotHeaderBytes + h_->slot_bytes;
    return reinterpret_cast<char*>(h_) + sizeof(FifoHeader) + (index % h_->lines) * stride;
  }
  char* data(uint64_t index) const {
    if (!lines_apart()) return slot(index) + kSlotHeaderBytes;
    return reinterpret_cast<char*>(h_) + sizeof(FifoHeader) + h_->lines * kLineBytes +
           (index % h_->slots) * h_->slot_bytes;
  }
  FifoHeader* h_ = nullptr;
};

DCOMM_NAMESPACE_END
