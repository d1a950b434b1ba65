// The primitives every algorithm is written in, NCCL's vocabulary: each moves one slice (at
// most a slot) from `prev`, to `next`, or both, reducing on the way where its name says so.
// Algorithms call them over chunk indices and never see a FIFO or a transport.
#pragma once

#include <algorithm>
#include <cstring>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

// What the host's primitives share (this class and prims/landing_prims.hpp's): the reducer,
// the element size, the ring's chunk alignment and the one-rank copy.
class HostPrimitivesBase {
 public:
  explicit HostPrimitivesBase(const Reducer& reducer) : r_(reducer) {}
  size_t elem_bytes() const { return r_.elem_bytes; }
  // Ring chunks are a multiple of this many elements (the device primitives want 16 bytes).
  size_t chunk_align() const { return 1; }
  // dst <- src on this rank (the one-rank case of every collective; nothing when in place)
  Status local_copy(void* dst, const void* src, size_t count) {
    detail::copy_if_distinct(dst, src, count * r_.elem_bytes);
    return {};
  }

 protected:
  Reducer r_;
};

class Primitives : public HostPrimitivesBase {
 public:
  // prev: where data comes from; next: where it goes. Either may be null when unused.
  // stream_output: the call is large; write the user's output with streaming stores.
  // by_reference: send() may hand `next` the caller's memory instead of a copy
  // (PeerPort::post_by_reference): for algorithms that never write memory they sent from
  // before the data it held has gone round (the ring, the chains), so the wire reads it
  // unchanged; the caller waits for the wire (wait_sent()) before the call returns.
  Primitives(PeerPort* prev, PeerPort* next, const Reducer& reducer, bool stream_output = false,
             bool by_reference = false)
      : HostPrimitivesBase(reducer), prev_(prev), next_(next), stream_(stream_output), by_reference_(by_reference) {}
  ~Primitives() {
    if (stream_) stream_fence();
  }

  // Largest slice in elements: what fits a slot.
  size_t slice_elems() const {
    size_t slot = (next_ ? next_ : prev_)->slot_bytes();
    return slot / r_.elem_bytes;
  }

  // next <- src
  Status send(const void* src, size_t count) {
    if (by_reference_ && next_->sends_by_reference(count * r_.elem_bytes)) {
      sent_by_reference_ = true;
      return next_->post_by_reference(src, count * r_.elem_bytes);
    }
    return with_send([&](char* out) { copy(out, src, count); }, count);
  }
  // Returns once `next` has read everything sent by reference (before the call returns).
  Status wait_sent() { return sent_by_reference_ ? next_->wait_sent() : Status{}; }

  // dst <- prev
  Status recv(void* dst, size_t count) {
    return with_recv([&](const char* in) { copy_bytes(dst, in, count * r_.elem_bytes, stream_); }, count);
  }
  // next <- prev (+) local
  Status recv_reduce_send(const void* local, size_t count) {
    return with_recv(
        [&](const char* in) { return with_send([&](char* out) { r_.reduce(out, in, local, count); }, count); }, count);
  }
  // dst <- prev (+) local, finalized (kAvg divides here)
  Status recv_reduce_copy(const void* local, void* dst, size_t count) {
    return with_recv([&](const char* in) { reduce_to(dst, nullptr, in, local, count); }, count);
  }
  // dst <- prev (+) local, finalized; next <- the same
  Status recv_reduce_copy_send(const void* local, void* dst, size_t count) {
    return with_recv(
        [&](const char* in) { return with_send([&](char* out) { reduce_to(dst, out, in, local, count); }, count); },
        count);
  }
  // dst <- prev; next <- prev. The send goes first here and in copy_send: the local copy then
  // overlaps the data's way to the next rank (docs/benchmarking.md's figures).
  Status recv_copy_send(void* dst, size_t count) {
    return with_recv(
        [&](const char* in) {
          DCOMM_RETURN_IF_ERROR(with_send([&](char* out) { copy(out, in, count); }, count));
          copy_bytes(dst, in, count * r_.elem_bytes, stream_);
          return Status{};
        },
        count);
  }
  // dst <- src (skipped in place); next <- src
  Status copy_send(const void* src, void* dst, size_t count) {
    DCOMM_RETURN_IF_ERROR(send(src, count));
    if (dst != src) copy_bytes(dst, src, count * r_.elem_bytes, stream_);
    return {};
  }

 private:
  static constexpr size_t kBlockBytes = 4096;

  // dst (and dst2, when set) <- a (+) b, finalized. Large outputs are reduced a block at a
  // time into a buffer that stays in L1 and then copied out: one pass over the inputs feeds
  // both outputs, and dst can take streaming stores.
  void reduce_to(void* dst, void* dst2, const void* a, const void* b, size_t count) {
    if (!stream_ && !dst2) {
      r_.reduce(dst, a, b, count);
      r_.finalize(dst, count);
      return;
    }
    alignas(64) char block[kBlockBytes];
    const size_t eb = r_.elem_bytes, per = kBlockBytes / eb;
    for (size_t i = 0; i < count; i += per) {
      size_t n = std::min(per, count - i);
      r_.reduce(block, static_cast<const char*>(a) + i * eb, static_cast<const char*>(b) + i * eb, n);
      r_.finalize(block, n);
      copy_bytes(static_cast<char*>(dst) + i * eb, block, n * eb, stream_);
      if (dst2) std::memcpy(static_cast<char*>(dst2) + i * eb, block, n * eb);
    }
  }

  void copy(void* dst, const void* src, size_t count) const {
    if (count) std::memcpy(dst, src, count * r_.elem_bytes);
  }
  template <class Fill>
  Status with_send(Fill fill, size_t count) {
    auto slot = next_->acquire_send(count * r_.elem_bytes);
    if (!slot.ok()) return slot.status();
    fill(*slot);
    next_->commit_send(count * r_.elem_bytes);
    return {};
  }
  // Runs use(in) on the next slot from prev, then releases it; use may return a Status.
  template <class Use>
  Status with_recv(Use use, size_t count) {
    auto slot = prev_->acquire_recv(count * r_.elem_bytes);
    if (!slot.ok()) return slot.status();
    Status s;
    if constexpr (std::is_void_v<decltype(use(*slot))>) use(*slot);
    else s = use(*slot);
    prev_->release_recv();
    return s;
  }

  PeerPort* prev_;
  PeerPort* next_;
  bool stream_;
  bool by_reference_;
  bool sent_by_reference_ = false;
};

DCOMM_NAMESPACE_END
