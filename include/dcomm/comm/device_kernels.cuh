// The device communicator's kernels: one block per channel (collectives) or per lane and
// channel (sends and receives), each one line around comm/device_work.hpp's block bodies; and
// how many of their blocks one multiprocessor holds, which bounds the channels (every block
// of a launch must be resident with its peers'). Needs nvcc.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "dcomm/comm/device_plan.hpp"
#include "dcomm/comm/device_work.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/core/types.hpp"
#include "dcomm/reduce/kernels.cuh"

DCOMM_NAMESPACE_BEGIN

namespace detail {
template <class T>
__global__ void __launch_bounds__(kMaxDeviceThreads) coll_kernel(DeviceCollWork w) {
  coll_block<BlockTeam, T>(BlockTeam{}, w, static_cast<int>(blockIdx.x));
}
__global__ void __launch_bounds__(kMaxDeviceThreads) p2p_kernel(DeviceP2pWork w) {
  p2p_block(BlockTeam{}, w, static_cast<int>(blockIdx.x));
}
// Several ranks of one process each launch on their own stream: with more streams than
// hardware queues (8 by default), a kernel can queue behind another rank's kernel that waits
// for it. 32, the most CUDA allows, unless the user set it; only before the process's first
// CUDA call does it take effect.
inline void raise_device_connections() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0); }

inline Status fewest_resident(const void* kernel, int threads, int* fewest) {
  int blocks = 0;
  DCOMM_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0),
                                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  *fewest = std::min(*fewest, blocks);
  return {};
}
}  // namespace detail

// Blocks of the device communicator's kernels one multiprocessor of the current device holds
// at `threads` a block: the fewest over the collective kernels' types (their register use
// differs) and the send/recv kernel.
inline Result<int> resident_blocks_per_sm(int threads, int device) {
  int fewest = 1 << 20;
  for (int t = 0; t < kNumDataTypes; ++t)
    DCOMM_RETURN_IF_ERROR(dispatch_type(static_cast<DataType>(t), [&]<class T>() {
      return detail::fewest_resident(reinterpret_cast<const void*>(&detail::coll_kernel<T>), threads, &fewest);
    }));
  DCOMM_RETURN_IF_ERROR(detail::fewest_resident(reinterpret_cast<const void*>(&detail::p2p_kernel), threads, &fewest));
  if (fewest < 1)
    return make_error(ErrorCode::kOutOfResources, "no collective kernel of ", threads,
                      " threads fits on one multiprocessor of CUDA device ", device, " (lower DCOMM_CUDA_THREADS)");
  return fewest;
}

DCOMM_NAMESPACE_END
