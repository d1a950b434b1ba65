// The CUDA reduction and copy kernels: reduce/packs.hpp's loops over a whole grid (a
// standalone reduction) or one block (a channel of a collective). Needs nvcc.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/reduce/host_reducer.hpp"
#include "dcomm/reduce/packs.hpp"

DCOMM_NAMESPACE_BEGIN

// A thread block as a team: what one channel of a collective runs on.
struct BlockTeam {
  __device__ int thread() const { return static_cast<int>(threadIdx.x); }
  __device__ int threads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
  __device__ int broadcast(int v) const {
    __shared__ int slot;
    __syncthreads();
    if (threadIdx.x == 0) slot = v;
    __syncthreads();
    return slot;
  }
};

// The whole grid as a team, for elementwise kernels (no sync: blocks cannot wait on each other).
struct GridTeam {
  __device__ int thread() const { return static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); }
  __device__ int threads() const { return static_cast<int>(gridDim.x * blockDim.x); }
};

namespace detail {
constexpr int kElementwiseThreads = 512;
template <class T, class Op>
__global__ void __launch_bounds__(kElementwiseThreads, 2)
    reduce_kernel(T* dst, T* dst2, const T* a, const T* b, size_t n, int divide_by) {
  team_reduce<T, Op>(GridTeam{}, dst, dst2, a, b, n, divide_by);
}
// dst[i] = src[i] * factor (PreMulSum's scaling), the factor read here from device memory
// when `on_device`, else the value passed.
template <class T>
__global__ void __launch_bounds__(kElementwiseThreads)
    scale_kernel(T* dst, const T* src, size_t n, const T* on_device, T value) {
  const T f = on_device ? *on_device : value;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = combine<T, ProdOp>(src[i], f);
}
__global__ void __launch_bounds__(kElementwiseThreads, 2)
    copy_kernel(void* dst, void* dst2, const void* src, size_t bytes) {
  team_copy(GridTeam{}, dst, dst2, src, bytes);
}
// Blocks of `kernel` resident at once on the current GPU (asked once per kernel: a process's
// GPUs are taken to be of one kind).
inline size_t resident_blocks(const void* kernel) {
  int dev = 0, sms = 80, per_sm = 1;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kElementwiseThreads, 0);
  }
  cudaGetLastError();
  return static_cast<size_t>(std::max(1, sms)) * static_cast<size_t>(std::max(1, per_sm));
}
// The grid for an elementwise kernel over `bytes`, each thread moving `per_thread` bytes a
// trip: no more blocks than are resident at once (the grid-stride loop does the rest, so
// every block stays busy to the end and none waits for a free multiprocessor), fewer for
// short ranges.
template <auto Kernel>
unsigned blocks_for(size_t bytes, size_t per_thread) {
  static const size_t resident = resident_blocks(reinterpret_cast<const void*>(Kernel));
  const size_t per_block = static_cast<size_t>(kElementwiseThreads) * per_thread;
  const size_t want = (bytes + per_block - 1) / per_block;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(want, resident)));
}
}  // namespace detail

// dst = a (op) b over `count` elements on `stream`, and dst2 the same when set (the fused
// reduce-and-copy); kAvg divides by `ranks`. Any alignment; 16-byte aligned buffers go in packs.
inline Status reduce_on_device(void* dst, void* dst2, const void* a, const void* b, size_t count, DataType type,
                               ReduceOp op, int ranks, cudaStream_t stream) {
  if (!is_valid(type) || !is_valid(op)) return invalid_argument("reduce_on_device: unknown data type or op");
  if (count == 0) return {};
  const int divide_by = op == ReduceOp::kAvg && ranks > 1 ? ranks : 0;
  dispatch_type(type, [&]<class T>() {
    return dispatch_op(op, [&]<class Op>() {
      const unsigned blocks = detail::blocks_for<&detail::reduce_kernel<T, Op>>(
          count * sizeof(T), detail::kPackBytes * detail::kReduceUnroll<T>);
      detail::reduce_kernel<T, Op><<<blocks, detail::kElementwiseThreads, 0, stream>>>(
          static_cast<T*>(dst), static_cast<T*>(dst2), static_cast<const T*>(a), static_cast<const T*>(b), count,
          divide_by);
      return 0;
    });
  });
  return cuda_status(cudaGetLastError(), detail::cat("reduce kernel (", to_string(type), " ", to_string(op), ")"));
}

// dst = src * factor over `count` elements on `stream` (in place when dst == src); `factor` is
// one element of `type`, in device memory read when the kernel runs (factor_on_device), else
// in host memory read now.
inline Status scale_on_device(void* dst, const void* src, size_t count, DataType type, const void* factor,
                              bool factor_on_device, cudaStream_t stream) {
  if (!is_valid(type)) return invalid_argument("scale_on_device: unknown data type");
  if (count == 0) return {};
  dispatch_type(type, [&]<class T>() {
    T value{};
    if (!factor_on_device) std::memcpy(&value, factor, sizeof(T));
    const unsigned blocks = detail::blocks_for<&detail::scale_kernel<T>>(count * sizeof(T), sizeof(T));
    detail::scale_kernel<T><<<blocks, detail::kElementwiseThreads, 0, stream>>>(
        static_cast<T*>(dst), static_cast<const T*>(src), count,
        factor_on_device ? static_cast<const T*>(factor) : nullptr, value);
    return 0;
  });
  return cuda_status(cudaGetLastError(), detail::cat("scale kernel (", to_string(type), ")"));
}

// dst = src (bytes), and dst2 the same when set.
inline Status copy_on_device(void* dst, void* dst2, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return {};
  const unsigned blocks = detail::blocks_for<&detail::copy_kernel>(bytes, detail::kPackBytes * detail::kCopyUnroll);
  detail::copy_kernel<<<blocks, detail::kElementwiseThreads, 0, stream>>>(dst, dst2, src, bytes);
  return cuda_status(cudaGetLastError(), "copy kernel");
}

DCOMM_NAMESPACE_END
