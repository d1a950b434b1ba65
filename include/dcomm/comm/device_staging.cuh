// The staging path (comm/device_staging.hpp) over CUDA's stream operations. Needs nvcc or the
// CUDA runtime's headers.
#pragma once

#include <cuda_runtime.h>

#include "dcomm/comm/device_staging.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"

DCOMM_NAMESPACE_BEGIN

struct CudaStagingOps {
  static Status copy(void* dst, const void* src, size_t bytes, bool to_host, void* stream) {
    return cuda_status(cudaMemcpyAsync(dst, src, bytes, to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                       static_cast<cudaStream_t>(stream)),
                       "cudaMemcpyAsync (staging)");
  }
  static Status host_func(void* stream, void (*fn)(void*), void* arg) {
    return cuda_status(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), fn, arg), "cudaLaunchHostFunc");
  }
  static bool capturing(void* stream) { return detail::stream_capturing(static_cast<cudaStream_t>(stream)); }
  static void* alloc_pinned(size_t bytes) {
    void* p = nullptr;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : nullptr;
  }
  static void free_pinned(void* p) { cudaFreeHost(p); }
};
using DeviceStaging = BasicDeviceStaging<CudaStagingOps>;

DCOMM_NAMESPACE_END
