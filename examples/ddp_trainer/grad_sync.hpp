// Data-parallel gradient averaging as DistributedDataParallel does it, on dcomm: parameters
// grouped into buckets of about `bucket_bytes` in reverse order (the order backward produces
// their gradients), each bucket one flat tensor in the wire dtype (float32, bfloat16 or
// float16; dcomm accumulates 16-bit types in float32). An autograd hook on every parameter
// copies its gradient into its bucket; the moment a bucket is complete its all_reduce (average)
// starts asynchronously, so communication overlaps the rest of backward. Buckets start in index
// order on every rank (a bucket completed early waits for the ones before it), so the ranks'
// calls match. finish() waits for them all and writes the averages back into the gradients.
//
// Gradient accumulation (no_sync()): a micro-batch begun with sync = false only accumulates
// into .grad; the next synchronised one sends .grad plus its own gradient.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <dcomm/dcomm.hpp>

namespace trainer {

inline dcomm::DataType wire_type(torch::Dtype t) {
  switch (t) {
    case torch::kFloat32: return dcomm::DataType::kFloat32;
    case torch::kBFloat16: return dcomm::DataType::kBfloat16;
    case torch::kFloat16: return dcomm::DataType::kFloat16;
    default: throw std::invalid_argument("gradients travel as float32, bfloat16 or float16");
  }
}

inline void check(const dcomm::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.message());
}

class GradSync {
 public:
  GradSync(dcomm::Communicator& comm, std::vector<torch::Tensor> params, size_t bucket_bytes, torch::Dtype wire,
           bool overlap)
      : comm_(&comm), params_(std::move(params)), wire_(wire), overlap_(overlap) {
    const size_t elem = torch::elementSize(wire);
    slot_.resize(params_.size());
    for (size_t k = params_.size(); k-- > 0;) {  // reverse order
      const auto n = static_cast<size_t>(params_[k].numel());
      if (buckets_.empty() || (buckets_.back().bytes > 0 && buckets_.back().bytes + n * elem > bucket_bytes))
        buckets_.push_back({});
      Bucket& b = buckets_.back();
      slot_[k] = {buckets_.size() - 1, b.bytes / elem};
      b.params.push_back(k);
      b.bytes += n * elem;
    }
    for (auto& b : buckets_) b.flat = torch::empty({static_cast<int64_t>(b.bytes / elem)}, torch::dtype(wire));
    for (size_t k = 0; k < params_.size(); ++k)
      params_[k].register_hook([this, k](torch::Tensor grad) { on_grad(k, grad); });
  }

  size_t buckets() const { return buckets_.size(); }

  // After a shrink (--elastic): the buckets' calls go to the survivors' communicator.
  void use(dcomm::Communicator& comm) { comm_ = &comm; }

  // Every rank starts from `root`'s parameters (rank 0's at start-up).
  void broadcast_parameters(int root = 0) {
    torch::NoGradGuard no_grad;
    for (auto& p : params_)
      check(
          comm_->broadcast(p.data_ptr(), p.data_ptr(), static_cast<size_t>(p.numel()), dcomm::DataType::kFloat32, root),
          "broadcasting the parameters");
  }

  // Before each micro-batch's backward: sync = this one's gradients are averaged (the last of
  // an accumulation; false is no_sync()).
  void begin(bool sync) {
    sync_ = sync;
    for (auto& b : buckets_) {
      b.ready = 0;
      b.work = {};
    }
    ready_.assign(params_.size(), false);
    next_ = 0;
  }

  // After backward: starts what has not started (all of it without overlap; parameters that
  // got no gradient send their .grad or zeros), waits for every bucket, and writes the averages
  // into .grad. Returns the seconds spent here: the communication backward did not hide.
  double finish() {
    if (!sync_) return 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t k = 0; k < params_.size(); ++k)
      if (!ready_[k]) {
        auto& p = params_[k];
        auto dst = slice(k);
        if (p.grad().defined()) dst.copy_(p.grad().reshape(-1));
        else dst.zero_();
        mark_ready(k);
      }
    start_ready(/*all_complete=*/true);
    for (auto& b : buckets_) check(b.work.wait(), "averaging the gradients");
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < params_.size(); ++k) {
      auto& p = params_[k];
      auto avg = slice(k).view(p.sizes());
      if (p.grad().defined()) p.mutable_grad().copy_(avg);
      else p.mutable_grad() = avg.to(torch::kFloat32);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  struct Bucket {
    std::vector<size_t> params;
    size_t bytes = 0;
    torch::Tensor flat;
    size_t ready = 0;
    dcomm::Work work;
  };
  struct Slot {
    size_t bucket, offset;  // in elements
  };

  // Parameter k's place in its bucket's flat buffer.
  torch::Tensor slice(size_t k) {
    const auto [b, off] = slot_[k];
    return buckets_[b].flat.narrow(0, static_cast<int64_t>(off), params_[k].numel());
  }

  void on_grad(size_t k, const torch::Tensor& grad) {
    if (!sync_ || ready_[k]) return;
    auto& p = params_[k];
    auto dst = slice(k);
    torch::NoGradGuard no_grad;
    if (p.grad().defined()) dst.copy_((p.grad() + grad).reshape(-1));  // accumulated micro-batches + this one
    else dst.copy_(grad.reshape(-1));
    mark_ready(k);
    if (overlap_) start_ready(false);
  }

  void mark_ready(size_t k) {
    ready_[k] = true;
    ++buckets_[slot_[k].bucket].ready;
  }

  // Starts the complete buckets from the next one in order.
  void start_ready(bool all_complete) {
    while (next_ < buckets_.size() && (all_complete || buckets_[next_].ready == buckets_[next_].params.size())) {
      Bucket& b = buckets_[next_++];
      b.work = comm_->all_reduce_async(b.flat.data_ptr(), b.flat.data_ptr(), static_cast<size_t>(b.flat.numel()),
                                       wire_type(wire_), dcomm::ReduceOp::kAvg);
    }
  }

  dcomm::Communicator* comm_;
  std::vector<torch::Tensor> params_;
  torch::Dtype wire_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slot_;
  std::vector<bool> ready_;
  size_t next_ = 0;
  bool sync_ = true;
};

}  // namespace trainer
