// The backend's one thread into its communicator: jobs run in submission order, one at a
// time (a dcomm communicator is driven by one thread at a time). A job submitted while the
// queue is idle and marked `inline_ok` runs at once on the caller's thread: a small collective
// then costs no hand-off to another thread and back (a futex wake-up each way, several
// microseconds); a large one goes to the worker, so the caller (DDP's backward pass) goes on
// computing while it runs.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace dcomm_torch {

class OpQueue {
 public:
  OpQueue() = default;
  ~OpQueue() { stop(); }
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  void submit(std::function<void()> job, bool inline_ok) {
    std::unique_lock<std::mutex> lock(mu_);
    if (inline_ok && !busy_ && jobs_.empty()) {
      run(lock, job);
      return;
    }
    jobs_.push_back(std::move(job));
    if (!worker_.joinable()) worker_ = std::thread([this] { loop(); });
    cv_.notify_all();
  }

  // Runs what is queued, then ends the worker.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return (!jobs_.empty() && !busy_) || (stopping_ && jobs_.empty() && !busy_); });
      if (jobs_.empty()) return;
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

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace dcomm_torch
