#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <dcomm/reduce/host_reducer.hpp>

using namespace dcomm;

TEST_CASE("functors: arithmetic in the accumulator type") {
  CHECK(combine<int8_t, SumOp>(100, 100) == static_cast<int8_t>(-56));  // wraps modulo 2^8
  CHECK(combine<uint8_t, ProdOp>(16, 17) == static_cast<uint8_t>(272 % 256));
  CHECK(combine<int32_t, MinOp>(-3, 2) == -3);
  CHECK(combine<double, MaxOp>(-3.5, 2.25) == 2.25);
  // float16 sums in float: 2048 + 1 is not representable in half, but each input is and the
  // sum rounds once (to even).
  CHECK(static_cast<float>(combine<float16, SumOp>(float16(2048.0f), float16(1.0f))) == 2048.0f);
  CHECK(static_cast<float>(combine<float16, SumOp>(float16(2048.0f), float16(3.0f))) == 2052.0f);
  CHECK(static_cast<float>(combine<bfloat16, ProdOp>(bfloat16(3.0f), bfloat16(5.0f))) == 15.0f);
  CHECK(divide<int32_t>(7, 2) == 3);
  CHECK(divide<int32_t>(-7, 2) == -3);  // truncates toward zero, as C++ and NCCL
  CHECK(static_cast<float>(divide<float16>(float16(3.0f), 4)) == 0.75f);
}

TEST_CASE("host reducer: every type and op, over odd lengths, in place") {
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      auto type = static_cast<DataType>(t);
      auto op = static_cast<ReduceOp>(o);
      auto r = make_host_reducer(type, op, 4);
      REQUIRE(r.ok());
      CHECK(r->elem_bytes == size_of(type));
      CHECK((r->divide != nullptr) == (op == ReduceOp::kAvg));
      dispatch_type(type, [&]<class T>() {
        const size_t n = 37;
        std::vector<T> a(n), b(n), want(n);
        for (size_t i = 0; i < n; ++i) {
          a[i] = T(static_cast<float>(i % 7));
          b[i] = T(static_cast<float>(3 - static_cast<int>(i % 5)) + (std::is_unsigned_v<T> ? 5.0f : 0.0f));
        }
        for (size_t i = 0; i < n; ++i) {
          float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
          float v = op == ReduceOp::kProd  ? x * y
                    : op == ReduceOp::kMin ? std::min(x, y)
                    : op == ReduceOp::kMax ? std::max(x, y)
                                           : x + y;
          want[i] = T(v);
        }
        r->reduce(a.data(), a.data(), b.data(), n);  // in place into the first operand
        for (size_t i = 0; i < n; ++i)
          CHECK_MESSAGE(static_cast<float>(a[i]) == static_cast<float>(want[i]), to_string(type), " ", to_string(op),
                        " at ", i);
        return 0;
      });
    }
  }
  CHECK_FALSE(make_host_reducer(static_cast<DataType>(77), ReduceOp::kSum, 2).ok());
  CHECK(make_host_reducer(DataType::kFloat32, static_cast<ReduceOp>(77), 2).status().message().find("op") !=
        std::string::npos);
}

TEST_CASE("SIMD kernels of the 16-bit floats give the portable loops' bits") {
  std::mt19937 rng(3);
  for (DataType type : {DataType::kFloat16, DataType::kBfloat16}) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      auto op = static_cast<ReduceOp>(o);
      auto fast = *make_host_reducer(type, op, 3);
      auto ref = *make_host_reducer(type, op, 3, /*allow_simd=*/false);
      const size_t n = 1000 + 7;  // a tail past the last full vector
      std::vector<uint16_t> a(n), b(n), out_fast(n), out_ref(n);
      for (size_t i = 0; i < n; ++i) {
        // Random finite values of every magnitude, subnormals included (NaN payloads excluded).
        do a[i] = static_cast<uint16_t>(rng());
        while ((a[i] & 0x7c00) == 0x7c00 && type == DataType::kFloat16);
        do b[i] = static_cast<uint16_t>(rng());
        while ((b[i] & 0x7f80) == 0x7f80 && type == DataType::kBfloat16);
        if (type == DataType::kBfloat16) a[i] &= 0xff7f;  // keep bf16 exponents below all-ones
      }
      fast.reduce(out_fast.data(), a.data(), b.data(), n);
      ref.reduce(out_ref.data(), a.data(), b.data(), n);
      fast.finalize(out_fast.data(), n);
      ref.finalize(out_ref.data(), n);
      for (size_t i = 0; i < n; ++i)
        REQUIRE_MESSAGE(out_fast[i] == out_ref[i], to_string(type), " ", to_string(op), " at ", i, ": ", a[i], ", ",
                        b[i]);
    }
  }
}
