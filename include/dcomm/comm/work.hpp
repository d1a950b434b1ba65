// Work: the handle an asynchronous call returns. The operation runs on the communicator's
// worker thread, in call order with every other operation of that communicator; its buffers
// must stay valid until wait() returns or test() says done. Also how calls enter a
// communicator: one thread at a time (CallGuard), then inline or through the Executor's worker.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>

#include "dcomm/core/config.hpp"
#include "dcomm/core/serial_queue.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// One thread at a time in a communicator's calls: a second thread that enters while a call is
// in progress gets an error that says so, instead of corrupting the first call. One atomic
// exchange on entry, one store on the way out.
class CallGuard {
 public:
  explicit CallGuard(std::atomic<bool>& busy)
      : busy_(busy), entered_(!busy.exchange(true, std::memory_order_acquire)) {}
  ~CallGuard() {
    if (entered_) busy_.store(false, std::memory_order_release);
  }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;
  bool entered() const { return entered_; }
  static Status refusal(const char* what, int rank) {
    return invalid_argument(what, " on rank ", rank, ": another thread is inside a call on this communicator; a ",
                            "communicator is driven by one thread at a time (use one communicator per thread, or "
                            "the *_async calls from one thread)");
  }

 private:
  std::atomic<bool>& busy_;
  bool entered_;
};

struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;

  void finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
};
}  // namespace detail

class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> s) : s_(std::move(s)) {}
  static Work completed(Status s) {
    auto st = std::make_shared<detail::WorkState>();
    st->finish(std::move(s));
    return Work(st);
  }

  // Blocks until the operation ends; it always does, since each of its waits has the
  // communicator's deadline. Returns the operation's Status.
  Status wait() const {
    if (!s_) return make_error(ErrorCode::kInvalidArgument, "wait() on an empty Work handle");
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->cv.wait(lock, [&] { return s_->done; });
    return s_->status;
  }
  // Like wait(), but gives up after `timeout` with kTimeout (the operation keeps running).
  Status wait_for(std::chrono::milliseconds timeout) const {
    if (!s_) return make_error(ErrorCode::kInvalidArgument, "wait_for() on an empty Work handle");
    std::unique_lock<std::mutex> lock(s_->mu);
    if (!s_->cv.wait_for(lock, timeout, [&] { return s_->done; }))
      return make_error(ErrorCode::kTimeout, "operation still running after ", timeout.count(), " ms");
    return s_->status;
  }
  // True once the operation has ended (then wait() returns at once).
  bool test() const {
    if (!s_) return true;
    std::lock_guard<std::mutex> lock(s_->mu);
    return s_->done;
  }

 private:
  std::shared_ptr<detail::WorkState> s_;
};

// Runs a communicator's operations one at a time, in submission order (core/serial_queue.hpp).
// A blocking call runs on the caller's thread when nothing is queued (no hand-off latency);
// otherwise it queues behind the asynchronous calls and waits.
class Executor {
 public:
  ~Executor() { shutdown(); }

  template <class F>
  Status run_blocking(F&& fn) {
    // No asynchronous call was ever made: the calling thread is the only one that runs
    // operations (one thread drives a communicator at a time), so no lock is needed.
    if (!queue_.worker_started()) return fn();
    return start(std::function<Status()>(std::forward<F>(fn)), /*inline_ok=*/true).wait();
  }

  Work submit(std::function<Status()> fn) { return start(std::move(fn), /*inline_ok=*/false); }

  // Calls queued or running on the worker.
  size_t in_flight() const { return queue_.pending(); }
  // Finishes what is queued and stops the worker.
  void shutdown() { queue_.stop(); }

 private:
  Work start(std::function<Status()> fn, bool inline_ok) {
    auto state = std::make_shared<detail::WorkState>();
    queue_.submit([fn = std::move(fn), state] { state->finish(fn()); }, inline_ok);
    return Work(state);
  }

  SerialQueue queue_;
};

DCOMM_NAMESPACE_END
