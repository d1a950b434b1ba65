// The dcomm torch.distributed backend (process_group.hpp): the group's life, its queue, point to
// point and barrier. The collectives: collectives.cpp; the Work handles: work.cpp.
#include "process_group.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdlib>
#include <stdexcept>

#include "on_cuda.hpp"

namespace dcomm_torch {

using dcomm::DataType;
using dcomm::Status;

// ---- the process group ---------------------------------------------------------------------

ProcessGroupDcomm::ProcessGroupDcomm(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : BackendBase(rank, size) {
  auto config = dcomm::Config::from_env();
  if (!config.ok()) raise(config.status());
  config->timeout = group_timeout(timeout, config->timeout);
  read_inline_bytes();

  // Rendezvous through torch's store: rank 0's unique id (its rendezvous store and job secret)
  // under a key of this backend's own.
  // Which backend of this group's store this is (torch 2.x makes one per device type through
  // the same store): every member counts its own creations there, and they agree.
  const int64_t nth = store->add("dcomm/made_by/" + std::to_string(rank), 1);
  const std::string key = "dcomm/unique_id/" + std::to_string(nth);
  dcomm::UniqueId id;
  if (rank == 0) {
    auto made = dcomm::UniqueId::create();
    if (!made.ok()) raise(made.status().with_context("dcomm backend: making the unique id"));
    id = *made;
    const std::string text = id.to_string();
    store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
  } else {
    const std::vector<uint8_t> text = store->get(key);
    auto parsed = dcomm::UniqueId::parse(std::string(text.begin(), text.end()));
    if (!parsed.ok()) raise(parsed.status().with_context("dcomm backend: the unique id in torch's store"));
    id = *parsed;
  }
  auto comm = dcomm::Communicator::init(rank, size, id, *config);
  if (!comm.ok()) raise(comm.status().with_context("dcomm backend"));
  comm_ = std::move(*comm);
  config_ = comm_->config();
  hub_->timeout = comm_->config().timeout;
}

ProcessGroupDcomm::ProcessGroupDcomm(std::unique_ptr<dcomm::Communicator> comm, std::chrono::milliseconds timeout)
    : BackendBase(comm->rank(), comm->size()), comm_(std::move(comm)) {
  read_inline_bytes();
  comm_->set_timeout(group_timeout(timeout, comm_->config().timeout));
  config_ = comm_->config();
  hub_->timeout = comm_->config().timeout;
}

ProcessGroupDcomm::ProcessGroupDcomm(int rank, int size, std::chrono::milliseconds timeout) : BackendBase(rank, size) {
  auto config = dcomm::Config::from_env();
  if (!config.ok()) raise(config.status());
  config_ = *config;
  config_.timeout = group_timeout(timeout, config_.timeout);
  read_inline_bytes();
  hub_->timeout = config_.timeout;
}

dcomm::Communicator& ProcessGroupDcomm::comm() {
  check_open("a call");
  return *comm_;
}

// torch's timeout, unless DCOMM_TIMEOUT_MS says otherwise (or torch gives none).
std::chrono::milliseconds ProcessGroupDcomm::group_timeout(std::chrono::milliseconds torch_timeout,
                                                           std::chrono::milliseconds configured) {
  return dcomm::env_or("DCOMM_TIMEOUT_MS").empty() && torch_timeout.count() > 0 ? torch_timeout : configured;
}

void ProcessGroupDcomm::read_inline_bytes() {
  auto inline_bytes = dcomm::env_size("DCOMM_TORCH_INLINE_BYTES", static_cast<long long>(inline_bytes_), 0, 1LL << 40);
  if (!inline_bytes.ok()) raise(inline_bytes.status());
  inline_bytes_ = static_cast<size_t>(*inline_bytes);
}

ProcessGroupDcomm::~ProcessGroupDcomm() {
  start_pending_p2p();
  queue_.stop();
#ifdef DCOMM_TORCH_CUDA
  cuda_.reset();
#endif
}

c10::intrusive_ptr<BackendBase> ProcessGroupDcomm::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                          int size, const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<ProcessGroupDcomm>(store, rank, size,
                                                std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                          size_t bytes, Job job) {
  check_open(c10d::opTypeToString(type).c_str());
  start_pending_p2p();  // sends and receives posted before this call go first
  auto state = new_state(type, std::move(outputs));
  if (estimated(type, bytes)) {
    state->complete(nullptr);
    return c10::make_intrusive<DcommWork>(group_rank(), type, state);
  }
  queue_.submit(
      [this, state, job = std::move(job)] {
        std::exception_ptr error;
        begin(*state);
        try {
          Status s = job();
          if (!s.ok()) {
            hub_->failed(s);
            raise(s);
          }
        } catch (...) {
          error = std::current_exception();
        }
        state->complete(error);
      },
      bytes <= inline_bytes_);
  return c10::make_intrusive<DcommWork>(group_rank(), type, state);
}

std::shared_ptr<WorkState> ProcessGroupDcomm::new_state(c10d::OpType type, std::vector<at::Tensor> outputs) {
  auto state = std::make_shared<WorkState>();
  state->outputs = std::move(outputs);
  state->type = type;
  state->seq = ++seq_;
  state->timeout = hub_->timeout_for(state->seq);
  state->hub = hub_;
  return state;
}

// On the queue, as a call starts: its start time, and its deadline on the communicator.
void ProcessGroupDcomm::begin(WorkState& state) {
  state.started = std::chrono::steady_clock::now();
  if (comm_->config().timeout != state.timeout) comm_->set_timeout(state.timeout);
}

void ProcessGroupDcomm::check_open(const char* what) const {
  TORCH_CHECK(!shut_down_, "dcomm: ", what, " on a process group that was shut down (rank ", rank_, " of ", size_, ")");
  TORCH_CHECK(comm_, "dcomm: ", what, " on rank ", rank_, " of a group made with enable_reconfigure: it has no ",
              "communicator until dist._reconfigure() (the backend's reconfigure) made one");
}

// ---- point to point --------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::point_to_point(c10d::OpType type, std::vector<at::Tensor>& tensors,
                                                                 int peer, int tag) {
  const bool is_send = type == c10d::OpType::SEND;
  check_one(tensors, is_send ? "send" : "recv");
  TORCH_CHECK(peer >= 0 && peer < group_size(), "dcomm: ", is_send ? "send to" : "recv from", " rank ", peer,
              ", which is not in this group of ", group_size());
  at::Tensor t = tensors[0];
  DCOMM_TORCH_ON_CUDA(t, point_to_point(is_send, t, peer, tag));
  check_open(is_send ? "send" : "recv");
  auto state = new_state(type, {t});
  if (estimated(type, nbytes(t))) {
    state->complete(nullptr);
    return c10::make_intrusive<DcommWork>(group_rank(), type, state);
  }
  state->start = [this] { start_pending_p2p(); };
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    pending_.push_back({is_send, contiguous(t), t, peer, tag, state});
  }
  return c10::make_intrusive<DcommWork>(group_rank(), type, state);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return point_to_point(c10d::OpType::SEND, tensors, dst, tag);
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return point_to_point(c10d::OpType::RECV, tensors, src, tag);
}

// The sends and receives gathered so far run as one batch (a job on the queue): they progress
// together, and messages between a pair in one direction match in posting order, their tags
// checked.
void ProcessGroupDcomm::start_pending_p2p() {
  std::vector<PendingOp> batch;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    if (coalescing_ || pending_.empty()) return;
    batch.swap(pending_);
  }
  for (auto& p : batch) {
    std::lock_guard<std::mutex> lock(p.state->mu);
    p.state->start = nullptr;
  }
  size_t bytes = 0;
  for (const auto& p : batch) bytes += nbytes(p.tensor);
  queue_.submit(
      [this, batch] {
        std::vector<dcomm::P2POp> ops;
        for (const auto& p : batch)
          ops.push_back(
              p.is_send ? dcomm::P2POp::send(p.tensor.data_ptr(), nbytes(p.tensor), DataType::kUint8, p.peer, p.tag)
                        : dcomm::P2POp::recv(p.tensor.data_ptr(), nbytes(p.tensor), DataType::kUint8, p.peer, p.tag));
        std::exception_ptr error;
        for (const auto& p : batch) begin(*p.state);  // the batch runs under its last call's deadline
        try {
          Status s = comm_->p2p(ops);
          if (!s.ok()) {
            hub_->failed(s);
            raise(s);
          }
          for (const auto& p : batch)
            if (!p.is_send) write_back(p.user, p.tensor);
        } catch (...) {
          error = std::current_exception();
        }
        for (const auto& p : batch) p.state->complete(error);
      },
      bytes <= inline_bytes_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::barrier(const c10d::BarrierOptions&) {
#ifdef DCOMM_TORCH_CUDA
  if (cuda_) cuda_->synchronize();  // as NCCL's barrier: the group's GPU work is done too
#endif
  return enqueue(c10d::OpType::BARRIER, {}, 0, [this] { return comm_->barrier(); });
}

// A barrier whose failure names the rank that did not come (dcomm's errors always do).
void ProcessGroupDcomm::monitoredBarrier(const c10d::BarrierOptions& opts, bool) {
  auto work = barrier(opts);
  work->wait(opts.timeout.count() > 0 ? opts.timeout : std::chrono::milliseconds(0));
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                  std::vector<at::Tensor>& inputs,
                                                                                  const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "dcomm: all_gather_into_tensor_coalesced: as many outputs as inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _allgather_base(outputs[i], inputs[i], opts);
  return last;  // in call order: the last one done means all are
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "dcomm: reduce_scatter_tensor_coalesced: as many outputs as inputs");
  c10::intrusive_ptr<c10d::Work> last;
  for (size_t i = 0; i < inputs.size(); ++i) last = _reduce_scatter_base(outputs[i], inputs[i], opts);
  return last;
}
// batch_isend_irecv on CUDA tensors, and coalesced collectives: the calls in between start
// together (one group).
void ProcessGroupDcomm::startCoalescing() {
  std::lock_guard<std::mutex> lock(p2p_mu_);
  coalescing_ = true;
#ifdef DCOMM_TORCH_CUDA
  if (cuda_) cuda_->group_start();
#endif
}
c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::endCoalescing() {
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    coalescing_ = false;
  }
#ifdef DCOMM_TORCH_CUDA
  if (cuda_ && cuda_->in_group()) return cuda_->group_end();
#endif
  std::shared_ptr<WorkState> last;
  {
    std::lock_guard<std::mutex> lock(p2p_mu_);
    if (!pending_.empty()) last = pending_.back().state;
  }
  start_pending_p2p();
  if (last) return c10::make_intrusive<DcommWork>(group_rank(), c10d::OpType::UNKNOWN, last);
  return enqueue(c10d::OpType::UNKNOWN, {}, 0, [] { return Status{}; });
}
#endif

}  // namespace dcomm_torch
