// The CUDA runtime's errors as Status, where a pointer lives, and the current device for a
// scope: what every layer of the device path (transport/cuda_ipc.cuh, reduce/kernels.cuh,
// comm/device_comm.cuh) needs from CUDA. Needs nvcc or the CUDA runtime's headers.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// "what: cudaErrorName: description", or ok.
inline Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return {};
  return make_error(e == cudaErrorMemoryAllocation ? ErrorCode::kOutOfResources : ErrorCode::kSystemError, what, ": ",
                    cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

// `bytes` at `p` (named `which` in the error) are device or managed memory, and device memory
// is on `device`: what a collective on that device may read or write. Nothing for 0 bytes.
inline Status check_device_buffer(const void* p, size_t bytes, int device, const char* which) {
  if (bytes == 0) return {};
  if (!p) return invalid_argument(which, " is null for ", bytes, " bytes");
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess ||
      (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
    cudaGetLastError();
    return invalid_argument(which, " (", p, ") is not CUDA device memory");
  }
  if (a.type == cudaMemoryTypeDevice && a.device != device)
    return invalid_argument(which, " is on CUDA device ", a.device, ", this communicator's is ", device);
  return {};
}

namespace detail {
// Whether `stream` is being captured into a CUDA graph (its work then runs at the graph's launch).
inline bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone;
}

// Makes `device` current for a scope and restores the caller's: a call on a communicator
// must reach its own GPU whatever the calling thread had selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};
}  // namespace detail

DCOMM_NAMESPACE_END
