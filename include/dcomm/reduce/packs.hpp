// The loops of the device reduction kernels, written once for the host and the device: a
// team of threads (a CUDA block, a whole grid, or one host thread) reduces or copies a range
// in 16-byte packs, with the unaligned head and the short tail done element by element.
//
// Thread k of a team of size S takes packs k, k+S, k+2S, ... (kCopyUnroll or kReduceUnroll of
// them per trip, so a thread has several 16-byte loads in flight), which keeps a warp's
// accesses contiguous. The arithmetic is reduce/functors.hpp's combine() and divide(), the host path's, so the device
// gives the host's bits; tests/reduce/test_packs.cpp checks that on the CPU, team by team.
//
// On the device every load goes through L2 (ld.global.cg): a FIFO slot another GPU or process
// wrote must not be read from a stale L1 line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "dcomm/core/config.hpp"
#include "dcomm/core/float8.hpp"
#include "dcomm/reduce/functors.hpp"

DCOMM_NAMESPACE_BEGIN

// One host thread as a team: what the CPU tests run the device loops with. `index` and
// `size` may also describe one member of a larger pretended team.
struct SerialTeam {
  int index = 0;
  int size = 1;
  DCOMM_HOST_DEVICE int thread() const { return index; }
  DCOMM_HOST_DEVICE int threads() const { return size; }
  DCOMM_HOST_DEVICE void sync() const {}
  DCOMM_HOST_DEVICE int broadcast(int v) const { return v; }  // thread 0's value, to every thread
};

namespace detail {
constexpr size_t kPackBytes = 16;
// Packs in flight per thread. A copy holds one pack a load (8: a block of 512 threads keeps
// 64 KB in flight); a reduction holds two (its inputs), so 4 (2 for 8-bit types, whose packs
// hold 16 elements and expand to 16 floats) keeps it within 64 registers a thread.
constexpr int kCopyUnroll = 8;
template <class T>
inline constexpr int kReduceUnroll = sizeof(T) == 1 ? 2 : 4;

template <size_t N>
struct UintOf;
template <>
struct UintOf<1> {
  using type = uint8_t;
};
template <>
struct UintOf<2> {
  using type = uint16_t;
};
template <>
struct UintOf<4> {
  using type = uint32_t;
};
template <>
struct UintOf<8> {
  using type = unsigned long long;
};

// One element, loaded through L2 on the device.
template <class T>
DCOMM_HOST_DEVICE inline T load_elem(const T* p) {
#if defined(__CUDA_ARCH__)
  using U = typename UintOf<sizeof(T)>::type;
  U u = __ldcg(reinterpret_cast<const U*>(p));
  T v;
  memcpy(static_cast<void*>(&v), &u, sizeof v);
  return v;
#else
  return *p;
#endif
}

struct alignas(16) Pack16 {
  uint32_t w[4];
};
DCOMM_HOST_DEVICE inline Pack16 load_pack(const void* p) {
#if defined(__CUDA_ARCH__)
  uint4 u = __ldcg(static_cast<const uint4*>(p));
  return Pack16{{u.x, u.y, u.z, u.w}};
#else
  Pack16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}
DCOMM_HOST_DEVICE inline void store_pack(void* p, const Pack16& v) {
#if defined(__CUDA_ARCH__)
  __stcg(static_cast<uint4*>(p), make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]));
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// The number of leading elements before every pointer reaches a 16-byte boundary, or `n`
// (all scalar) when the pointers are misaligned differently.
DCOMM_HOST_DEVICE inline size_t aligned_head(size_t elem, size_t n, const void* p0, const void* p1, const void* p2,
                                             const void* p3) {
  auto mis = [](const void* p) { return static_cast<size_t>(reinterpret_cast<uintptr_t>(p) & (kPackBytes - 1)); };
  const size_t m = mis(p0);
  if ((p1 && mis(p1) != m) || (p2 && mis(p2) != m) || (p3 && mis(p3) != m) || m % elem) return n;
  const size_t head = ((kPackBytes - m) & (kPackBytes - 1)) / elem;
  return head < n ? head : n;
}

// out = a (op) b elementwise in the accumulator type, then divided by `ranks` when ranks > 0
// (kAvg's last step): the bits of the host reducer followed by Reducer::finalize.
template <class T, class Op>
DCOMM_HOST_DEVICE inline T reduce_elem(T a, T b, int divide_by) {
  T r = combine<T, Op>(a, b);
  return divide_by > 0 ? divide<T>(r, divide_by) : r;
}

// One pack: x = x (op) y, element by element (reduce_elem's bits).
template <class T, class Op>
DCOMM_HOST_DEVICE inline void reduce_pack_elems(Pack16& x, const Pack16& y, int divide_by) {
  constexpr size_t kPer = kPackBytes / sizeof(T);
  T xs[kPer], ys[kPer];
  memcpy(static_cast<void*>(xs), &x, sizeof xs);
  memcpy(static_cast<void*>(ys), &y, sizeof ys);
  DCOMM_UNROLL
  for (size_t k = 0; k < kPer; ++k) xs[k] = reduce_elem<T, Op>(xs[k], ys[k], divide_by);
  memcpy(&x, xs, sizeof xs);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// fp8 on a GPU with fp8 conversions: two elements per conversion instruction (fp8x2 to
// f16x2 in, two floats to fp8x2 out), against one per element in reduce_elem: the same
// rounding (round to nearest even, satfinite), so the same bits. kAvg's division, which
// rounds twice, takes the element path.
template <bool kE4M3>
__device__ inline void fp8x2_to_floats(uint32_t two, float* lo, float* hi) {
  uint32_t h2;
  const uint16_t in = static_cast<uint16_t>(two);
  if (kE4M3) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
  const uint16_t l = static_cast<uint16_t>(h2 & 0xffffu), h = static_cast<uint16_t>(h2 >> 16);
  asm("cvt.f32.f16 %0, %1;" : "=f"(*lo) : "h"(l));
  asm("cvt.f32.f16 %0, %1;" : "=f"(*hi) : "h"(h));
}
template <bool kE4M3>
__device__ inline uint32_t floats_to_fp8x2(float lo, float hi) {
  uint16_t pair;  // the first operand lands in the upper byte
  if (kE4M3) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
  return pair;
}
template <bool kE4M3, class Op>
__device__ inline void reduce_fp8_pack(Pack16& x, const Pack16& y) {
  DCOMM_UNROLL
  for (int w = 0; w < 4; ++w) {
    uint32_t out = 0;
    DCOMM_UNROLL
    for (int h = 0; h < 2; ++h) {
      float a0, a1, b0, b1;
      fp8x2_to_floats<kE4M3>(x.w[w] >> (16 * h), &a0, &a1);
      fp8x2_to_floats<kE4M3>(y.w[w] >> (16 * h), &b0, &b1);
      out |= floats_to_fp8x2<kE4M3>(Op{}(a0, b0), Op{}(a1, b1)) << (16 * h);
    }
    x.w[w] = out;
  }
}
#endif

template <class T, class Op>
DCOMM_HOST_DEVICE inline void reduce_pack(Pack16& x, const Pack16& y, int divide_by) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  constexpr bool kE4M3 = std::is_same_v<T, float8_e4m3>, kE5M2 = std::is_same_v<T, float8_e5m2>;
  if constexpr (kE4M3 || kE5M2) {
    if (divide_by == 0) return reduce_fp8_pack<kE4M3, Op>(x, y);
  }
#endif
  reduce_pack_elems<T, Op>(x, y, divide_by);
}
}  // namespace detail

// dst[i] = a[i] (op) b[i], and dst2[i] the same when dst2 is set (a peer's buffer: the fused
// "reduce and copy" of recv_reduce_copy_send). divide_by > 0 finalizes kAvg. dst may be a or
// b (same index); all pointers must be T-aligned.
template <class T, class Op, class Team>
DCOMM_HOST_DEVICE DCOMM_DEVICE_NOINLINE void team_reduce(const Team& team, T* dst, T* dst2, const T* a, const T* b,
                                                         size_t n, int divide_by = 0) {
  constexpr size_t kPer = detail::kPackBytes / sizeof(T);
  constexpr int kUnroll = detail::kReduceUnroll<T>;
  const size_t tid = static_cast<size_t>(team.thread()), nt = static_cast<size_t>(team.threads());
  const size_t head = detail::aligned_head(sizeof(T), n, dst, dst2, a, b);
  for (size_t i = tid; i < head; i += nt) {
    T r = detail::reduce_elem<T, Op>(detail::load_elem(a + i), detail::load_elem(b + i), divide_by);
    dst[i] = r;
    if (dst2) dst2[i] = r;
  }
  const size_t packs = (n - head) / kPer;
  const T* pa = a + head;
  const T* pb = b + head;
  T* pd = dst + head;
  T* pd2 = dst2 ? dst2 + head : nullptr;
  for (size_t base = tid; base < packs; base += nt * kUnroll) {
    detail::Pack16 x[kUnroll] = {}, y[kUnroll] = {};
    DCOMM_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      size_t p = base + static_cast<size_t>(u) * nt;
      if (p < packs) {
        x[u] = detail::load_pack(pa + p * kPer);
        y[u] = detail::load_pack(pb + p * kPer);
      }
    }
    DCOMM_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      size_t p = base + static_cast<size_t>(u) * nt;
      if (p >= packs) break;
      detail::reduce_pack<T, Op>(x[u], y[u], divide_by);
      detail::store_pack(pd + p * kPer, x[u]);
      if (pd2) detail::store_pack(pd2 + p * kPer, x[u]);
    }
  }
  for (size_t i = head + packs * kPer + tid; i < n; i += nt) {
    T r = detail::reduce_elem<T, Op>(detail::load_elem(a + i), detail::load_elem(b + i), divide_by);
    dst[i] = r;
    if (dst2) dst2[i] = r;
  }
}

// dst[0, bytes) = src, and dst2 the same when set; dst == src copies nothing to dst.
template <class Team>
DCOMM_HOST_DEVICE DCOMM_DEVICE_NOINLINE void team_copy(const Team& team, void* dst, void* dst2, const void* src,
                                                       size_t bytes) {
  auto* d = static_cast<uint8_t*>(dst == src ? nullptr : dst);
  auto* d2 = static_cast<uint8_t*>(dst2);
  if (!d && !d2) return;
  if (!d) {
    d = d2;
    d2 = nullptr;
  }
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t tid = static_cast<size_t>(team.thread()), nt = static_cast<size_t>(team.threads());
  const size_t head = detail::aligned_head(1, bytes, d, d2, s, nullptr);
  for (size_t i = tid; i < head; i += nt) {
    uint8_t v = detail::load_elem(s + i);
    d[i] = v;
    if (d2) d2[i] = v;
  }
  const size_t packs = (bytes - head) / detail::kPackBytes;
  for (size_t base = tid; base < packs; base += nt * detail::kCopyUnroll) {
    detail::Pack16 x[detail::kCopyUnroll] = {};
    DCOMM_UNROLL
    for (int u = 0; u < detail::kCopyUnroll; ++u) {
      size_t p = base + static_cast<size_t>(u) * nt;
      if (p < packs) x[u] = detail::load_pack(s + head + p * detail::kPackBytes);
    }
    DCOMM_UNROLL
    for (int u = 0; u < detail::kCopyUnroll; ++u) {
      size_t p = base + static_cast<size_t>(u) * nt;
      if (p >= packs) break;
      detail::store_pack(d + head + p * detail::kPackBytes, x[u]);
      if (d2) detail::store_pack(d2 + head + p * detail::kPackBytes, x[u]);
    }
  }
  for (size_t i = head + packs * detail::kPackBytes + tid; i < bytes; i += nt) {
    uint8_t v = detail::load_elem(s + i);
    d[i] = v;
    if (d2) d2[i] = v;
  }
}

DCOMM_NAMESPACE_END
