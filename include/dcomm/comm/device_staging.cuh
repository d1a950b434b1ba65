// Device collectives when the communicator spans hosts: the input is copied to pinned host
// memory, the host communicator runs the collective from a host function on the caller's
// stream, and the result is copied back. The host function blocks the stream (and CUDA's
// callback thread) while the host communicator works, so one rank per process on this path.
// A stream being captured into a CUDA graph captures the three steps; their buffers are then
// kept for the graph's life instead of reused.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

class DeviceStaging {
 public:
  // on_error: told of a staged call's failure (it runs on CUDA's callback thread, after the
  // call that enqueued it returned).
  DeviceStaging(Communicator& host, std::function<void(const Status&)> on_error)
      : host_(host), on_error_(std::move(on_error)) {}
  ~DeviceStaging() {
    for (auto& s : slots_) cudaFreeHost(s->buf);
  }
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Enqueues collective `d` (device buffers, checked already) on `stream`: `in_bytes` of
  // d.send in, `out_bytes` of d.recv out.
  Status enqueue(const OpDesc& d, size_t in_bytes, size_t out_bytes, cudaStream_t stream) {
    Slot* s = slot_for(in_bytes + out_bytes);
    if (!s)
      return make_error(ErrorCode::kOutOfResources, to_string(d.kind), " on rank ", host_.rank(), ": cannot allocate ",
                        in_bytes + out_bytes, " bytes of pinned staging memory");
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &cs);
    s->keep = cs != cudaStreamCaptureStatusNone;
    s->call = d;
    s->in_bytes = in_bytes;
    char* buf = static_cast<char*>(s->buf);
    if (in_bytes)
      DCOMM_RETURN_IF_ERROR(
          cuda_status(cudaMemcpyAsync(buf, d.send, in_bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync"));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaLaunchHostFunc(stream, &DeviceStaging::run, s), "cudaLaunchHostFunc"));
    if (out_bytes)
      DCOMM_RETURN_IF_ERROR(cuda_status(
          cudaMemcpyAsync(d.recv, buf + in_bytes, out_bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync"));
    return {};
  }

 private:
  struct Slot {  // one staged call's pinned buffer (input, then output) and the call
    DeviceStaging* owner = nullptr;
    void* buf = nullptr;
    size_t bytes = 0;
    OpDesc call{OpKind::kAllReduce};
    size_t in_bytes = 0;
    std::atomic<bool> busy{false};
    bool keep = false;  // captured in a graph: never reused
  };

  static void CUDART_CB run(void* arg) {
    auto* s = static_cast<Slot*>(arg);
    Status st = s->owner->run_host(s->call, static_cast<char*>(s->buf), static_cast<char*>(s->buf) + s->in_bytes);
    if (!st.ok()) s->owner->on_error_(st.with_context("a staged device call"));
    if (!s->keep) s->busy = false;
  }
  Status run_host(const OpDesc& d, char* in, char* out) {
    switch (d.kind) {
      case OpKind::kAllReduce: return host_.all_reduce(in, out, d.count, d.type, d.op);
      case OpKind::kReduceScatter: return host_.reduce_scatter(in, out, d.count, d.type, d.op);
      case OpKind::kAllGather: return host_.all_gather(in, out, d.count, d.type);
      case OpKind::kBroadcast: return host_.broadcast(in, out, d.count, d.type, d.root);
      case OpKind::kReduce: return host_.reduce(in, out, d.count, d.type, d.op, d.root);
      case OpKind::kBarrier: return host_.barrier();
      case OpKind::kPointToPoint: break;
    }
    return make_error(ErrorCode::kUnsupported, to_string(d.kind), " is not staged between hosts");
  }
  Slot* slot_for(size_t bytes) {
    for (auto& s : slots_) {
      bool idle = false;
      if (!s->keep && s->bytes >= bytes && s->busy.compare_exchange_strong(idle, true)) return s.get();
    }
    auto s = std::make_unique<Slot>();
    s->owner = this;
    s->bytes = std::max<size_t>(bytes, 1);
    if (cudaMallocHost(&s->buf, s->bytes) != cudaSuccess) return nullptr;
    s->busy = true;
    slots_.push_back(std::move(s));
    return slots_.back().get();
  }

  Communicator& host_;
  std::function<void(const Status&)> on_error_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

DCOMM_NAMESPACE_END
