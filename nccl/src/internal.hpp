// What the files of dcomm's libnccl.so.2 share (docs/nccl.md): the communicator behind an
// ncclComm_t, a call as it runs now or at its group's end, the group of this thread, the last
// error of this thread, and the ABI's values in dcomm's terms. Each file holds one job:
//   errors.cpp      results, error strings, the last and the asynchronous error
//   lifecycle.cpp   unique ids, creation, split, shrink/grow, finalize/destroy/abort, queries
//   calls.cpp       collectives, point-to-point, PreMulSum ops, groups
//   memory.cpp      memory, registration, windows, suspend/resume and memory statistics
//   rma.cpp         one-sided put, signal and wait on windows
//   params.cpp      the ncclParam* functions
//   device_api.cpp  the device API's host functions
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/adapter/device_glue.hpp>
#include <dcomm/comm/one_sided.hpp>
#include <dcomm/dcomm.hpp>

#include "nccl.h"

#define DCOMM_NCCL_API extern "C" __attribute__((visibility("default")))
// nccl<Name>: a weak alias of pnccl<Name> (NCCL's profiling scheme), in the file defining it.
#define DCOMM_NCCL_ALIAS(name, target) \
  extern "C" __attribute__((weak, alias(#target), visibility("default"))) decltype(target) name;
#define DCOMM_NCCL_NAME(name) DCOMM_NCCL_ALIAS(nccl##name, pnccl##name)

namespace dcomm_nccl {

using namespace dcomm;
using adapter::DeviceHandle;

constexpr uint64_t kCommMagic = 0x64636f6d6d4e43ull;  // "dcommNC"

// ---- the ABI's values in dcomm's terms ----------------------------------------------------

inline std::optional<DataType> to_dcomm(ncclDataType_t t) {
  static constexpr DataType kTypes[] = {DataType::kInt8,     DataType::kUint8,      DataType::kInt32,
                                        DataType::kUint32,   DataType::kInt64,      DataType::kUint64,
                                        DataType::kFloat16,  DataType::kFloat32,    DataType::kFloat64,
                                        DataType::kBfloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2};
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= ncclNumTypes) return std::nullopt;
  return kTypes[t];
}

inline ReduceOp to_dcomm(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return ReduceOp::kProd;
    case ncclMax: return ReduceOp::kMax;
    case ncclMin: return ReduceOp::kMin;
    case ncclAvg: return ReduceOp::kAvg;
    default: return ReduceOp::kSum;
  }
}
ncclResult_t to_nccl(const Status& s);

// ---- errors: the last one, per thread (ncclGetLastError) --------------------------------------

extern thread_local std::string t_last_error;

ncclResult_t fail(const Status& s);
template <class... Args>
ncclResult_t fail(ncclResult_t r, const Args&... why) {
  t_last_error = detail::cat(why...);
  DCOMM_LOG(kWarn, kSubsysColl, -1, "NCCL API: ", t_last_error);
  return r;
}

// ---- where memory is ------------------------------------------------------------------------

inline bool have_gpu() {
  static const bool yes = [] {
    int n = 0;
    bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
  }();
  return yes;
}

// Device (or managed) memory; host memory, pinned or not, and null are not.
inline bool on_device(const void* p) {
  if (!p || !have_gpu()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// ---- the communicator -----------------------------------------------------------------------

struct PreMulSum {
  bool live = false;
  DataType type = DataType::kFloat32;
  bool on_device = false;
  const void* device_factor = nullptr;     // ncclScalarDevice: read when the call runs
  alignas(8) unsigned char value[8] = {};  // ncclScalarHostImmediate: read at creation
};

// The communicators of one ncclCommInitAll: destroying one on the device path meets the others
// (device_comm.cuh), so the set is destroyed together, concurrently, when its last member is;
// the usual loop of ncclCommDestroy calls on one thread then works as with NCCL.
struct LocalSet {
  std::mutex mu;
  size_t size = 0;
  std::vector<ncclComm*> destroyed;
};
}  // namespace dcomm_nccl

struct ncclComm {
  uint64_t magic = dcomm_nccl::kCommMagic;
  std::shared_ptr<dcomm_nccl::LocalSet> local_set;
  std::unique_ptr<dcomm::Communicator> host;
  dcomm::adapter::DeviceHandle* device = nullptr;
  int cuda_device = -1;
  bool blocking = true;
  std::string name;
  // ncclInProgress while being created (or while a non-blocking comm's call runs in the
  // background), then ncclSuccess or why that failed.
  std::atomic<int> state{ncclInProgress};
  std::string state_error;
  std::thread creator;               // a non-blocking creation, or call (memory.cpp's run_waiting)
  const char* background = nullptr;  // that call's name; null: the creation
  std::mutex creator_mu;
  std::atomic<int> async{ncclSuccess};  // the first failure that ended the communicator
  std::atomic<int> in_calls{0};
  std::atomic<bool> revoked{false};  // ncclCommRevoke: ncclCommGetAsyncError says ncclInProgress until no call runs
  std::mutex mu;
  std::vector<dcomm_nccl::PreMulSum> premul;                // op ncclNumOps + i
  int rma_contexts = 1;                                     // ncclConfig_t.numRmaCtx
  std::unique_ptr<dcomm::OneSided> one_sided;               // made by the first window on host memory
  dcomm::adapter::DeviceWindows* device_windows = nullptr;  // by the first on device memory

  ~ncclComm() {
    if (creator.joinable()) creator.join();
    // Before the host communicator they use (the wire's thread reads its settings).
    if (device_windows) dcomm::adapter::device_windows_destroy(device_windows);
    one_sided.reset();
    if (device) dcomm::adapter::device_destroy(device);
    host.reset();
    magic = 0;
  }
  int rank() const { return host ? host->rank() : -1; }
  int size() const { return host ? host->size() : 0; }
};

namespace dcomm_nccl {

// One call, checked, as it runs now or at the group's end.
struct Call {
  enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter, kSend, kRecv };
  Kind kind;
  const char* name;
  const void* send;
  void* recv;
  size_t count;
  DataType type;
  ReduceOp op = ReduceOp::kSum;
  std::optional<PreMulSum> premul = std::nullopt;
  int root = 0;  // root, or peer for send/recv
  cudaStream_t stream = nullptr;
  bool device = false;
  size_t elem() const { return size_of(type); }
};

// Waits for a non-blocking creation; the communicator's state then.
inline ncclResult_t ready(ncclComm* c) {
  std::lock_guard<std::mutex> lock(c->creator_mu);
  if (c->creator.joinable() && c->creator.get_id() != std::this_thread::get_id()) c->creator.join();
  return static_cast<ncclResult_t>(c->state.load());
}

inline ncclResult_t check_comm(const ncclComm* c, const char* what) {
  if (!c) return fail(ncclInvalidArgument, what, ": comm is NULL");
  if (c->magic != kCommMagic) return fail(ncclInvalidArgument, what, ": comm is not a live communicator (destroyed?)");
  return ncclSuccess;
}

inline ncclResult_t usable(ncclComm* c, const char* what) {
  if (ncclResult_t r = check_comm(c, what); r != ncclSuccess) return r;
  ncclResult_t r = ready(c);
  if (r == ncclInProgress)
    return fail(ncclInternalError, what, ": ", c->background ? c->background : "the communicator's creation",
                " did not finish");
  if (r != ncclSuccess)
    return fail(r, what,
                c->background ? ": the comm failed in a background call: " : ": the communicator was not created: ",
                c->state_error);
  return ncclSuccess;
}

// A failure once data may have moved ends the communicator (ncclCommGetAsyncError says so).
inline ncclResult_t record(ncclComm* c, const Status& s) {
  if (s.ok()) return ncclSuccess;
  ncclResult_t r = to_nccl(s);
  if (s.code() != ErrorCode::kInvalidArgument && s.code() != ErrorCode::kUnsupported) {
    int none = ncclSuccess;
    c->async.compare_exchange_strong(none, r);
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->state_error.empty()) c->state_error = s.message();
  }
  return fail(s);
}

struct InCall {
  explicit InCall(ncclComm* c) : c_(c) { ++c_->in_calls; }
  ~InCall() { --c_->in_calls; }
  ncclComm* c_;
};

// A registered window (ncclCommWindowRegister): this rank's part of it.
struct Window {
  static constexpr uint64_t kMagic = 0x64636f6d6d57494eull;  // "dcommWIN"
  uint64_t magic = kMagic;
  ncclComm* comm;
  void* buff;
  size_t size;
  int flags;
  int id = -1;         // the OneSided window (host memory); -1 for device memory
  int device_id = -1;  // the DeviceOneSided window (device memory, on a comm with a device)
};
// The window behind `win`, or null (and the last error says why).
inline Window* live_window(ncclWindow_t win, const char* what) {
  auto* w = reinterpret_cast<Window*>(win);
  if (!w || w->magic != Window::kMagic) {
    fail(ncclInvalidArgument, what, ": the window is NULL or not a live window of ncclCommWindowRegister");
    return nullptr;
  }
  return w;
}

// ---- groups (per thread): what ncclGroupStart/End keep ----------------------------------------

struct Group {
  int depth = 0;
  std::vector<std::pair<ncclComm*, std::function<void()>>> creations;
  std::vector<std::unique_ptr<ncclComm>> discarded;            // NCCL_SPLIT_NOCOLOR's: no comm results
  std::vector<std::pair<ncclComm*, std::vector<Call>>> calls;  // per communicator, in first-call order
};
extern thread_local Group t_group;

// Runs the call now, or keeps it for the group's end (calls.cpp).
ncclResult_t submit(ncclComm* c, Call k);
// Runs `op` now on a blocking communicator, or on a thread of its own on a non-blocking one
// (ncclInProgress; ncclCommGetAsyncError says when it ends) (memory.cpp).
ncclResult_t run_waiting(ncclComm* c, const char* what, std::function<Status()> op);
// Runs f(i) for i < n, each on its own thread when n > 1; the first failure (calls.cpp).
ncclResult_t run_each(size_t n, const std::function<ncclResult_t(size_t)>& f);

}  // namespace dcomm_nccl
