// The ring's primitives (prims/primitives.hpp's vocabulary) for links whose wire lands a
// payload in the receiver's own buffer (TCP, UCX, verbs: ProxyLink::lands_payloads). A slice here is a
// piece of up to the FIFO's capacity, and each moves as one rendezvous: from the sender's
// buffer straight into the output where the data only passes (all-gather), or into working
// memory the receiver folds from (reduce-scatter), with no copy through a FIFO slot at either
// end. A piece too small for a rendezvous (kInlineBytes or less, a round's tail) goes as a slot.
//
// A piece sent from working memory must not be overwritten before the wire has read it; two
// buffers alternate, and each is rewritten only after the send from it two steps back has been
// read (PeerPort::sent_mark). Every send is from memory that does not change before the call
// ends, and the caller waits for the wire (wait_sent()) before the call returns.
#pragma once

#include <cstring>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/prims/primitives.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

class LandingPrimitives : public HostPrimitivesBase {
 public:
  // prev, next: the ring's links (both land); `work`: working memory kept by the caller from
  // call to call (two pieces of it are used); piece_bytes: the largest slice, alike on every rank.
  LandingPrimitives(PeerPort* prev, PeerPort* next, const Reducer& reducer, std::vector<char>& work, size_t piece_bytes)
      : HostPrimitivesBase(reducer), prev_(prev), next_(next), slice_(piece_bytes / reducer.elem_bytes) {
    const size_t bytes = slice_ * r_.elem_bytes;
    if (work.size() < 2 * bytes) work.resize(2 * bytes);
    stage_[0] = work.data();
    stage_[1] = work.data() + bytes;
  }
  // A failed call leaves no receive landing in the caller's buffers.
  ~LandingPrimitives() {
    if (prev_) prev_->withdraw_landing();
  }

  size_t slice_elems() const { return slice_; }

  // next <- src
  Status send(const void* src, size_t count) {
    const size_t bytes = count * r_.elem_bytes;
    if (bytes <= kInlineBytes) return next_->post(src, bytes);
    sent_ = true;
    return next_->post_by_reference(src, bytes, nullptr, /*rendezvous=*/true);
  }
  Status wait_sent() { return sent_ ? next_->wait_sent() : Status{}; }
  // dst <- prev
  Status recv(void* dst, size_t count) {
    const size_t bytes = count * r_.elem_bytes;
    if (bytes > kInlineBytes) return prev_->receive_landed(dst, bytes);
    auto slot = prev_->acquire_recv(bytes);
    if (!slot.ok()) return slot.status();
    if (bytes) std::memcpy(dst, *slot, bytes);
    prev_->release_recv(/*now=*/true);
    return {};
  }
  // next <- prev (+) local
  Status recv_reduce_send(const void* local, size_t count) {
    auto stage = free_stage();
    if (!stage.ok()) return stage.status();
    DCOMM_RETURN_IF_ERROR(recv(*stage, count));
    r_.reduce(*stage, *stage, local, count);
    DCOMM_RETURN_IF_ERROR(send(*stage, count));
    stage_sent_[turn_] = next_->sent_mark();
    return {};
  }
  // dst <- prev (+) local, finalized (kAvg divides here). The piece lands in dst itself unless
  // the fold reads `local` from there too (in place).
  Status recv_reduce_copy(const void* local, void* dst, size_t count) {
    const size_t bytes = count * r_.elem_bytes;
    char* in = static_cast<char*>(dst);
    if (detail::ranges_overlap(local, bytes, dst, bytes)) {
      auto stage = free_stage();
      if (!stage.ok()) return stage.status();
      in = *stage;
    }
    DCOMM_RETURN_IF_ERROR(recv(in, count));
    r_.reduce(dst, in, local, count);
    r_.finalize(dst, count);
    return {};
  }
  // dst <- prev (+) local, finalized; next <- the same
  Status recv_reduce_copy_send(const void* local, void* dst, size_t count) {
    DCOMM_RETURN_IF_ERROR(recv_reduce_copy(local, dst, count));
    return send(dst, count);
  }
  // dst <- prev; next <- prev
  Status recv_copy_send(void* dst, size_t count) {
    DCOMM_RETURN_IF_ERROR(recv(dst, count));
    return send(dst, count);
  }
  // dst <- src (skipped in place); next <- src
  Status copy_send(const void* src, void* dst, size_t count) {
    detail::copy_if_distinct(dst, src, count * r_.elem_bytes);
    return send(src, count);
  }

 private:
  // The working buffer whose turn it is, once the wire has read the send made from it before.
  Result<char*> free_stage() {
    turn_ ^= 1;
    DCOMM_RETURN_IF_ERROR(next_->wait_sent(stage_sent_[turn_]));
    stage_sent_[turn_] = 0;
    return stage_[turn_];
  }

  PeerPort* prev_;
  PeerPort* next_;
  size_t slice_;
  char* stage_[2];
  uint64_t stage_sent_[2] = {0, 0};  // the send mark after each buffer's last send
  int turn_ = 0;
  bool sent_ = false;
};

DCOMM_NAMESPACE_END
