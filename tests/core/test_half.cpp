#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include <dcomm/core/half.hpp>

using dcomm::bfloat16;
using dcomm::float16;

TEST_CASE("float16: every half value survives the round trip through float") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = float16::to_float(static_cast<uint16_t>(b));
    uint16_t back = float16::from_float(f);
    bool is_nan = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu);
    if (is_nan) CHECK(std::isnan(f));
    else CHECK_MESSAGE(back == b, "bits ", b);
  }
}

TEST_CASE("float16: known values and rounding edges") {
  CHECK(float16(1.0f).bits == 0x3c00);
  CHECK(float16(-2.0f).bits == 0xc000);
  CHECK(float16(65504.0f).bits == 0x7bff);
  CHECK(float16(65520.0f).bits == 0x7c00);                      // halfway to 65536: ties to even, overflows to inf
  CHECK(float16(std::ldexp(1.0f, -24)).bits == 0x0001);         // smallest subnormal
  CHECK(float16(std::ldexp(1.0f, -25)).bits == 0x0000);         // half of it: ties to even (zero)
  CHECK(float16(std::ldexp(3.0f, -26)).bits == 0x0001);         // 0.75 units rounds up
  CHECK(float16(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);  // tie, even stays
  CHECK(float16(1.0f + std::ldexp(3.0f, -11)).bits == 0x3c02);  // tie, odd rounds up
}

#if defined(__FLT16_MAX__)
TEST_CASE("float16: conversion from float matches the compiler's _Float16 on random inputs") {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    REQUIRE_MESSAGE(float16::from_float(f) == want, "float bits ", bits);
  }
}
#endif

TEST_CASE("bfloat16: rounding to nearest even against a reference in double") {
  std::mt19937 rng(11);
  for (int i = 0; i < 1'000'000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (!std::isfinite(f)) continue;
    uint16_t lo = static_cast<uint16_t>(bits >> 16);
    uint16_t hi = static_cast<uint16_t>(lo + 1);
    double dlo = bfloat16::to_float(lo), dhi = bfloat16::to_float(hi);
    if (std::isinf(dhi)) dhi = std::copysign(std::ldexp(1.0, 128), dhi);  // the value infinity stands for
    double d = f;
    uint16_t want = std::fabs(d - dlo) < std::fabs(dhi - d)   ? lo
                    : std::fabs(d - dlo) > std::fabs(dhi - d) ? hi
                                                              : (lo & 1 ? hi : lo);
    REQUIRE_MESSAGE(bfloat16::from_float(f) == want, "float bits ", bits);
  }
  CHECK(bfloat16(1.0f).bits == 0x3f80);
  CHECK(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
}
