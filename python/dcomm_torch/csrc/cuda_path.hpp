// CUDA tensors on the dcomm backend (built when torch has CUDA and nvcc is found), with the
// stream semantics of torch's NCCL backend: each call runs on the group's communication
// stream, which first waits for the caller's current stream; the tensors are recorded on the
// communication stream for the caching allocator; the Work's wait() makes the current stream
// wait for the call's end event (the host does not block), and its future is CUDA-aware (it
// completes on the communication stream, so `then` callbacks and their streams are ordered
// after the collective). The device communicator is made at the first CUDA call, on that
// tensor's device: every rank makes its first CUDA call at the same point, as with NCCL.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

#include <functional>
#include <memory>
#include <vector>

#include "device_glue.hpp"
#include "process_group.hpp"

namespace dcomm_torch {

class CudaWork : public c10d::Work {
 public:
  CudaWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::shared_ptr<at::cuda::CUDAEvent> end,
           c10::cuda::CUDAStream stream, DeviceHandle* device);
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  void check_error() const;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<at::cuda::CUDAEvent> end_;
  c10::cuda::CUDAStream stream_;
  DeviceHandle* device_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class CudaPath {
 public:
  CudaPath(ProcessGroupDcomm& pg, int device);
  ~CudaPath();
  CudaPath(const CudaPath&) = delete;
  CudaPath& operator=(const CudaPath&) = delete;

  c10::intrusive_ptr<c10d::Work> allreduce(at::Tensor& t, const Reduction& r);
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts, const Reduction& r);
  c10::intrusive_ptr<c10d::Work> broadcast(at::Tensor& t, int root);
  c10::intrusive_ptr<c10d::Work> reduce(at::Tensor& t, const Reduction& r, int root);
  c10::intrusive_ptr<c10d::Work> allgather_base(at::Tensor& out, at::Tensor& in);
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<at::Tensor>& outs, at::Tensor& in);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_base(at::Tensor& out, at::Tensor& in, const Reduction& r);
  c10::intrusive_ptr<c10d::Work> reduce_scatter(at::Tensor& out, std::vector<at::Tensor>& ins, const Reduction& r);
  c10::intrusive_ptr<c10d::Work> gather(std::vector<at::Tensor>& outs, at::Tensor& in, int root);
  c10::intrusive_ptr<c10d::Work> scatter(at::Tensor& out, std::vector<at::Tensor>& ins, int root);
  c10::intrusive_ptr<c10d::Work> alltoall(at::Tensor& out, at::Tensor& in, const ByteSplits& out_bytes,
                                          const ByteSplits& in_bytes);
  c10::intrusive_ptr<c10d::Work> point_to_point(bool is_send, at::Tensor& t, int peer, int tag);
  void synchronize();
  void group_start();
  bool in_group() const { return group_depth_ > 0; }
  c10::intrusive_ptr<c10d::Work> group_end();

 private:
  // What a call leaves for after its kernel is launched: the temporaries the kernel reads or
  // writes (alive until then), and the copies out of them into the caller's tensors. Inside a
  // group (coalescing) the kernel is launched by group_end(), so these wait for it.
  struct AfterLaunch {
    std::vector<at::Tensor> kept;
    std::vector<std::function<void()>> copies;
    at::Tensor keep(at::Tensor t) {
      kept.push_back(t);
      return t;
    }
  };
  // Runs `body(stream, after)` on the communication stream after the current stream's work,
  // the tensors recorded there; returns the Work whose end event follows it.
  template <class Body>
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const std::vector<at::Tensor>& touched,
                                     std::vector<at::Tensor> outputs, Body body);
  void finish(AfterLaunch& after);
  dcomm::Status exchange(dcomm::Exchange what, int root, const std::vector<dcomm::Block>& send,
                         const std::vector<dcomm::Block>& recv, void* stream);
  void check_device(const at::Tensor& t) const;

  ProcessGroupDcomm& pg_;
  int device_;
  DeviceHandle* comm_ = nullptr;
  c10::cuda::CUDAStream stream_;
  int group_depth_ = 0;
  std::vector<at::Tensor> group_outputs_;
  std::vector<AfterLaunch> group_after_;
  std::shared_ptr<at::cuda::CUDAEvent> group_end_;  // recorded by the outermost group_end()
};

}  // namespace dcomm_torch
