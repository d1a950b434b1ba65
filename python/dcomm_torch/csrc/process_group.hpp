// dcomm as a torch.distributed backend ("dcomm"): a ProcessGroup subclass on torch 1.x and a
// Backend subclass on torch 2.x (chosen at compile time), one dcomm communicator per process
// group, rendezvoused through the store torch hands it (rank 0 makes a dcomm unique id and
// puts it there; the others read it), as torch's NCCL backend does.
//
// Host (CPU) tensors: every call is a job on the group's OpQueue, run in call order; small ones
// run at once on the caller's thread when nothing is queued, large ones on a worker thread, so
// the Work torch gets back is asynchronous (wait, is_completed, exception, get_future).
// Point-to-point sends and receives are gathered and run together as one batch (dcomm's
// send/recv group) when some Work of theirs is waited on, or before the next collective: a
// send and a receive posted before waiting progress together, as batch_isend_irecv expects.
// CUDA tensors (a build with CUDA, torch 2.x): cuda_path.hpp.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <dcomm/dcomm.hpp>

#include "op_queue.hpp"

namespace dcomm_torch {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// The completion of one call: what Work and its Future report. The future is made only when
// asked for (DDP asks; a plain dist.all_reduce does not): making and completing one costs
// about 2.5 us, more than a small all_reduce itself.
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::vector<at::Tensor> outputs;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::function<void()> start;  // a point-to-point call not yet started: starts its batch

  void complete(std::exception_ptr e);
  c10::intrusive_ptr<c10::ivalue::Future> get_future();
};

class DcommWork : public c10d::Work {
 public:
  DcommWork(int rank, c10d::OpType type, std::shared_ptr<WorkState> state)
      : c10d::Work(rank, type), state_(std::move(state)) {}
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void start_if_pending();
  std::shared_ptr<WorkState> state_;
};

class CudaPath;  // cuda_path.hpp (builds with CUDA)

class ProcessGroupDcomm : public BackendBase {
 public:
  ProcessGroupDcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  ~ProcessGroupDcomm() override;

  // The creator torch.distributed calls: (store, rank, size, timeout).
  static c10::intrusive_ptr<BackendBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                const std::chrono::duration<float>& timeout);

  const std::string getBackendName() const override { return "dcomm"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
#if TORCH_VERSION_MAJOR >= 2
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#endif

  dcomm::Communicator& comm() { return *comm_; }
  int group_rank() const { return comm_->rank(); }
  int group_size() const { return comm_->size(); }

 private:
  friend class CudaPath;
  using Job = std::function<dcomm::Status()>;

  // Queues `job` (run in call order); outputs are what the Work's result and future hold.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs, size_t bytes, Job job);
  // A send or receive, gathered into the pending batch.
  c10::intrusive_ptr<c10d::Work> point_to_point(c10d::OpType type, std::vector<at::Tensor>& tensors, int peer, int tag);
  void start_pending_p2p();  // runs the gathered sends and receives as one batch

  std::unique_ptr<dcomm::Communicator> comm_;
  size_t inline_bytes_ = 1u << 20;  // DCOMM_TORCH_INLINE_BYTES
  std::unique_ptr<CudaPath> cuda_;
  OpQueue queue_;  // after comm_: stopped (its jobs done) before the communicator goes

  struct PendingOp {
    bool is_send;
    at::Tensor tensor;  // contiguous (a copy of the user's when it was not)
    at::Tensor user;    // the user's tensor, for a receive into a copy
    int peer, tag;
    std::shared_ptr<WorkState> state;
  };
  std::mutex p2p_mu_;
  std::vector<PendingOp> pending_;
  bool coalescing_ = false;
};

// What a dcomm error reads like in Python: a RuntimeError with dcomm's message.
[[noreturn]] void raise(const dcomm::Status& s);
// Which dcomm type a tensor's dtype reduces as (null when it cannot), and the op.
struct Reduction {
  dcomm::DataType type;
  dcomm::ReduceOp op;
  double premul = 1.0;  // PREMUL_SUM: the inputs are multiplied by this first
};
Reduction reduction_for(const at::Tensor& t, const c10d::ReduceOp& op, const char* what);

}  // namespace dcomm_torch
