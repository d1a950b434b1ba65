// A call's way to the CUDA path (cuda_path.hpp) when its tensor is on a GPU: inside a
// ProcessGroupDcomm member, DCOMM_TORCH_ON_CUDA(tensor, call) returns cuda_->call for a CUDA
// tensor (making the CUDA path on first use) and goes on for a host one. A build without CUDA
// has no CUDA path, and a CUDA tensor is an error that says so.
#pragma once

#include "process_group.hpp"

#ifdef DCOMM_TORCH_CUDA
#include "cuda_path.hpp"
#else
namespace dcomm_torch {
class CudaPath {};  // a build without CUDA has none
}  // namespace dcomm_torch
#endif

#ifdef DCOMM_TORCH_CUDA
#define DCOMM_TORCH_ON_CUDA(tensor, call)                                               \
  do {                                                                                  \
    if ((tensor).is_cuda()) {                                                           \
      if (!cuda_) cuda_ = std::make_unique<CudaPath>(*this, (tensor).device().index()); \
      return cuda_->call;                                                               \
    }                                                                                   \
  } while (0)
#else
#define DCOMM_TORCH_ON_CUDA(tensor, call)                                                  \
  TORCH_CHECK(!(tensor).is_cuda(),                                                         \
              "dcomm: this dcomm_torch was built without CUDA; CUDA tensors need a build " \
              "against a CUDA torch (torch 2.x) with nvcc")
#endif
