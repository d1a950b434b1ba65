// Jobs run one at a time in submission order, by a worker thread started with the first job
// it is given, or (when the queue is idle and the caller allows it) at once on the caller's
// thread: a short job then costs no hand-off to another thread and back (a futex wake-up each
// way, several microseconds). The communicator's executor (comm/work.hpp) and the torch
// backend's one thread into its communicator are this queue.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

class SerialQueue {
 public:
  SerialQueue() = default;
  ~SerialQueue() { stop(); }
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Runs `job` now, on this thread, when `inline_ok` and nothing is queued or running;
  // otherwise queues it for the worker. True when it ran here.
  bool submit(std::function<void()> job, bool inline_ok) {
    std::unique_lock<std::mutex> lock(mu_);
    if (inline_ok && !busy_ && jobs_.empty()) {
      run(lock, job);
      return true;
    }
    jobs_.push_back(std::move(job));
    if (!worker_.joinable()) {
      worker_ = std::thread([this] { loop(); });
      started_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    return false;
  }

  // Whether a job was ever queued for the worker. Until then only the threads that submit run
  // jobs, which a caller that drives its queue from one thread may rely on without a lock.
  bool worker_started() const { return started_.load(std::memory_order_acquire); }

  // Jobs queued or running.
  size_t pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size() + (busy_ ? 1 : 0);
  }

  // Runs what is queued, then ends the worker. A job submitted later starts a new one.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = false;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !busy_ && (!jobs_.empty() || stopping_); });
      if (jobs_.empty()) return;  // stopping, with nothing left
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      run(lock, job);
    }
  }

  // One job, with the queue marked busy and unlocked while it runs.
  void run(std::unique_lock<std::mutex>& lock, const std::function<void()>& job) {
    busy_ = true;
    lock.unlock();
    job();
    lock.lock();
    busy_ = false;
    cv_.notify_all();
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false;
  bool stopping_ = false;
  std::atomic<bool> started_{false};
  std::thread worker_;
};

DCOMM_NAMESPACE_END
