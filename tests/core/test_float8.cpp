#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <dcomm/core/float8.hpp>

#if defined(DCOMM_TEST_CUDA_FP8)
#include <cuda_fp8.h>  // NVIDIA's host implementation of the conversions, as a second reference
#endif

using dcomm::float8_e4m3;
using dcomm::float8_e5m2;

namespace {
// The reference: the finite code nearest to f (ties to the even code), saturating to the
// largest finite value, found by searching every code in double.
template <class F>
uint8_t nearest_code(float f) {
  if (std::isnan(f)) return F::Format::from_float(f);
  double best_d = std::numeric_limits<double>::infinity();
  int best = -1;
  double target = std::isinf(f) ? std::copysign(1e300, f) : f;
  for (int c = 0; c < 256; ++c) {
    float v = F::Format::to_float(static_cast<uint8_t>(c));
    if (!std::isfinite(v)) continue;
    double d = std::fabs(static_cast<double>(v) - target);
    if (d < best_d || (d == best_d && (c & 1) == 0 && std::signbit(v) == std::signbit(f))) {
      best_d = d;
      best = c;
    }
  }
  return static_cast<uint8_t>(best);
}

template <class F>
void check_format(int max_finite, float largest) {
  // Every code survives the round trip through float (NaNs stay NaN).
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    float f = F::Format::to_float(static_cast<uint8_t>(c));
    if (std::isnan(f)) {
      ++nans;
      CHECK(std::isnan(F::Format::to_float(F::Format::from_float(f))));
      continue;
    }
    if (std::isinf(f)) continue;
    CHECK_MESSAGE(F::Format::from_float(f) == c, "code ", c);
  }
  CHECK(static_cast<float>(F::Format::to_float(static_cast<uint8_t>(max_finite))) == largest);
  // Saturation: beyond the largest value, and infinities, give the largest finite value.
  CHECK(F::Format::from_float(largest * 4) == max_finite);
  CHECK(F::Format::from_float(std::numeric_limits<float>::infinity()) == max_finite);
  CHECK(F::Format::from_float(-std::numeric_limits<float>::infinity()) == (0x80 | max_finite));
  CHECK(F::Format::from_float(-0.0f) == 0x80);
  (void)nans;
  // Random floats near fp8's range: the search in double agrees bit for bit.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> scale(-24.0f, 18.0f);
  for (int i = 0; i < 200'000; ++i) {
    float f = std::ldexp(static_cast<float>(rng() % 100000) / 50000.0f, static_cast<int>(scale(rng)));
    if (rng() & 1) f = -f;
    REQUIRE_MESSAGE(F::Format::from_float(f) == nearest_code<F>(f), "value ", f);
  }
  // Exact ties between two codes round to the even one.
  for (int c = 0; c + 1 < max_finite; ++c) {
    double lo = F::Format::to_float(static_cast<uint8_t>(c)), hi = F::Format::to_float(static_cast<uint8_t>(c + 1));
    float mid = static_cast<float>((lo + hi) / 2);
    REQUIRE_MESSAGE(F::Format::from_float(mid) == ((c & 1) ? c + 1 : c), "tie between codes ", c, " and ", c + 1);
  }
}
}  // namespace

TEST_CASE("float8_e4m3: round trips, saturation at 448, nearest-even against a search") {
  check_format<float8_e4m3>(0x7e, 448.0f);
  CHECK(float8_e4m3(1.0f).bits == 0x38);
  CHECK(static_cast<float>(float8_e4m3::Format::to_float(0x01)) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(std::isnan(float8_e4m3::Format::to_float(0x7f)));
  CHECK(float8_e4m3(std::nanf("")).bits == 0x7f);
}

TEST_CASE("float8_e5m2: round trips, infinities, saturation at 57344, nearest-even against a search") {
  check_format<float8_e5m2>(0x7b, 57344.0f);
  CHECK(float8_e5m2(1.0f).bits == 0x3c);
  CHECK(std::isinf(float8_e5m2::Format::to_float(0x7c)));
  CHECK(static_cast<float>(float8_e5m2::Format::to_float(0x01)) == std::ldexp(1.0f, -16));
  CHECK(float8_e5m2::Format::is_nan(float8_e5m2(std::nanf("")).bits));
}

#if defined(DCOMM_TEST_CUDA_FP8)
TEST_CASE("fp8 conversions match cuda_fp8.h's (satfinite, round to nearest even) on random floats") {
  std::mt19937 rng(9);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    REQUIRE_MESSAGE(float8_e4m3::Format::from_float(f) == __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3), "bits ",
                    bits);
    REQUIRE_MESSAGE(float8_e5m2::Format::from_float(f) == __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2), "bits ",
                    bits);
  }
  for (int c = 0; c < 256; ++c) {
    auto code = static_cast<__nv_fp8_storage_t>(c);
    float e4 = float8_e4m3::Format::to_float(static_cast<uint8_t>(c));
    float e5 = float8_e5m2::Format::to_float(static_cast<uint8_t>(c));
    float r4 = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
    float r5 = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E5M2)));
    CHECK_MESSAGE((e4 == r4 || (std::isnan(e4) && std::isnan(r4))), "e4m3 code ", c);
    CHECK_MESSAGE((e5 == r5 || (std::isnan(e5) && std::isnan(r5))), "e5m2 code ", c);
  }
}
#endif
