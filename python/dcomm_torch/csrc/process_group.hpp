// dcomm as a torch.distributed backend ("dcomm"): a ProcessGroup subclass on torch 1.x and a
// Backend subclass on torch 2.x (chosen at compile time), one dcomm communicator per process
// group, rendezvoused through the store torch hands it (rank 0 makes a dcomm unique id and
// puts it there; the others read it), as torch's NCCL backend does.
//
// Host (CPU) tensors: every call is a job on the group's queue (dcomm's SerialQueue), run in call
// order; small ones run at once on the caller's thread when nothing is queued (no hand-off), large
// ones on a worker thread, so the caller (DDP's backward pass) goes on computing while they run and
// the Work torch gets back is asynchronous (wait, is_completed, exception, get_future).
// Point-to-point sends and receives are gathered and run together as one batch (dcomm's
// send/recv group) when some Work of theirs is waited on, or before the next collective: a
// send and a receive posted before waiting progress together, as batch_isend_irecv expects.
// CUDA tensors (a build with CUDA, torch 2.x): cuda_path.hpp.
#pragma once

#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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

namespace dcomm_torch {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif
// The hooks torch 2.15 added to c10d::Backend (abort and completion hooks, ephemeral
// timeouts, time estimation, completion keys); 2.11 (the GPU machine's) lacks them.
#define DCOMM_TORCH_2_15 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15))

struct WorkState;

inline size_t nbytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }
// Each tensor as a block of bytes (algo/exchange.hpp), in list order.
inline std::vector<dcomm::Block> tensor_blocks(const std::vector<at::Tensor>& ts) {
  std::vector<dcomm::Block> out;
  for (const auto& t : ts) out.push_back({t.data_ptr(), nbytes(t)});
  return out;
}
// all_to_all_single's splits as bytes per rank: counts and displacements (MPI_Alltoallv's).
struct ByteSplits {
  std::vector<size_t> counts, displs;
};

// What a group's calls report when they end, shared by the group and its Works (a Work may
// outlive its group): the hooks torch registers, the group's first error (getError), and the
// temporary timeout extensions (addEphemeralTimeout) each waiting for the call that ends them.
struct Completions {
  std::mutex mu;
  std::map<int64_t, std::function<void()>> abort_hooks;
  std::map<int64_t, std::function<void(uint64_t key, float ms)>> completion_hooks;
  std::function<void(const WorkState&)> on_completion;  // torch's registerOnCompletionHook
  std::atomic<int> error{0};                            // a c10d::ErrorType
  bool abort_hooks_ran = false;
  std::chrono::milliseconds timeout{0};  // the group's, set by setTimeout
  struct Extension {
    std::chrono::milliseconds extra;
    uint64_t ended_by;  // the key of the first call made after it (0: none yet)
  };
  std::vector<Extension> extensions;

  // The deadline of a call made now, whose key is `key` (it claims unclaimed extensions).
  std::chrono::milliseconds timeout_for(uint64_t key);
  // A call failed with `s`: the group's error is set (the first one stays) and the abort
  // hooks run, once, before the failure is reported.
  void failed(const dcomm::Status& s);
  void run_abort_hooks();
  void finished(const WorkState& w);
};

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
  // For torch's hooks and Work's getters: the call's sequence number in its group (also its
  // completion key), type, deadline, and when it ran.
  uint64_t seq = 0;
  c10d::OpType type = c10d::OpType::UNKNOWN;
  std::chrono::milliseconds timeout{0};
  std::chrono::steady_clock::time_point started{}, finished{};
  std::shared_ptr<Completions> hub;

  std::chrono::duration<float, std::milli> ran_for() const { return finished - started; }
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
#if TORCH_VERSION_MAJOR >= 2
  float getDuration() const override;
  uint64_t getSequencenumber() const override { return state_->seq; }
#endif
#if DCOMM_TORCH_2_15
  std::chrono::milliseconds getTimeout() const override { return state_->timeout; }
  uint64_t getCompletionKey() const override { return state_->seq; }
#endif

 private:
  void start_if_pending();
  std::shared_ptr<WorkState> state_;
};

class CudaPath;  // cuda_path.hpp (builds with CUDA)

class ProcessGroupDcomm : public BackendBase {
 public:
  ProcessGroupDcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  // A group over a communicator split from another's (split, perform_nocolor_split).
  ProcessGroupDcomm(std::unique_ptr<dcomm::Communicator> comm, std::chrono::milliseconds timeout);
  // A group with no communicator until reconfigure() (torch 2.15's enable_reconfigure).
  ProcessGroupDcomm(int rank, int size, std::chrono::milliseconds timeout);
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

  // torch 2's hooks (backend_hooks.cpp).
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  c10::intrusive_ptr<BackendBase> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                        const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<BackendBase> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                        const c10::intrusive_ptr<Options>& opts, const int& rank,
                                        const int& size) override;
  void perform_nocolor_split();  // a rank in none of split's groups (torch's new_group path)
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  void setSequenceNumberForGroup() override {}  // every group starts at 0 on every rank
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10d::ErrorType getError() override { return static_cast<c10d::ErrorType>(hub_->error.load()); }
  void abort() override;
  void shutdown() override;
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  void waitForPendingWorks() override;
  void enableCollectivesTiming() override {}  // every call is timed
  void eagerConnectSingleDevice(at::Device device) override;
  std::shared_ptr<c10::Allocator> getMemAllocator() override;
  at::Tensor allocateTensor(long size, at::TensorOptions options) override;
  bool supportsTensorAlloc(c10::DeviceIndex device) override { return device < 0; }  // host memory
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
#if DCOMM_TORCH_2_15
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                    const c10d::GatherOptions& opts) override;
  bool supportsTimeEstimation() const override { return true; }
  void startTimeEstimate() override;
  float endTimeEstimate() override;
  void addEphemeralTimeout(const std::chrono::milliseconds& timeout) override;
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t id) override;
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t id) override;
  bool supportsWindow() const override { return true; }  // window.cpp
  c10::intrusive_ptr<c10d::Window> new_window(const std::optional<at::Tensor>& tensor) override;
  // dist.shrink_group (backend_hooks.cpp): dcomm::Communicator::shrink; flag 1 is SHRINK_ABORT.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<BackendBase> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                         const c10::intrusive_ptr<Options>& opts_override) override;
#endif
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  // torch 2.15's reconfigure (backend_hooks.cpp). A handle is a dcomm unique id whose store this
  // process serves; reconfigure makes a new communicator over the handles' processes, in the
  // list's order (a set's: sorted), rendezvoused on the first one's store, and the group takes
  // the rank and size it has there.
  bool supportsReconfigure() const override { return true; }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif
#endif

  dcomm::Communicator& comm();
  int group_rank() const { return rank_; }  // the communicator's (a reconfigure changes both)
  int group_size() const { return size_; }

 private:
  friend class CudaPath;
  friend class DcommWindow;
  using Job = std::function<dcomm::Status()>;

  // A communicator made from this group's by `make` (split, shrink), run on the queue and waited.
  std::unique_ptr<dcomm::Communicator> on_queue(
      const char* what, const std::function<dcomm::Result<std::unique_ptr<dcomm::Communicator>>()>& make);
  // Queues `job` (run in call order); outputs are what the Work's result and future hold.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outputs, size_t bytes, Job job);
  // A send or receive, gathered into the pending batch.
  c10::intrusive_ptr<c10d::Work> point_to_point(c10d::OpType type, std::vector<at::Tensor>& tensors, int peer, int tag);
  void start_pending_p2p();  // runs the gathered sends and receives as one batch
  // A new call's state: its sequence number, type, deadline and the group's hub.
  std::shared_ptr<WorkState> new_state(c10d::OpType type, std::vector<at::Tensor> outputs);
  void begin(WorkState& state);
  static std::chrono::milliseconds group_timeout(std::chrono::milliseconds torch_timeout,
                                                 std::chrono::milliseconds configured);
  void read_inline_bytes();  // DCOMM_TORCH_INLINE_BYTES
  // Time estimation (torch 2.15's _time_estimator): while on, calls are predicted by dcomm's
  // cost model and not run; false when off.
  bool estimated(c10d::OpType type, size_t bytes);
  void check_open(const char* what) const;

  std::shared_ptr<Completions> hub_ = std::make_shared<Completions>();
  std::atomic<uint64_t> seq_{0};
  std::atomic<bool> estimating_{false};
  double estimate_us_ = 0;
  bool shut_down_ = false;
  std::unique_ptr<dcomm::Communicator> comm_;  // null until reconfigure() under enable_reconfigure
  dcomm::Config config_;                       // what the next reconfigure() makes a communicator with
  // This process's reconfigure handle, made on first asking, and the store it serves.
  mutable std::mutex handle_mu_;
  mutable std::optional<dcomm::UniqueId> handle_;
  mutable std::shared_ptr<dcomm::StoreServer> handle_store_;
  std::vector<int64_t> used_uuids_;
  size_t inline_bytes_ = 1u << 20;  // DCOMM_TORCH_INLINE_BYTES
  std::unique_ptr<CudaPath> cuda_;
  dcomm::SerialQueue queue_;  // after comm_: stopped (its jobs done) before the communicator goes

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

// Tensor checks and copies every call uses (collectives.cpp, process_group.cpp).
// Dense tensors only; the device checked by the caller.
inline void check_dense(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.layout() == at::kStrided, "dcomm: ", what, " does not support ", t.layout(),
              " tensors (only dense ones)");
}
inline void check_one(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "dcomm: ", what, " takes one tensor per process, got ", ts.size());
  check_dense(ts[0], what);
}

// `t` itself when contiguous, else a contiguous copy (written back by `write_back`).
inline at::Tensor contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
inline void write_back(const at::Tensor& user, const at::Tensor& buf) {
  if (!user.is_same(buf)) user.copy_(buf);
}

}  // namespace dcomm_torch
