// A rank's communicator state that every layer below it reads: whether it has failed (the
// first error to abort it, which every wait on any of its connections returns from then on),
// the call it is in, and how a rank whose wait on a peer stalls learns which call that peer is
// in and what it concludes. The communicator owns them; transports, primitives and the proxy hold pointers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// The failure state of one rank's communicator: the first error to abort it wins, and every
// wait on any of its connections returns that error from then on. It also shows the call the
// rank is in (or was last in), for a peer whose wait on this rank stalls and asks why.
class AbortState {
 public:
  // The call a rank is in (or last made), and the one before it: a peer may have finished its
  // part of a call and moved on while this rank still waits for that call's data.
  struct CallInfo {
    CallStamp stamp;
    bool in_call = false;
    CallStamp previous;
  };
  // The call has ended (one store: the stamp stays as it was).
  void end_call() { in_call_.store(false, std::memory_order_relaxed); }
  // Whether the rank is in a call now (one load: the proxy asks on every idle turn of its loop).
  bool in_call() const { return in_call_.load(std::memory_order_relaxed); }
  // One writer (the thread running the rank's calls): a sequence lock, plain stores.
  void publish_call(const CallStamp& s, bool in_call) {
    const uint32_t v = call_version_.load(std::memory_order_relaxed);
    call_version_.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    const CallStamp current{call_a_.load(std::memory_order_relaxed), call_b_.load(std::memory_order_relaxed)};
    if (!(current == s)) {
      prev_a_.store(current.a, std::memory_order_relaxed);
      prev_b_.store(current.b, std::memory_order_relaxed);
    }
    call_a_.store(s.a, std::memory_order_relaxed);
    call_b_.store(s.b, std::memory_order_relaxed);
    in_call_.store(in_call, std::memory_order_relaxed);
    call_version_.store(v + 2, std::memory_order_release);
  }
  CallInfo current_call() const {
    for (;;) {
      const uint32_t v = call_version_.load(std::memory_order_acquire);
      CallInfo c{{call_a_.load(std::memory_order_relaxed), call_b_.load(std::memory_order_relaxed)},
                 in_call_.load(std::memory_order_relaxed),
                 {prev_a_.load(std::memory_order_relaxed), prev_b_.load(std::memory_order_relaxed)}};
      std::atomic_thread_fence(std::memory_order_acquire);
      if (!(v & 1) && call_version_.load(std::memory_order_relaxed) == v) return c;
    }
  }

  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  Status status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }
  // Returns true for the first abort. The hook (set by the communicator) tells every peer
  // directly (the control sockets form a full mesh), so an abort that came from a peer is not
  // passed on again: notify_peers is false for those.
  bool abort(const Status& why, bool notify_peers = true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_.load(std::memory_order_relaxed)) return false;
      status_ = Status(
          why.code() == ErrorCode::kTimeout || why.code() == ErrorCode::kPeerFailure ? why.code() : ErrorCode::kAborted,
          why.message());
      aborted_.store(true, std::memory_order_release);
    }
    if (on_abort_ && notify_peers) on_abort_(why);
    return true;
  }
  void set_hook(std::function<void(const Status&)> hook) { on_abort_ = std::move(hook); }

 private:
  std::atomic<uint32_t> call_version_{0};
  std::atomic<uint64_t> call_a_{0}, call_b_{0}, prev_a_{0}, prev_b_{0};
  std::atomic<bool> in_call_{false};
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  Status status_;
  std::function<void(const Status&)> on_abort_;
};

// How a peer's abort reaches this rank's calls: kAborted when the peer aborted on purpose or
// found the ranks' calls mismatched (the communicator is done, nobody died), kPeerFailure when
// the peer lost a peer or its deadline.
inline ErrorCode remote_abort_code(ErrorCode at_peer) {
  return at_peer == ErrorCode::kAborted ? ErrorCode::kAborted : ErrorCode::kPeerFailure;
}

// Tells a rank whose wait on a peer stalls which call that peer is in (the communicator
// answers: directly for threads of this process, over the control socket for others).
class CallDirectory {
 public:
  virtual ~CallDirectory() = default;
  // Nothing when it cannot be learned within `within`.
  virtual std::optional<AbortState::CallInfo> call_of(int peer, std::chrono::milliseconds within) = 0;
};

// What a wait on `peer` that has stalled for a while concludes from the call the peer is in.
// If the peer is in, or has just made, the call of this number with other arguments (a root,
// say), the ranks' calls differ, which no slot may ever show (ranks that only wait on each
// other): kAborted, naming both. A peer merely ahead (it finished its part; the data is on its
// way) or behind proves nothing, and the wait goes on (ok).
inline Status stalled_on_other_call(CallDirectory& directory, int peer, const std::string& peer_name, int self_rank,
                                    const CallStamp& mine, bool sending) {
  const auto theirs_now = directory.call_of(peer, std::chrono::milliseconds(300));
  if (!theirs_now) return {};
  const uint64_t my_seq = mine.a >> 32;
  auto collective = [](const CallStamp& s) {
    return s.a != 0 && (s.a & 15u) != static_cast<uint64_t>(OpKind::kPointToPoint) + 1;
  };
  for (const CallStamp& theirs : {theirs_now->stamp, theirs_now->previous}) {
    if (!collective(theirs) || (theirs.a >> 32) != my_seq || theirs == mine) continue;
    return make_error(ErrorCode::kAborted, "rank ", peer,
                      theirs == theirs_now->stamp && theirs_now->in_call ? " is in " : " made ", describe(theirs, true),
                      " while rank ", self_rank, " waits in ", describe(mine, true), " for ",
                      sending ? "room at it" : "data from it", " (", peer_name,
                      "): every rank must make the same calls, in the same order, with the same types, ops, counts "
                      "and roots");
  }
  return {};
}

DCOMM_NAMESPACE_END
