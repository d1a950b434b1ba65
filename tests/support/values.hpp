// Verifiable inputs and their exact reductions (nccl-tests' verifiable/ idea), shared by the
// tests and dcomm-bench's -c check. Inputs are small integers, so every floating-point sum
// and product is exact in any order; integer
// results wrap the same way whatever the order.
// The reference is computed in 64-bit integers, independently of dcomm's reduction code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <dcomm/core/half.hpp>
#include <dcomm/core/types.hpp>

namespace dcomm_test {

using namespace dcomm;

inline int64_t input_value(DataType t, ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) return ((static_cast<size_t>(rank) + i) % 3 == 0) ? 2 : 1;
  // fp8 holds few integers exactly (e5m2: up to 8), so its inputs are -1, 0 and 1, and 0 past
  // rank 7 (sums stay within 8 on any number of ranks).
  bool fp8 = t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2;
  int64_t base = static_cast<int64_t>((static_cast<size_t>(rank) * 7 + i * 3) % (fp8 ? 3 : 11));
  if (fp8) return rank < 8 ? base - 1 : 0;
  bool is_unsigned = t == DataType::kUint8 || t == DataType::kUint32 || t == DataType::kUint64;
  return is_unsigned ? base : base - 5;
}

template <class T>
T from_int(int64_t v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(v);  // wraps: two's complement
  else return T(static_cast<float>(v));
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Equal bits, or both NaN: for results of arbitrary bit patterns, where a NaN's payload
// depends on operand order (the compiler may swap a commutative add) or on the hardware's
// conversions.
template <class T>
bool same_value(const T& a, const T& b) {
  if (same_bits(a, b)) return true;
  if constexpr (std::is_integral_v<T>) return false;
  else
    return std::isnan(static_cast<double>(static_cast<float>(a))) &&
           std::isnan(static_cast<double>(static_cast<float>(b)));
}

// The reduction of input_value over all ranks at index i, as T.
template <class T>
T expected_reduction(DataType t, ReduceOp op, int size, size_t i) {
  int64_t acc = input_value(t, op, 0, i);
  for (int r = 1; r < size; ++r) {
    int64_t v = input_value(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op != ReduceOp::kAvg) return from_int<T>(acc);
  if constexpr (std::is_integral_v<T>) {
    using Wide = std::conditional_t<(sizeof(T) < 4), int, T>;  // C++ promotion, as the library's arithmetic
    return static_cast<T>(static_cast<Wide>(static_cast<T>(acc)) / static_cast<Wide>(size));
  } else if constexpr (std::is_same_v<T, double>) {
    return static_cast<double>(acc) / size;
  } else {
    return T(static_cast<float>(acc) / static_cast<float>(size));
  }
}

}  // namespace dcomm_test
