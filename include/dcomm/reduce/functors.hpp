// Reduction functors. They are __host__ __device__ so the arithmetic the device kernels use
// is the arithmetic unit-tested on the CPU. Narrow types are widened for the operation
// (float16/bfloat16 to float; 8-bit integers follow C++ promotion and wrap modulo 2^8 on the
// way back, as unsigned arithmetic does), then narrowed once per element.
#pragma once

#include <cstdint>

#include "dcomm/core/config.hpp"
#include "dcomm/core/half.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

template <class T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<float16> {
  using type = float;
};
template <>
struct Accumulator<bfloat16> {
  using type = float;
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

struct SumOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    return static_cast<A>(a + b);
  }
};
struct ProdOp {
  template <class A>
  DCOMM_HOST_DEVICE A operator()(A a, A b) const {
    return static_cast<A>(a * b);
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

// The functor type behind each ReduceOp; kAvg reduces with a sum and divides at the end.
template <ReduceOp Op>
struct OpFunctor;
template <>
struct OpFunctor<ReduceOp::kSum> {
  using type = SumOp;
};
template <>
struct OpFunctor<ReduceOp::kAvg> {
  using type = SumOp;
};
template <>
struct OpFunctor<ReduceOp::kProd> {
  using type = ProdOp;
};
template <>
struct OpFunctor<ReduceOp::kMin> {
  using type = MinOp;
};
template <>
struct OpFunctor<ReduceOp::kMax> {
  using type = MaxOp;
};

DCOMM_NAMESPACE_END
