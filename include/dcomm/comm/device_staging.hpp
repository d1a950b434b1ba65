// Device collectives when the communicator spans hosts: the input is copied to pinned host
// memory, the host communicator runs the collective from a host function on the caller's
// stream, the result is copied back, and only then is the pinned buffer free for another
// call (a last host function: a call on another stream must not fill it before the copy
// back has read it). The host function blocks the stream (and CUDA's callback thread) while
// the host communicator works, so one rank per process on this path. A stream being captured
// into a CUDA graph captures the four steps; their buffers are then kept for the graph's life
// instead of reused.
//
// Host code over `Ops`, the stream operations (comm/device_staging.cuh has CUDA's; the CPU
// tests a recording stub that runs each stream's steps in the order a test chooses):
//   static Status copy(void* dst, const void* src, size_t bytes, bool to_host, void* stream);
//   static Status host_func(void* stream, void (*fn)(void*), void* arg);
//   static bool capturing(void* stream);
//   static void* alloc_pinned(size_t bytes);   // null when it cannot
//   static void free_pinned(void* p);
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

template <class Ops>
class BasicDeviceStaging {
 public:
  // on_error: told of a staged call's failure (it runs on CUDA's callback thread, after the
  // call that enqueued it returned).
  BasicDeviceStaging(Communicator& host, std::function<void(const Status&)> on_error)
      : host_(host), on_error_(std::move(on_error)) {}
  ~BasicDeviceStaging() {
    for (auto& s : slots_) Ops::free_pinned(s->buf);
  }
  BasicDeviceStaging(const BasicDeviceStaging&) = delete;
  BasicDeviceStaging& operator=(const BasicDeviceStaging&) = delete;

  // Enqueues collective `d` (device buffers, checked already) on `stream`: `in_bytes` of
  // d.send in, `out_bytes` of d.recv out.
  Status enqueue(const OpDesc& d, size_t in_bytes, size_t out_bytes, void* stream) {
    Slot* s = slot_for(in_bytes + out_bytes);
    if (!s)
      return make_error(ErrorCode::kOutOfResources, to_string(d.kind), " on rank ", host_.rank(), ": cannot allocate ",
                        in_bytes + out_bytes, " bytes of pinned staging memory");
    s->keep = Ops::capturing(stream);
    s->call = d;
    s->in_bytes = in_bytes;
    char* buf = static_cast<char*>(s->buf);
    Status st;
    if (in_bytes) st = Ops::copy(buf, d.send, in_bytes, /*to_host=*/true, stream);
    if (st.ok()) st = Ops::host_func(stream, &BasicDeviceStaging::run, s);
    if (st.ok() && out_bytes) st = Ops::copy(d.recv, buf + in_bytes, out_bytes, /*to_host=*/false, stream);
    // Free once the copy back has read the buffer. Where that cannot be enqueued, the slot
    // stays taken: a buffer lost, never one filled while a copy may still read it.
    Status freed = Ops::host_func(stream, &BasicDeviceStaging::release, s);
    return st.ok() ? freed : st;
  }

 private:
  struct Slot {  // one staged call's pinned buffer (input, then output) and the call
    BasicDeviceStaging* owner = nullptr;
    void* buf = nullptr;
    size_t bytes = 0;
    OpDesc call{OpKind::kAllReduce};
    size_t in_bytes = 0;
    std::atomic<bool> busy{false};
    bool keep = false;  // captured in a graph: never reused
  };

  static void run(void* arg) {
    auto* s = static_cast<Slot*>(arg);
    Status st = s->owner->run_host(s->call, static_cast<char*>(s->buf), static_cast<char*>(s->buf) + s->in_bytes);
    if (!st.ok()) s->owner->on_error_(st.with_context("a staged device call"));
  }
  static void release(void* arg) {
    auto* s = static_cast<Slot*>(arg);
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
    s->buf = Ops::alloc_pinned(s->bytes);
    if (!s->buf) return nullptr;
    s->busy = true;
    slots_.push_back(std::move(s));
    return slots_.back().get();
  }

  Communicator& host_;
  std::function<void(const Status&)> on_error_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

DCOMM_NAMESPACE_END
