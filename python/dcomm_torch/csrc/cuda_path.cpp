// CUDA tensors on the dcomm backend: see cuda_path.hpp.
#include "cuda_path.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

namespace dcomm_torch {

using dcomm::DataType;
using dcomm::Status;

namespace {
void check(const Status& s) {
  if (!s.ok()) raise(s);
}
}  // namespace

CudaWork::CudaWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                   std::shared_ptr<at::cuda::CUDAEvent> end, c10::cuda::CUDAStream stream, DeviceHandle* device)
    : c10d::Work(rank, type), outputs_(std::move(outputs)), end_(std::move(end)), stream_(stream), device_(device) {
  // CUDA-aware: completed on the communication stream, so whoever takes the result waits for it.
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                     std::vector<c10::Device>{stream_.device()});
  c10::cuda::CUDAStreamGuard guard(stream_);
  future_->markCompleted(c10::IValue(outputs_));
}

void CudaWork::check_error() const { check(device_error(device_)); }
bool CudaWork::isCompleted() { return end_->query(); }
bool CudaWork::isSuccess() const { return end_->query() && device_error(device_).ok(); }
std::exception_ptr CudaWork::exception() const {
  Status s = device_error(device_);
  return s.ok() ? nullptr : std::make_exception_ptr(std::runtime_error(s.message()));
}
// The current stream waits for the call; the host does not (as NCCL's). A kernel that failed
// (a dead peer, the deadline) is reported here once it has.
bool CudaWork::wait(std::chrono::milliseconds) {
  end_->block(c10::cuda::getCurrentCUDAStream(stream_.device_index()));
  check_error();
  return true;
}
void CudaWork::synchronize() { end_->block(c10::cuda::getCurrentCUDAStream(stream_.device_index())); }

CudaPath::CudaPath(ProcessGroupDcomm& pg, int device)
    : pg_(pg), device_(device), stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {
  c10::cuda::CUDAGuard guard(device);
  auto d = device_create(pg.comm(), device);
  if (!d.ok()) raise(d.status().with_context("dcomm backend: the device communicator"));
  comm_ = *d;
}
CudaPath::~CudaPath() {
  if (comm_) device_destroy(comm_);
}

void CudaPath::check_device(const at::Tensor& t) const {
  TORCH_CHECK(t.is_cuda() && t.device().index() == device_, "dcomm: this process group's CUDA calls use device ",
              device_, "; a tensor is on ", t.device());
}

template <class Body>
c10::intrusive_ptr<c10d::Work> CudaPath::run(c10d::OpType type, const std::vector<at::Tensor>& touched,
                                             std::vector<at::Tensor> outputs, Body body) {
  for (const auto& t : touched) check_device(t);
  c10::cuda::CUDAGuard guard(device_);
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device_));
  ready.block(stream_);
  for (const auto& t : touched) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
  AfterLaunch after;
  {
    c10::cuda::CUDAStreamGuard on_comm(stream_);  // temporaries and copies of `body` run there too
    check(body(static_cast<void*>(stream_.stream()), after));
  }
  if (group_depth_ > 0) {  // the kernel is launched by group_end(): so are the copies after it
    group_after_.push_back(std::move(after));
    group_outputs_.insert(group_outputs_.end(), outputs.begin(), outputs.end());
    return c10::make_intrusive<CudaWork>(pg_.group_rank(), type, std::move(outputs), group_end_, stream_, comm_);
  }
  finish(after);
  auto end = std::make_shared<at::cuda::CUDAEvent>();
  end->record(stream_);
  return c10::make_intrusive<CudaWork>(pg_.group_rank(), type, std::move(outputs), end, stream_, comm_);
}

// On the communication stream, after the call's kernel was enqueued: the copies out of its
// temporaries, then the temporaries go back to the caching allocator (their blocks are reused
// only by later work on this stream, ordered after the kernel).
void CudaPath::finish(AfterLaunch& after) {
  c10::cuda::CUDAStreamGuard on_comm(stream_);
  for (auto& copy : after.copies) copy();
  after = AfterLaunch{};
}

c10::intrusive_ptr<c10d::Work> CudaPath::allreduce(at::Tensor& t, const Reduction& r) {
  TORCH_CHECK(t.is_contiguous(), "dcomm: CUDA all_reduce takes contiguous tensors");
  return run(c10d::OpType::ALLREDUCE, {t}, {t}, [&](void* s, AfterLaunch&) {
    if (r.premul != 1.0) t.mul_(r.premul);
    return device_all_reduce(comm_, t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), r.type, r.op, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allreduce_coalesced(std::vector<at::Tensor>& ts, const Reduction& r) {
  return run(c10d::OpType::ALLREDUCE_COALESCED, ts, ts, [&](void* s, AfterLaunch& after) {
    std::vector<at::Tensor> flat;
    for (const auto& t : ts) flat.push_back(t.reshape({-1}));
    at::Tensor buf = after.keep(at::cat(flat));
    if (r.premul != 1.0) buf.mul_(r.premul);
    after.copies.push_back([ts, buf] {
      int64_t at = 0;
      for (const auto& t : ts) {
        at::Tensor(t).copy_(buf.narrow(0, at, t.numel()).view(t.sizes()));
        at += t.numel();
      }
    });
    return device_all_reduce(comm_, buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), r.type, r.op, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::broadcast(at::Tensor& t, int root) {
  TORCH_CHECK(t.is_contiguous(), "dcomm: CUDA broadcast takes contiguous tensors");
  return run(c10d::OpType::BROADCAST, {t}, {t}, [&](void* s, AfterLaunch&) {
    return device_broadcast(comm_, t.data_ptr(), t.data_ptr(), nbytes(t), DataType::kUint8, root, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduce(at::Tensor& t, const Reduction& r, int root) {
  TORCH_CHECK(t.is_contiguous(), "dcomm: CUDA reduce takes contiguous tensors");
  return run(c10d::OpType::REDUCE, {t}, {t}, [&](void* s, AfterLaunch&) {
    if (r.premul != 1.0) t.mul_(r.premul);
    return device_reduce(comm_, t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), r.type, r.op, root, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allgather_base(at::Tensor& out, at::Tensor& in) {
  TORCH_CHECK(out.is_contiguous() && in.is_contiguous(), "dcomm: CUDA all_gather_into_tensor takes contiguous tensors");
  return run(c10d::OpType::_ALLGATHER_BASE, {in, out}, {out}, [&](void* s, AfterLaunch&) {
    return device_all_gather(comm_, in.data_ptr(), out.data_ptr(), nbytes(in), DataType::kUint8, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::allgather(std::vector<at::Tensor>& outs, at::Tensor& in) {
  std::vector<at::Tensor> touched = outs;
  touched.push_back(in);
  return run(c10d::OpType::ALLGATHER, touched, outs, [&](void* s, AfterLaunch& after) {
    at::Tensor src = after.keep(in.contiguous());
    at::Tensor flat = after.keep(at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options()));
    after.copies.push_back([outs, flat, n = in.numel()] {
      for (size_t r = 0; r < outs.size(); ++r)
        at::Tensor(outs[r]).copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(outs[r].sizes()));
    });
    return device_all_gather(comm_, src.data_ptr(), flat.data_ptr(), nbytes(src), DataType::kUint8, s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduce_scatter_base(at::Tensor& out, at::Tensor& in, const Reduction& r) {
  TORCH_CHECK(out.is_contiguous() && in.is_contiguous(), "dcomm: CUDA reduce_scatter_tensor takes contiguous tensors");
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, {in, out}, {out}, [&](void* s, AfterLaunch& after) {
    at::Tensor src = after.keep(r.premul != 1.0 ? in.mul(r.premul) : in);
    return device_reduce_scatter(comm_, src.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()), r.type, r.op,
                                 s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::reduce_scatter(at::Tensor& out, std::vector<at::Tensor>& ins,
                                                        const Reduction& r) {
  std::vector<at::Tensor> touched = ins;
  touched.push_back(out);
  return run(c10d::OpType::REDUCE_SCATTER, touched, {out}, [&](void* s, AfterLaunch& after) {
    std::vector<at::Tensor> flat;
    for (const auto& t : ins) flat.push_back(t.reshape({-1}));
    at::Tensor src = after.keep(at::cat(flat));
    if (r.premul != 1.0) src.mul_(r.premul);
    at::Tensor dst = after.keep(out.contiguous());
    if (!dst.is_same(out)) after.copies.push_back([out, dst] { at::Tensor(out).copy_(dst); });
    return device_reduce_scatter(comm_, src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), r.type, r.op,
                                 s);
  });
}

// gather, scatter and all_to_all: the exchange's sends and receives (algo/exchange.hpp) as one
// device group, as NCCL's.
Status CudaPath::exchange(dcomm::Exchange what, int root, const std::vector<dcomm::Block>& send,
                          const std::vector<dcomm::Block>& recv, void* stream) {
  auto ops = dcomm::exchange_ops(what, pg_.group_rank(), pg_.group_size(), root, send, recv, DataType::kUint8);
  return ops.ok() ? device_p2p(comm_, *ops, stream) : ops.status();
}

c10::intrusive_ptr<c10d::Work> CudaPath::gather(std::vector<at::Tensor>& outs, at::Tensor& in, int root) {
  for (const auto& o : outs) TORCH_CHECK(o.is_contiguous(), "dcomm: CUDA gather takes contiguous outputs");
  std::vector<at::Tensor> touched = outs;
  touched.push_back(in);
  return run(c10d::OpType::GATHER, touched, outs, [&](void* s, AfterLaunch& after) {
    return exchange(dcomm::Exchange::kGather, root, tensor_blocks({after.keep(in.contiguous())}), tensor_blocks(outs),
                    s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::scatter(at::Tensor& out, std::vector<at::Tensor>& ins, int root) {
  TORCH_CHECK(out.is_contiguous(), "dcomm: CUDA scatter takes a contiguous output");
  std::vector<at::Tensor> touched = ins;
  touched.push_back(out);
  return run(c10d::OpType::SCATTER, touched, {out}, [&](void* s, AfterLaunch& after) {
    std::vector<at::Tensor> srcs;
    for (const auto& t : ins) srcs.push_back(after.keep(t.contiguous()));
    return exchange(dcomm::Exchange::kScatter, root, tensor_blocks(srcs), tensor_blocks({out}), s);
  });
}

c10::intrusive_ptr<c10d::Work> CudaPath::alltoall(at::Tensor& out, at::Tensor& in, const ByteSplits& out_bytes,
                                                  const ByteSplits& in_bytes) {
  TORCH_CHECK(out.is_contiguous() && in.is_contiguous(), "dcomm: CUDA all_to_all_single takes contiguous tensors");
  return run(c10d::OpType::ALLTOALL_BASE, {in, out}, {out}, [&](void* s, AfterLaunch&) {
    return exchange(dcomm::Exchange::kAllToAll, 0,
                    dcomm::blocks_of(in.data_ptr(), in_bytes.counts, in_bytes.displs, DataType::kUint8),
                    dcomm::blocks_of(out.data_ptr(), out_bytes.counts, out_bytes.displs, DataType::kUint8), s);
  });
}

// Tags are not carried on the device path: messages between a pair match in call order.
c10::intrusive_ptr<c10d::Work> CudaPath::point_to_point(bool is_send, at::Tensor& t, int peer, int) {
  TORCH_CHECK(t.is_contiguous(), "dcomm: CUDA send/recv take contiguous tensors");
  return run(is_send ? c10d::OpType::SEND : c10d::OpType::RECV, {t}, {t}, [&](void* s, AfterLaunch&) {
    return is_send ? device_send(comm_, t.data_ptr(), nbytes(t), peer, s)
                   : device_recv(comm_, t.data_ptr(), nbytes(t), peer, s);
  });
}

void CudaPath::synchronize() {
  c10::cuda::CUDAGuard guard(device_);
  stream_.synchronize();
  check(device_error(comm_));
}

void CudaPath::group_start() {
  if (group_depth_++ == 0) {
    group_outputs_.clear();
    group_after_.clear();
    group_end_ = std::make_shared<at::cuda::CUDAEvent>();  // the group's Works wait for it
  }
  device_group_start(comm_);
}

// Launches the group's kernels, then the copies out of their temporaries, then records the
// event every Work of the group waits on.
c10::intrusive_ptr<c10d::Work> CudaPath::group_end() {
  c10::cuda::CUDAGuard guard(device_);
  Status launched = device_group_end(comm_);
  if (--group_depth_ > 0) {
    check(launched);
    return c10::make_intrusive<CudaWork>(pg_.group_rank(), c10d::OpType::UNKNOWN, std::vector<at::Tensor>{}, group_end_,
                                         stream_, comm_);
  }
  for (auto& after : group_after_) finish(after);
  group_after_.clear();
  auto end = std::move(group_end_);
  end->record(stream_);
  check(launched);
  return c10::make_intrusive<CudaWork>(pg_.group_rank(), c10d::OpType::UNKNOWN, std::move(group_outputs_), end, stream_,
                                       comm_);
}

}  // namespace dcomm_torch
