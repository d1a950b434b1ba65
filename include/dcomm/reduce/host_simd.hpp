// x86 AVX2 kernels for the 16-bit float types, chosen at run time (the library is built
// without -march flags, so a plain build gets them too). Scalar float16 conversion is a
// branchy bit-twiddle, 100x slower than the other types' loops; F16C converts 8 values per
// instruction with the same IEEE round-to-nearest-even, and bfloat16's rounding vectorizes as
// integer arithmetic. Results are bit-identical to the scalar functors (tests/reduce).
#pragma once

#include <cstddef>
#include <cstdint>

#include "dcomm/core/config.hpp"
#include "dcomm/reduce/functors.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DCOMM_HOST_SIMD 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define DCOMM_HOST_SIMD 0
#endif

DCOMM_NAMESPACE_BEGIN
namespace simd {

#if DCOMM_HOST_SIMD
#define DCOMM_AVX2 __attribute__((target("avx2,f16c")))

inline bool has_avx2_f16c() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
  }();
  return ok;
}

// The functors' exact semantics on 8 floats: min is `b < a ? b : a`, max `a < b ? b : a`.
template <class Op>
DCOMM_AVX2 inline __m256 apply(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, SumOp>) return _mm256_add_ps(a, b);
  else if constexpr (std::is_same_v<Op, ProdOp>) return _mm256_mul_ps(a, b);
  else if constexpr (std::is_same_v<Op, MinOp>) return _mm256_min_ps(b, a);
  else return _mm256_max_ps(b, a);
}

struct Float16Lanes {
  using Scalar = float16;
  DCOMM_AVX2 static __m256 load(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  DCOMM_AVX2 static void store(void* p, __m256 v) {
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct Bfloat16Lanes {
  using Scalar = bfloat16;
  DCOMM_AVX2 static __m256 load(const void* p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // Round to nearest even; NaNs become quiet NaNs (as bfloat16::from_float).
  DCOMM_AVX2 static void store(void* p, __m256 v) {
    __m256i u = _mm256_castps_si256(v);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(static_cast<__m128i*>(p), packed);
  }
};

template <class Lanes, class Op>
DCOMM_AVX2 void reduce16(void* dst, const void* a, const void* b, size_t count) {
  using T = typename Lanes::Scalar;
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) Lanes::store(d + i, apply<Op>(Lanes::load(x + i), Lanes::load(y + i)));
  for (; i < count; ++i) d[i] = combine<T, Op>(x[i], y[i]);
}

template <class Lanes>
DCOMM_AVX2 void divide16(void* buf, size_t count, int ranks) {
  using T = typename Lanes::Scalar;
  auto* d = static_cast<T*>(buf);
  const __m256 n = _mm256_set1_ps(static_cast<float>(ranks));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) Lanes::store(d + i, _mm256_div_ps(Lanes::load(d + i), n));
  for (; i < count; ++i) d[i] = divide<T>(d[i], ranks);
}

template <class T>
using LanesOf = std::conditional_t<std::is_same_v<T, float16>, Float16Lanes, Bfloat16Lanes>;

#undef DCOMM_AVX2
#endif

}  // namespace simd
DCOMM_NAMESPACE_END
