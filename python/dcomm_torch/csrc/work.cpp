// The dcomm torch backend's Work handles (process_group.hpp), and how a dcomm error reaches
// Python.
#include "process_group.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <stdexcept>

namespace dcomm_torch {

using dcomm::Status;

[[noreturn]] void raise(const Status& s) { throw std::runtime_error(s.message()); }

// ---- Work --------------------------------------------------------------------------------

namespace {
const c10::TypePtr& tensor_list_type() {
  static const c10::TypePtr type = c10::ListType::create(c10::TensorType::get());
  return type;
}
void finish_future(c10::ivalue::Future& f, std::exception_ptr e, const std::vector<at::Tensor>& outputs) {
  if (e) f.setError(e);
  else f.markCompleted(c10::IValue(outputs));
}
}  // namespace

// Exactly one of complete() and get_future() completes a future: whichever sees both the
// future and the end.
void WorkState::complete(std::exception_ptr e) {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> lock(mu);
    error = e;
    finished = std::chrono::steady_clock::now();
    if (started == std::chrono::steady_clock::time_point{}) started = finished;
    done = true;
    f = future;
  }
  if (hub) hub->finished(*this);  // before waiters wake: a hook has seen the call when wait() returns
  cv.notify_all();
  if (f) finish_future(*f, e, outputs);
}

c10::intrusive_ptr<c10::ivalue::Future> WorkState::get_future() {
  std::unique_lock<std::mutex> lock(mu);
  if (future) return future;
  future = c10::make_intrusive<c10::ivalue::Future>(tensor_list_type());
  auto f = future;
  const bool finished = done;
  lock.unlock();
  if (finished) finish_future(*f, error, outputs);
  return f;
}

void DcommWork::start_if_pending() {
  std::function<void()> start;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    start = std::move(state_->start);
    state_->start = nullptr;
  }
  if (start) start();
}

bool DcommWork::isCompleted() {
  start_if_pending();
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}
bool DcommWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done && !state_->error;
}
std::exception_ptr DcommWork::exception() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}
std::vector<at::Tensor> DcommWork::result() { return state_->outputs; }

// Blocks until the call ends (each of its waits has dcomm's deadline); `timeout` > 0 bounds
// this wait only. Rethrows the call's error as a RuntimeError.
bool DcommWork::wait(std::chrono::milliseconds timeout) {
  start_if_pending();
  std::unique_lock<std::mutex> lock(state_->mu);
  if (timeout.count() > 0) {
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; }))
      throw std::runtime_error("dcomm: the operation did not complete within " + std::to_string(timeout.count()) +
                               " ms (wait timeout)");
  } else {
    state_->cv.wait(lock, [&] { return state_->done; });
  }
  if (state_->error) std::rethrow_exception(state_->error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> DcommWork::getFuture() {
  start_if_pending();
  return state_->get_future();
}

}  // namespace dcomm_torch
