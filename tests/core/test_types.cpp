#include <doctest/doctest.h>

#include <dcomm/core/bytes.hpp>
#include <dcomm/core/types.hpp>

using namespace dcomm;

TEST_CASE("data types: sizes, names and the typed mapping") {
  CHECK(size_of(DataType::kInt8) == 1);
  CHECK(size_of(DataType::kBfloat16) == 2);
  CHECK(size_of(DataType::kFloat32) == 4);
  CHECK(size_of(DataType::kUint64) == 8);
  CHECK(data_type_of<float> == DataType::kFloat32);
  CHECK(data_type_of<const double> == DataType::kFloat64);
  CHECK(data_type_of<float16> == DataType::kFloat16);
  CHECK(data_type_of<uint8_t> == DataType::kUint8);
  for (int t = 0; t < kNumDataTypes; ++t) {
    auto type = static_cast<DataType>(t);
    CHECK(parse_data_type(to_string(type)) == type);
  }
  CHECK(parse_data_type("float") == DataType::kFloat32);
  CHECK(parse_data_type("half") == DataType::kFloat16);
  CHECK_FALSE(parse_data_type("float128").has_value());
  CHECK_FALSE(is_valid(static_cast<DataType>(42)));
  for (int o = 0; o < kNumReduceOps; ++o)
    CHECK(parse_reduce_op(to_string(static_cast<ReduceOp>(o))) == static_cast<ReduceOp>(o));
  CHECK_FALSE(is_valid(static_cast<ReduceOp>(9)));
}

TEST_CASE("ranges_overlap: a shared byte, not a shared edge; empty ranges share none") {
  char b[64];
  CHECK(detail::ranges_overlap(b, 16, b + 15, 8));
  CHECK(detail::ranges_overlap(b + 15, 8, b, 16));
  CHECK(detail::ranges_overlap(b, 64, b + 8, 8));  // one inside the other
  CHECK_FALSE(detail::ranges_overlap(b, 16, b + 16, 8));
  CHECK_FALSE(detail::ranges_overlap(b + 16, 8, b, 16));
  CHECK_FALSE(detail::ranges_overlap(b, 0, b, 16));
  CHECK_FALSE(detail::ranges_overlap(b, 16, b + 4, 0));
}
