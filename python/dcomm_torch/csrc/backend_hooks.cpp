// What torch 2's c10d::Backend asks of a backend beyond the collectives (process_group.hpp):
// split and merge, sequence numbers, timeouts, errors, abort and shutdown, hooks, time
// estimation, tensors in dcomm's shareable memory, sparse all_reduce. docs/pytorch.md has the
// table of every hook and what dcomm does with it.
#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "process_group.hpp"
#ifdef DCOMM_TORCH_CUDA
#include "cuda_path.hpp"
#endif

namespace dcomm_torch {

using dcomm::Status;

// ---- Completions (every torch line) ----------------------------------------------------------

std::chrono::milliseconds Completions::timeout_for(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu);
  auto t = timeout;
  for (auto& e : extensions) {
    if (!e.ended_by) e.ended_by = key;
    t += e.extra;
  }
  return t;
}

// c10d::ErrorType's values (torch 2; torch 1.13 has no getError).
constexpr int kNoError = 0, kTimeoutError = 1, kCommError = 2, kRemoteError = 3;

void Completions::failed(const dcomm::Status& s) {
  const int type = s.code() == dcomm::ErrorCode::kTimeout ? kTimeoutError
                   : s.code() == dcomm::ErrorCode::kPeerFailure || s.code() == dcomm::ErrorCode::kAborted ? kRemoteError
                                                                                                          : kCommError;
  int none = kNoError;
  error.compare_exchange_strong(none, type);
  run_abort_hooks();
}

void Completions::run_abort_hooks() {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (abort_hooks_ran) return;
    abort_hooks_ran = true;
    for (auto& [id, h] : abort_hooks) hooks.push_back(h);
  }
  for (auto& h : hooks) {
    try {
      h();
    } catch (const std::exception& e) {
      TORCH_WARN("dcomm: an abort hook raised: ", e.what());
    }
  }
}

void Completions::finished(const WorkState& w) {
  std::vector<std::function<void(uint64_t, float)>> hooks;
  std::function<void(const WorkState&)> legacy;
  {
    std::lock_guard<std::mutex> lock(mu);
    std::erase_if(extensions, [&](const Extension& e) { return e.ended_by == w.seq; });
    for (auto& [id, h] : completion_hooks) hooks.push_back(h);
    legacy = on_completion;
  }
  const float ms = w.ran_for().count();
  try {
    for (auto& h : hooks) h(w.seq, ms);
    if (legacy) legacy(w);
  } catch (const std::exception& e) {
    TORCH_WARN("dcomm: a completion hook raised: ", e.what());
  }
}

#if TORCH_VERSION_MAJOR < 2
bool ProcessGroupDcomm::estimated(c10d::OpType, size_t) { return false; }
#else
float DcommWork::getDuration() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  TORCH_CHECK(state_->done, "dcomm: getDuration of a call that has not ended");
  return state_->ran_for().count();
}

// ---- split and merge -------------------------------------------------------------------------

// A communicator made from this group's (split, shrink), in call order on the group's queue.
std::unique_ptr<dcomm::Communicator> ProcessGroupDcomm::on_queue(
    const char* what, const std::function<dcomm::Result<std::unique_ptr<dcomm::Communicator>>()>& make) {
  std::unique_ptr<dcomm::Communicator> child;
  enqueue(c10d::OpType::UNKNOWN, {}, 0, [&] {
    auto made = make();
    if (!made.ok()) return made.status().with_context(std::string("dcomm backend: ") + what);
    child = std::move(*made);
    return Status{};
  })->wait();
  return child;
}

// torch calls split on every rank of this group, each with the ranks (of this group) of its
// own new group; a rank in none passes a group without itself. dcomm's split is collective
// over this group: color = the new group's lowest rank, key = the place in `ranks`. The
// child's links are made through this group's rendezvous (no new store, no new id).
c10::intrusive_ptr<BackendBase> ProcessGroupDcomm::split(const c10::intrusive_ptr<c10d::Store>&,
                                                         const std::vector<int>& ranks,
                                                         const c10::intrusive_ptr<Options>& opts) {
  const int me = group_rank();
  for (int r : ranks)
    TORCH_CHECK(r >= 0 && r < group_size(), "dcomm: split: rank ", r, " is not in this group of ", group_size());
  const auto at = std::find(ranks.begin(), ranks.end(), me);
  const int color = at == ranks.end() ? -1 : *std::min_element(ranks.begin(), ranks.end());
  const int key = static_cast<int>(at - ranks.begin());
  auto child = on_queue("split", [&] { return comm_->split(color, key); });
  if (!child) return {};
  TORCH_CHECK(child->size() == static_cast<int>(ranks.size()), "dcomm: split: ranks disagree on the group of rank ", me,
              ": ", child->size(), " ranks joined, this rank named ", ranks.size());
  const auto timeout = opts ? opts->timeout : std::chrono::milliseconds(0);
  return c10::make_intrusive<ProcessGroupDcomm>(std::move(child), timeout);
}

// What split_group hands each child (torch clones it and sets the group's name and ranks).
c10::intrusive_ptr<BackendBase::Options> ProcessGroupDcomm::getBackendOptions() {
  std::lock_guard<std::mutex> lock(hub_->mu);  // setTimeout writes it under the lock
  return c10::make_intrusive<Options>("dcomm", hub_->timeout);
}

void ProcessGroupDcomm::perform_nocolor_split() { split({}, {}, {}); }

#if DCOMM_TORCH_2_15
// dist.shrink_group on the survivors. SHRINK_ABORT revokes first, from this thread, so a call of
// this group's queue that waits for the excluded ranks ends and the shrink can run behind it;
// SHRINK_DEFAULT refuses while a call is queued or running (torch's rule, as NCCL's).
c10::intrusive_ptr<BackendBase> ProcessGroupDcomm::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                          int shrink_flags,
                                                          const c10::intrusive_ptr<Options>& opts_override) {
  TORCH_CHECK(shrink_flags == 0 || shrink_flags == 1, "dcomm: shrink_flags ", shrink_flags,
              " is neither SHRINK_DEFAULT (0) nor SHRINK_ABORT (1)");
  const auto mode = shrink_flags == 1 ? dcomm::ShrinkMode::kAbort : dcomm::ShrinkMode::kDefault;
  if (mode == dcomm::ShrinkMode::kAbort) comm_->revoke();
  else
    TORCH_CHECK(queue_.pending() == 0, "dcomm: shrink_group on rank ", group_rank(),
                ": a call is still queued or running on this group; wait for it, or pass SHRINK_ABORT");
  const std::vector<int> excluded(ranks_to_exclude.begin(), ranks_to_exclude.end());
  auto child = on_queue("shrink", [&] { return comm_->shrink(excluded, mode); });
  const auto timeout = opts_override ? opts_override->timeout : comm_->config().timeout;
  return c10::make_intrusive<ProcessGroupDcomm>(std::move(child), timeout);
}
#endif

#ifdef C10D_BACKEND_HAS_RECONFIGURE
// The handle: a dcomm unique id (its address, nonce and secret) for a store this process serves
// from the first asking on, for every reconfigure it comes first in.
c10d::ReconfigureHandle ProcessGroupDcomm::get_reconfigure_handle() const {
  std::lock_guard<std::mutex> lock(handle_mu_);
  if (!handle_) {
    auto id = dcomm::UniqueId::create();
    if (!id.ok()) raise(id.status().with_context("dcomm: get_reconfigure_handle"));
    handle_store_ = dcomm::detail::claim_store(id->address);  // held: it outlives each communicator
    handle_ = *id;
  }
  return handle_->to_string();
}

// Every member calls it with the same uuid and handles. The old communicator (if any) is revoked
// first, so calls left waiting on a lost member end ("revoked"), and goes once they have; the new
// one is made on the first handle's store under a prefix of the uuid. Rank and size are this
// process's place in the handles. Synchronous: the Work returned is complete.
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::reconfigure(const c10d::ReconfigureOptions& opts) {
  TORCH_CHECK(!shut_down_, "dcomm: reconfigure on a process group that was shut down");
  TORCH_CHECK(opts.hints.empty(), "dcomm: reconfigure takes no hints; got '", opts.hints.begin()->first, "'");
  TORCH_CHECK(std::find(used_uuids_.begin(), used_uuids_.end(), opts.uuid) == used_uuids_.end(), "dcomm: reconfigure ",
              "uuid ", opts.uuid, " was used already on this group; every reconfigure needs a fresh one");
  std::vector<std::string> handles;
  if (const auto* list = std::get_if<std::vector<c10d::ReconfigureHandle>>(&opts.handles)) {
    handles = *list;
  } else {
    const auto& set = std::get<std::unordered_set<c10d::ReconfigureHandle>>(opts.handles);
    handles.assign(set.begin(), set.end());
    std::sort(handles.begin(), handles.end());  // the same order on every member
  }
  const std::string mine = get_reconfigure_handle();
  const auto at = std::find(handles.begin(), handles.end(), mine);  // one pass: the rest is searched once
  const bool twice = at != handles.end() && std::find(at + 1, handles.end(), mine) != handles.end();
  TORCH_CHECK(at != handles.end() && !twice, "dcomm: reconfigure: this process's handle (get_reconfigure_handle) is ",
              twice ? "named more than once in" : "not among", " the ", handles.size(), " handles");
  auto first = dcomm::UniqueId::parse(handles[0]);
  if (!first.ok()) raise(first.status().with_context("dcomm: reconfigure: handle 0"));
  first->nonce ^= static_cast<uint64_t>(opts.uuid) * 0x9E3779B97F4A7C15ull;  // one store prefix per uuid
  const int rank = static_cast<int>(at - handles.begin());
  const int size = static_cast<int>(handles.size());
  dcomm::Config config = config_;
  if (opts.timeout) config.timeout = *opts.timeout;
  if (comm_) {
    comm_->revoke();
    waitForPendingWorks();
  }
  auto made = dcomm::Communicator::init(rank, size, *first, config);
  if (!made.ok()) raise(made.status().with_context(dcomm::detail::cat("dcomm: reconfigure uuid ", opts.uuid)));
#ifdef DCOMM_TORCH_CUDA
  cuda_.reset();  // made again over the new communicator by the next CUDA call
#endif
  comm_ = std::move(*made);
  used_uuids_.push_back(opts.uuid);
  rank_ = rank, size_ = size;
  hub_->error = kNoError;
  auto state = new_state(c10d::OpType::UNKNOWN, {});
  state->complete(nullptr);
  return c10::make_intrusive<DcommWork>(rank, c10d::OpType::UNKNOWN, state);
}
#endif

// merge_remote_group: the store names a new group of `size` ranks (possibly from other jobs);
// it is a new rendezvous by nature.
c10::intrusive_ptr<BackendBase> ProcessGroupDcomm::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                         const c10::intrusive_ptr<Options>& opts, const int& rank,
                                                         const int& size) {
  return c10::make_intrusive<ProcessGroupDcomm>(store, rank, size, opts ? opts->timeout : comm_->config().timeout);
}

// ---- timeouts, errors, abort, shutdown ---------------------------------------------------------

void ProcessGroupDcomm::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK(timeout.count() > 0, "dcomm: setTimeout of ", timeout.count(), " ms (it must be positive)");
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->timeout = timeout;  // calls made from now on (each sets it on the communicator as it starts)
}

// Every rank's calls in flight end with the reason; later calls fail at once.
void ProcessGroupDcomm::abort() {
  hub_->run_abort_hooks();
  if (comm_) comm_->abort("torch.distributed abort() on rank " + std::to_string(rank_));
  int none = kNoError;
  hub_->error.compare_exchange_strong(none, kCommError);
}

// What is queued runs to its end; then the communicator goes (its links closed politely).
void ProcessGroupDcomm::shutdown() {
  if (shut_down_) return;
  waitForPendingWorks();
  queue_.stop();
  shut_down_ = true;
#ifdef DCOMM_TORCH_CUDA
  cuda_.reset();
#endif
  comm_.reset();
}

void ProcessGroupDcomm::waitForPendingWorks() {
  start_pending_p2p();
  auto state = std::make_shared<WorkState>();
  queue_.submit([state] { state->complete(nullptr); }, true);
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return state->done; });
}

void ProcessGroupDcomm::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  TORCH_CHECK(!onCompletionHook_, "dcomm: an onCompletion hook is already registered on this group");
  onCompletionHook_ = hook;
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->on_completion = [hook](const WorkState& w) {
    hook(std::make_shared<c10d::WorkInfo>(w.type, w.seq, w.started, w.finished,
                                          std::chrono::duration<float>(w.ran_for())));
  };
}

// Eager init (init_process_group(device_id=...)): the communicator exists already; on a GPU
// the device path is made now rather than at the first CUDA call.
void ProcessGroupDcomm::eagerConnectSingleDevice(at::Device device) {
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "dcomm: eager init on ", device.str(),
              " (dcomm runs on cpu and cuda)");
#ifdef DCOMM_TORCH_CUDA
  if (device.is_cuda() && !cuda_) cuda_ = std::make_unique<CudaPath>(*this, device.index());
#else
  TORCH_CHECK(device.is_cpu(), "dcomm: eager init on ", device.str(), ": this dcomm_torch was built without CUDA");
#endif
}

// ---- tensors in dcomm's shareable memory -------------------------------------------------------

namespace {
class MemAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::kCPU)};
    auto p = dcomm::mem_alloc(n);
    TORCH_CHECK(p.ok(), "dcomm: allocating a ", n, "-byte tensor: ", p.status().message());
    return {*p, *p, &release, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  static void release(void* p) {
    if (p) (void)dcomm::mem_free(p);
  }
};
}  // namespace

std::shared_ptr<c10::Allocator> ProcessGroupDcomm::getMemAllocator() {
  static auto allocator = std::make_shared<MemAllocator>();
  return allocator;
}

// A 1-D tensor of `size` elements in memory that peers on this host map directly: collectives
// on it (in place or not) take the single-copy paths (docs/pytorch.md measures them).
at::Tensor ProcessGroupDcomm::allocateTensor(long size, at::TensorOptions options) {
  TORCH_CHECK(size >= 0, "dcomm: allocateTensor of ", size, " elements");
  TORCH_CHECK(!options.has_device() || options.device().is_cpu(), "dcomm: allocateTensor on ", options.device().str(),
              ": dcomm's shareable memory is host memory");
  const auto dtype = options.dtype();
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(size) * dtype.itemsize(),
                       getMemAllocator().get(), /*resizable=*/false);
  return at::empty({0}, options.device(c10::kCPU)).set_(storage, 0, {size}, {1});
}

// ---- sparse all_reduce (DDP's sparse gradients) ------------------------------------------------

// Every rank's (indices, values) gathered, the sum of the sparse tensors coalesced; the
// result replaces the tensor's contents on every rank (as Gloo's). SUM only.
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "dcomm: all_reduce (sparse) takes one tensor per process");
  at::Tensor t = tensors[0];
  TORCH_CHECK(t.layout() == at::kSparse && t.is_cpu(), "dcomm: all_reduce (sparse) takes a sparse COO CPU tensor");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "dcomm: all_reduce on a sparse tensor supports SUM only");
  return enqueue(c10d::OpType::ALLREDUCE, {t}, 0, [this, t] {
    const at::Tensor mine = t.coalesce();
    const at::Tensor idx = mine.indices().contiguous(), val = mine.values().contiguous();
    const int n = group_size();
    // Each rank's nnz, then everyone's indices and values padded to the largest.
    at::Tensor nnz = at::empty({n}, at::kLong);
    int64_t my_nnz = idx.size(1);
    Status s = comm_->all_gather(&my_nnz, nnz.data_ptr(), 1, dcomm::DataType::kInt64);
    if (!s.ok()) return s;
    const int64_t most = nnz.max().item<int64_t>();
    const int64_t sparse_dims = idx.size(0);
    std::vector<int64_t> val_shape = val.sizes().vec();
    val_shape[0] = most;
    at::Tensor idx_pad = at::zeros({sparse_dims, most}, idx.options());
    at::Tensor val_pad = at::zeros(val_shape, val.options());
    idx_pad.narrow(1, 0, my_nnz).copy_(idx);
    val_pad.narrow(0, 0, my_nnz).copy_(val);
    at::Tensor idx_all = at::empty({n, sparse_dims, most}, idx.options());
    val_shape.insert(val_shape.begin(), n);
    at::Tensor val_all = at::empty(val_shape, val.options());
    s = comm_->all_gather(idx_pad.data_ptr(), idx_all.data_ptr(), static_cast<size_t>(idx_pad.nbytes()),
                          dcomm::DataType::kUint8);
    if (s.ok())
      s = comm_->all_gather(val_pad.data_ptr(), val_all.data_ptr(), static_cast<size_t>(val_pad.nbytes()),
                            dcomm::DataType::kUint8);
    if (!s.ok()) return s;
    std::vector<at::Tensor> idxs, vals;
    for (int r = 0; r < n; ++r) {
      const int64_t k = nnz[r].item<int64_t>();
      idxs.push_back(idx_all[r].narrow(1, 0, k));
      vals.push_back(val_all[r].narrow(0, 0, k));
    }
    at::Tensor sum = at::sparse_coo_tensor(at::cat(idxs, 1), at::cat(vals, 0), t.sizes()).coalesce();
    t.copy_(sum);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::recvAnysource(std::vector<at::Tensor>&, int tag) {
  TORCH_CHECK(false, "dcomm: recv from any source (tag ", tag,
              ") is not supported: dcomm matches each receive to a named peer in posting order, so "
              "results do not depend on timing; pass src= (docs/pytorch.md)");
}

// ---- torch 2.15: time estimation, ephemeral timeouts, abort and completion hooks --------------

#if DCOMM_TORCH_2_15
// gather into one flat tensor at the root: gather's list form over views of it (contiguous, so
// every rank's block lands in place).
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::gather_into_tensor(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::GatherOptions& opts) {
  std::vector<at::Tensor> inputs{input};
  std::vector<std::vector<at::Tensor>> outputs;
  if (group_rank() == opts.rootRank) {
    TORCH_CHECK(output.is_contiguous() && output.numel() == input.numel() * group_size(),
                "dcomm: gather_into_tensor: the root's output needs ", group_size(), " x ", input.numel(),
                " contiguous elements, not ", output.numel());
    std::vector<at::Tensor> blocks;
    for (const auto& b : output.view({-1}).chunk(group_size())) blocks.push_back(b.view(input.sizes()));
    outputs.push_back(std::move(blocks));
  }
  return gather(outputs, inputs, opts);
}

void ProcessGroupDcomm::startTimeEstimate() {
  TORCH_CHECK(!estimating_, "dcomm: startTimeEstimate twice without endTimeEstimate");
  estimate_us_ = 0;
  estimating_ = true;
}

float ProcessGroupDcomm::endTimeEstimate() {
  TORCH_CHECK(estimating_, "dcomm: endTimeEstimate without startTimeEstimate");
  estimating_ = false;
  return static_cast<float>(estimate_us_);
}

void ProcessGroupDcomm::addEphemeralTimeout(const std::chrono::milliseconds& timeout) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->extensions.push_back({timeout, 0});
}

void ProcessGroupDcomm::registerAbortHook(int64_t id, c10d::AbortHook hook) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->abort_hooks[id] = std::move(hook);
}
void ProcessGroupDcomm::unregisterAbortHook(int64_t id) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->abort_hooks.erase(id);
}
void ProcessGroupDcomm::registerCompletionHook(int64_t id, c10d::CompletionHook hook) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->completion_hooks[id] = [hook = std::move(hook)](uint64_t key, float ms) {
    c10d::CompletionHookArgs args;
    args.completionKey = key;
    args.duration_ms = ms;
    hook(args);
  };
}
void ProcessGroupDcomm::unregisterCompletionHook(int64_t id) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->completion_hooks.erase(id);
}
#endif

// A call made while estimating: its predicted time is added, nothing runs. Collectives by
// the cost model's choice for their shape; the rest (all-to-all, gather, scatter, send,
// receive) as one direct step of their bytes.
bool ProcessGroupDcomm::estimated(c10d::OpType type, size_t bytes) {
  if (!estimating_) return false;
  using T = c10d::OpType;
  const int n = group_size();
  std::optional<dcomm::OpKind> kind;
  size_t count = bytes;
  switch (type) {
    case T::ALLREDUCE:
    case T::ALLREDUCE_COALESCED: kind = dcomm::OpKind::kAllReduce; break;
    case T::BROADCAST: kind = dcomm::OpKind::kBroadcast; break;
    case T::REDUCE: kind = dcomm::OpKind::kReduce; break;
    case T::BARRIER: kind = dcomm::OpKind::kAllReduce, count = 1; break;
    case T::ALLGATHER:
    case T::_ALLGATHER_BASE:
    case T::ALLGATHER_COALESCED: kind = dcomm::OpKind::kAllGather, count = bytes / static_cast<size_t>(n); break;
    case T::REDUCE_SCATTER:
    case T::_REDUCE_SCATTER_BASE: kind = dcomm::OpKind::kReduceScatter, count = bytes / static_cast<size_t>(n); break;
    default: break;
  }
  const auto& link = comm_->facts().link;
  if (kind) {
    const dcomm::CallShape shape{*kind, count, 1, n, true, comm_->facts().hosts};
    estimate_us_ += dcomm::predict_call_us(comm_->facts(), comm_->config(), shape);
  } else {
    estimate_us_ += link.alpha_us + static_cast<double>(bytes) * link.beta_us_per_byte;
  }
  return true;
}

#endif  // TORCH_VERSION_MAJOR >= 2

}  // namespace dcomm_torch
