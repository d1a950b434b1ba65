// float16 and bfloat16 storage types with exact, round-to-nearest-even conversions to and
// from float. Reductions on them accumulate in float (see reduce/functors.hpp). The
// conversions are plain integer arithmetic on the host; the device uses the hardware's
// conversions, which round the same way (tests/core/test_half.cpp checks the host's against
// the compiler's); only the payload of a NaN may differ.
#pragma once

#include <cstdint>
#include <cstring>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
DCOMM_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
DCOMM_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Rounds `value >> shift` to nearest, ties to even.
DCOMM_HOST_DEVICE inline uint32_t shift_round_even(uint32_t value, int shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  return kept;
}

// The storage of the narrow float types (float16, bfloat16, the fp8 types): `Bits` holds the
// encoding, F (the Format) converts it to and from float.
template <class F, class Bits>
struct FloatStorage {
  using Format = F;
  Bits bits = 0;

  FloatStorage() = default;
  DCOMM_HOST_DEVICE explicit FloatStorage(float f) : bits(F::from_float(f)) {}
  DCOMM_HOST_DEVICE explicit operator float() const { return F::to_float(bits); }
};
}  // namespace detail

struct float16 : detail::FloatStorage<float16, uint16_t> {
  using FloatStorage::FloatStorage;

  DCOMM_HOST_DEVICE static uint16_t from_float(float f) {
#if defined(__CUDA_ARCH__)
    uint16_t h;  // the hardware's round to nearest even: the same bits (NaN payloads aside)
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return from_float_soft(f);
#endif
  }
  DCOMM_HOST_DEVICE static uint16_t from_float_soft(float f) {
    uint32_t x = detail::float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
    if (e <= 0) {  // half subnormal (or zero): units of 2^-24
      if (e < -10) return static_cast<uint16_t>(sign);
      return static_cast<uint16_t>(sign | detail::shift_round_even(mant | 0x800000u, 14 - e));
    }
    // A carry out of the mantissa correctly bumps the exponent (up to infinity).
    uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }

  DCOMM_HOST_DEVICE static float to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return to_float_soft(h);
#endif
  }
  DCOMM_HOST_DEVICE static float to_float_soft(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return detail::bits_float(sign);
      int e = -14;  // normalize the subnormal
      while (!(mant & 0x400u)) {
        mant <<= 1;
        --e;
      }
      mant &= 0x3ffu;
      return detail::bits_float(sign | (static_cast<uint32_t>(e + 127) << 23) | (mant << 13));
    }
    return detail::bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
  }
};

struct bfloat16 : detail::FloatStorage<bfloat16, uint16_t> {
  using FloatStorage::FloatStorage;

  DCOMM_HOST_DEVICE static uint16_t from_float(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint16_t b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
#else
    return from_float_soft(f);
#endif
  }
  DCOMM_HOST_DEVICE static uint16_t from_float_soft(float f) {
    uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  }
  DCOMM_HOST_DEVICE static float to_float(uint16_t b) { return detail::bits_float(static_cast<uint32_t>(b) << 16); }
};

DCOMM_NAMESPACE_END
