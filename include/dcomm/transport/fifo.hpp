// The staging FIFO every transport exposes: a single-producer single-consumer ring of
// fixed-size slots in memory both sides can reach (heap for threads, a shared mapping for
// processes; for TCP a local FIFO at each end, with the proxy thread moving slots over the
// socket). The producer owns `tail`, the consumer owns `head`; each slot carries its byte
// count in its own cache line ahead of the data. Lock-free 64-bit atomics work across
// processes in a shared mapping.
//
// FifoRef is a trivially copyable view: the same idea as MSCCL++'s device handles, so a
// future device-side consumer can take it by value.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

struct alignas(64) FifoHeader {
  static constexpr uint64_t kMagic = 0x64636f6d6d46494full;  // "dcommFIO"
  uint64_t magic;
  uint64_t slot_bytes;
  uint64_t slots;
  alignas(64) std::atomic<uint64_t> tail;  // slots committed by the producer
  alignas(64) std::atomic<uint64_t> head;  // slots released by the consumer
  // Set by a side that shuts down cleanly: no more slots will come / be consumed.
  alignas(64) std::atomic<uint32_t> producer_closed;
  std::atomic<uint32_t> consumer_closed;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "dcomm needs lock-free 64-bit atomics for shared memory");

inline constexpr size_t kSlotHeaderBytes = 64;

inline size_t fifo_bytes(size_t slot_bytes, size_t slots) {
  return sizeof(FifoHeader) + slots * (kSlotHeaderBytes + slot_bytes);
}

class FifoRef {
 public:
  FifoRef() = default;
  explicit FifoRef(void* memory) : h_(static_cast<FifoHeader*>(memory)) {}

  // Lays out a FIFO in `memory` (fifo_bytes(slot_bytes, slots) of it).
  static FifoRef initialize(void* memory, size_t slot_bytes, size_t slots) {
    auto* h = new (memory) FifoHeader{};
    h->magic = FifoHeader::kMagic;
    h->slot_bytes = slot_bytes;
    h->slots = slots;
    h->tail.store(0, std::memory_order_relaxed);
    h->head.store(0, std::memory_order_relaxed);
    h->producer_closed.store(0, std::memory_order_relaxed);
    h->consumer_closed.store(0, std::memory_order_release);
    return FifoRef(memory);
  }

  bool valid() const { return h_ && h_->magic == FifoHeader::kMagic; }
  size_t slot_bytes() const { return h_->slot_bytes; }
  uint64_t slots() const { return h_->slots; }

  uint64_t tail(std::memory_order mo = std::memory_order_acquire) const { return h_->tail.load(mo); }
  uint64_t head(std::memory_order mo = std::memory_order_acquire) const { return h_->head.load(mo); }

  // Slot `index` (a running count; wraps over the ring).
  char* data(uint64_t index) const { return slot(index) + kSlotHeaderBytes; }
  uint64_t size(uint64_t index) const { return *reinterpret_cast<const uint64_t*>(slot(index)); }
  void set_size(uint64_t index, uint64_t bytes) const { *reinterpret_cast<uint64_t*>(slot(index)) = bytes; }

  // Producer side.
  bool writable() const { return tail(std::memory_order_relaxed) - head() < h_->slots; }
  void commit(uint64_t bytes) const {
    uint64_t t = tail(std::memory_order_relaxed);
    set_size(t, bytes);
    h_->tail.store(t + 1, std::memory_order_release);
  }
  void publish_tail(uint64_t t) const { h_->tail.store(t, std::memory_order_release); }

  // Consumer side.
  bool readable() const { return tail() > head(std::memory_order_relaxed); }
  void release() const { h_->head.store(head(std::memory_order_relaxed) + 1, std::memory_order_release); }
  void publish_head(uint64_t hd) const { h_->head.store(hd, std::memory_order_release); }

  bool producer_closed() const { return h_->producer_closed.load(std::memory_order_acquire) != 0; }
  bool consumer_closed() const { return h_->consumer_closed.load(std::memory_order_acquire) != 0; }
  void close_producer() const { h_->producer_closed.store(1, std::memory_order_release); }
  void close_consumer() const { h_->consumer_closed.store(1, std::memory_order_release); }

 private:
  char* slot(uint64_t index) const {
    return reinterpret_cast<char*>(h_) + sizeof(FifoHeader) + (index % h_->slots) * (kSlotHeaderBytes + h_->slot_bytes);
  }
  FifoHeader* h_ = nullptr;
};

DCOMM_NAMESPACE_END
