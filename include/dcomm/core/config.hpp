// Build-wide switches. Every other dcomm header includes this one first.
#pragma once

#define DCOMM_VERSION_MAJOR 0
#define DCOMM_VERSION_MINOR 1
#define DCOMM_VERSION_PATCH 0

// A versioned inline namespace: two copies of dcomm's headers of different versions can live
// in one process (each with its own registries and symbols), which NCCL's flat C names forbid.
#define DCOMM_NAMESPACE_BEGIN \
  namespace dcomm {           \
  inline namespace v0_1 {
#define DCOMM_NAMESPACE_END \
  }                         \
  }

// DCOMM_HAS_CUDA is always defined to 0 or 1; test it with #if, never #ifdef.
#if defined(__CUDACC__)
#define DCOMM_HAS_CUDA 1
#define DCOMM_HOST_DEVICE __host__ __device__
#else
#define DCOMM_HAS_CUDA 0
#define DCOMM_HOST_DEVICE
#endif
// Code written once for host and device primitives (algo/) is a __host__ __device__ template
// preceded by this: nvcc must not complain when an instantiation with host-only primitives
// calls host code.
#if defined(__CUDACC__)
#define DCOMM_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define DCOMM_HD_TEMPLATE
#endif
// Returns the status of `expr` from the enclosing function when it is not ok(): for code that
// serves more than one status type (Status on the host, DeviceStatus in kernels).
#define DCOMM_TRY(expr)                      \
  do {                                       \
    auto dcomm_try_ = (expr);                \
    if (!dcomm_try_.ok()) return dcomm_try_; \
  } while (0)

// A device function called from many places in a kernel, kept out of line there: the kernels
// stay small (and quick to compile) and a call per slice costs nothing next to the slice.
#if defined(__CUDA_ARCH__)
#define DCOMM_DEVICE_NOINLINE __noinline__
#else
#define DCOMM_DEVICE_NOINLINE
#endif

// Unrolls the next loop in device code (host compilers would warn about the pragma).
#if defined(__CUDACC__)
#define DCOMM_UNROLL _Pragma("unroll")
#else
#define DCOMM_UNROLL
#endif

// The optional components define these to 1 (CMake targets dcomm::topo, dcomm::ucx,
// dcomm::verbs); like DCOMM_HAS_CUDA they are always 0 or 1: test them with #if.
#ifndef DCOMM_HAS_HWLOC
#define DCOMM_HAS_HWLOC 0
#endif
#ifndef DCOMM_HAS_UCX
#define DCOMM_HAS_UCX 0
#endif
#ifndef DCOMM_HAS_VERBS
#define DCOMM_HAS_VERBS 0
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DCOMM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define DCOMM_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define DCOMM_CPU_RELAX() ((void)0)
#endif
