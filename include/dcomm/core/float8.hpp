// 8-bit float storage types of the OCP FP8 formats: float8_e4m3 (E4M3FN: bias 7, no
// infinities, one NaN pattern per sign, largest 448) and float8_e5m2 (bias 15, IEEE-like with
// infinities, largest 57344). Reductions on them accumulate in float (reduce/functors.hpp).
//
// float -> fp8 rounds to nearest, ties to even, and saturates: a finite value beyond the
// largest one, and an infinity, become the largest finite value of that sign; NaN stays NaN.
// That is PTX's `cvt.rn.satfinite` and what cuda_fp8.h's constructors do, so a device using
// the hardware conversion gets these bits. The conversions are integer arithmetic, the same
// code on the host and the device.
#pragma once

#include <cstdint>

#include "dcomm/core/config.hpp"
#include "dcomm/core/half.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// The encoding: kExp exponent bits, kMant mantissa bits; kMaxCode the largest finite code (no
// sign); kNanCode the NaN we produce; kHasInf whether exponent all-ones, mantissa 0 is infinity.
template <int kExp, int kMant, uint8_t kMaxCode, uint8_t kNanCode, bool kHasInf>
struct Float8Format {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;

  DCOMM_HOST_DEVICE static bool is_nan(uint8_t b) {
    uint8_t m = b & 0x7fu;
    if (kHasInf) return (m >> kMant) == (1u << kExp) - 1u && (m & ((1u << kMant) - 1u));
    return m == 0x7fu;
  }

  DCOMM_HOST_DEVICE static uint8_t from_float(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // The hardware conversion: the same rounding and saturation (see the top of this file).
    uint16_t pair;
    if (kExp == 4) asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
    else asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
    return static_cast<uint8_t>(pair & 0xffu);
#else
    return from_float_soft(f);
#endif
  }
  DCOMM_HOST_DEVICE static uint8_t from_float_soft(float f) {
    uint32_t x = float_bits(f);
    uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xffu && mant) return static_cast<uint8_t>(sign | kNanCode);
    if (exp == 0xffu) return static_cast<uint8_t>(sign | kMaxCode);  // satfinite: inf -> max
    int e = static_cast<int>(exp) - 127 + kBias;
    uint32_t code;
    if (e <= 0) {  // subnormal (or zero) in fp8: units of 2^(1 - bias - kMant)
      if (e < -kMant) return sign;
      code = shift_round_even(mant | 0x800000u, 23 - kMant + 1 - e);
    } else {
      if (e > (1 << kExp)) return static_cast<uint8_t>(sign | kMaxCode);
      // A carry out of the mantissa bumps the exponent; past the largest code, saturate.
      code = shift_round_even((static_cast<uint32_t>(e) << 23) | mant, 23 - kMant);
    }
    if (code > kMaxCode) code = kMaxCode;
    return static_cast<uint8_t>(sign | code);
  }

  DCOMM_HOST_DEVICE static float to_float(uint8_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h2;  // exact: every fp8 value is a half value
    uint16_t in = b;
    if (kExp == 4) asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
    else asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h2) : "h"(in));
    return float16::to_float(static_cast<uint16_t>(h2 & 0xffffu));
#else
    return to_float_soft(b);
#endif
  }
  DCOMM_HOST_DEVICE static float to_float_soft(uint8_t b) {
    uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
    uint32_t exp = (b & 0x7fu) >> kMant;
    uint32_t mant = b & ((1u << kMant) - 1u);
    if (is_nan(b)) return bits_float(sign | 0x7fc00000u);
    if (kHasInf && exp == (1u << kExp) - 1u) return bits_float(sign | 0x7f800000u);
    if (exp == 0) {  // subnormal: mant units of 2^(1 - bias - kMant), exact in float
      float v = static_cast<float>(mant) * bits_float(static_cast<uint32_t>(127 + 1 - kBias - kMant) << 23);
      return bits_float(sign | float_bits(v));
    }
    return bits_float(sign | ((exp - kBias + 127) << 23) | (mant << (23 - kMant)));
  }
};

}  // namespace detail

struct float8_e4m3 : detail::FloatStorage<detail::Float8Format<4, 3, 0x7e, 0x7f, false>, uint8_t> {
  using FloatStorage::FloatStorage;
};
struct float8_e5m2 : detail::FloatStorage<detail::Float8Format<5, 2, 0x7b, 0x7e, true>, uint8_t> {
  using FloatStorage::FloatStorage;
};

DCOMM_NAMESPACE_END
