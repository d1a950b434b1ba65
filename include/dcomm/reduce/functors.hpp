// Reduction functors. They are __host__ __device__ so the arithmetic the device kernels use
// is the arithmetic unit-tested on the CPU. Narrow types are widened for the operation
// (float16, bfloat16 and the fp8 types to float; 8-bit integers follow C++ promotion and wrap modulo 2^8 on the
// way back, as unsigned arithmetic does), then narrowed once per element.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dcomm/core/config.hpp"
#include "dcomm/core/half.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

// The type the arithmetic runs in: float for the 16- and 8-bit floats, T for the rest.
template <class T>
struct Accumulator {
  using type = std::conditional_t<std::is_same_v<T, float16> || std::is_same_v<T, bfloat16> ||
                                      std::is_same_v<T, float8_e4m3> || std::is_same_v<T, float8_e5m2>,
                                  float, T>;
};
template <class T>
using acc_t = typename Accumulator<T>::type;

template <class T>
DCOMM_HOST_DEVICE inline acc_t<T> widen(T v) {
  return static_cast<acc_t<T>>(v);
}
template <class T>
DCOMM_HOST_DEVICE inline T narrow(acc_t<T> v) {
  return static_cast<T>(v);
}

// Integers wrap as two's complement (as NCCL's and MPI's integer sums and products do): the
// arithmetic is done unsigned, at least as wide as unsigned int, where an overflow would be
// undefined behaviour in the signed type (UBSan found the int32 sums of the tests doing so).
template <class A>
using wrapping_t = std::conditional_t<(sizeof(A) < sizeof(unsigned)), unsigned, std::make_unsigned_t<A>>;

struct SumOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wrapping_t<A>>(a) + static_cast<wrapping_t<A>>(b));
    else return static_cast<A>(a + b);
  }
};
struct ProdOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<wrapping_t<A>>(a) * static_cast<wrapping_t<A>>(b));
    else return static_cast<A>(a * b);
  }
};
struct MinOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    return a < b ? b : a;
  }
};

// Combines two elements of T with Op in T's accumulator type.
template <class T, class Op>
DCOMM_HOST_DEVICE inline T combine(T a, T b) {
  return narrow<T>(Op{}(widen(a), widen(b)));
}

// The post-operation of kAvg: divide the reduced value by the number of ranks.
template <class T>
DCOMM_HOST_DEVICE inline T divide(T v, int ranks) {
  return narrow<T>(static_cast<acc_t<T>>(widen(v) / static_cast<acc_t<T>>(ranks)));
}

// Calls f.template operator()<Functor>() with the functor of `op` (kAvg: SumOp; the caller
// divides); the one op switch of the device path, as dispatch_type is the one type switch.
template <class F>
DCOMM_HOST_DEVICE decltype(auto) dispatch_op(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::kProd: return f.template operator()<ProdOp>();
    case ReduceOp::kMin: return f.template operator()<MinOp>();
    case ReduceOp::kMax: return f.template operator()<MaxOp>();
    case ReduceOp::kSum:
    case ReduceOp::kAvg: break;
  }
  return f.template operator()<SumOp>();
}

DCOMM_NAMESPACE_END
