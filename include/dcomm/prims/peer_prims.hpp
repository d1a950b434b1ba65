// The primitives of the tree algorithms (algo/tree_collectives.hpp) on the host: peers are
// addressed by rank through the communicator's ports, a slice is at most one slot, and a
// received slot is folded or copied straight out of the FIFO. Counts are elements of
// elem_bytes() (1 for the byte-wise broadcast).
#pragma once

#include <cstring>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

class PeerPrims {
 public:
  // ports[p]: to rank p (null for this rank). reducer: null for the collectives that only copy.
  // slots: the FIFOs' depth (every slot is handed back to the sender at once, so the whole
  // ring is there for a sender running ahead: fifo_slots()).
  PeerPrims(const std::vector<PeerPort*>& ports, const Reducer* reducer, size_t elem_bytes, const Config& config)
      : ports_(ports), r_(reducer), eb_(elem_bytes), slice_(config.slot_bytes / elem_bytes), slots_(config.slots) {}

  size_t elem_bytes() const { return eb_; }
  const Reducer* reducer() const { return r_; }
  size_t slice_elems() const { return slice_; }
  int fifo_slots() const { return slots_; }

  Status send(int peer, const void* src, size_t n) { return port(peer)->post(src, n * eb_); }
  Status recv(int peer, void* dst, size_t n) {
    return with_slot(peer, n, [&](const char* in) {
      if (n) std::memcpy(dst, in, n * eb_);
    });
  }
  Status recv_reduce(int peer, const void* a, void* dst, size_t n) {
    return with_slot(peer, n, [&](const char* in) { r_->reduce(dst, a, in, n); });
  }
  // dst <- a (+) b, within this rank.
  Status local_reduce(void* dst, const void* a, const void* b, size_t n) {
    r_->reduce(dst, a, b, n);
    return {};
  }
  Status local_copy(void* dst, const void* src, size_t n) {
    detail::copy_if_distinct(dst, src, n * eb_);
    return {};
  }
  Status finalize(void* dst, size_t n) {
    if (r_) r_->finalize(dst, n);
    return {};
  }

 private:
  PeerPort* port(int peer) const { return ports_[static_cast<size_t>(peer)]; }
  template <class Use>
  Status with_slot(int peer, size_t n, Use use) {
    PeerPort* p = port(peer);
    auto slot = p->acquire_recv(n * eb_);
    if (!slot.ok()) return slot.status();
    use(*slot);
    p->release_recv(/*now=*/true);
    return {};
  }

  const std::vector<PeerPort*>& ports_;
  const Reducer* r_;
  size_t eb_, slice_;
  int slots_;
};

DCOMM_NAMESPACE_END
