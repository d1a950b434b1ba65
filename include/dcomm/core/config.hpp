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
