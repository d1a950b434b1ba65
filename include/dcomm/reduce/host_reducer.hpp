// The host executor of reductions: one runtime dispatch on (DataType, ReduceOp) picks a
// function pointer to a loop instantiated for that pair, so the algorithms move untyped bytes
// and compile once.
#pragma once

#include <array>
#include <cstddef>
#include <cstring>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/reduce/functors.hpp"
#include "dcomm/reduce/host_simd.hpp"

DCOMM_NAMESPACE_BEGIN

// dst[i] = a[i] op b[i]; dst may be a or b (same index), never a shifted overlap.
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count);
// buf[i] = buf[i] / ranks, the final step of kAvg.
using DivideFn = void (*)(void* buf, size_t count, int ranks);

struct Reducer {
  ReduceFn reduce = nullptr;
  DivideFn divide = nullptr;  // null unless the op is kAvg
  size_t elem_bytes = 0;
  int ranks = 1;

  void finalize(void* buf, size_t count) const {
    if (divide && ranks > 1) divide(buf, count, ranks);
  }
};

namespace detail {
template <class T, class Op>
void reduce_loop(void* dst, const void* a, const void* b, size_t count) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = combine<T, Op>(x[i], y[i]);
}
template <class T>
void divide_loop(void* buf, size_t count, int ranks) {
  T* d = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) d[i] = divide<T>(d[i], ranks);
}
// The loops for T: the portable ones (which compilers vectorize for the plain types), or the
// AVX2 ones for the 16-bit floats where the CPU has them. `simd` selects.
template <class T, bool kSimd>
struct Loops {
  template <class Op>
  static constexpr ReduceFn reduce = reduce_loop<T, Op>;
  static constexpr DivideFn divide = divide_loop<T>;
};
#if DCOMM_HOST_SIMD
template <class T>
requires std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>
struct Loops<T, true> {
  template <class Op>
  static constexpr ReduceFn reduce = simd::reduce16<simd::LanesOf<T>, Op>;
  static constexpr DivideFn divide = simd::divide16<simd::LanesOf<T>>;
};
#endif

template <class T, bool kSimd>
Reducer make_reducer_with(ReduceOp op, int ranks) {
  using L = Loops<T, kSimd>;
  Reducer r;
  r.elem_bytes = sizeof(T);
  r.ranks = ranks;
  r.reduce = dispatch_op(op, [&]<class Op>() { return L::template reduce<Op>; });
  if (op == ReduceOp::kAvg) r.divide = L::divide;
  return r;
}

template <class T>
Reducer make_reducer_for(ReduceOp op, int ranks, bool allow_simd) {
#if DCOMM_HOST_SIMD
  if (allow_simd && simd::has_avx2_f16c()) return make_reducer_with<T, true>(op, ranks);
#endif
  (void)allow_simd;
  return make_reducer_with<T, false>(op, ranks);
}
}  // namespace detail

// Calls f.template operator()<T>() with the C++ type of `type`; the one type switch.
template <class F>
decltype(auto) dispatch_type(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: return f.template operator()<int8_t>();
    case DataType::kUint8: return f.template operator()<uint8_t>();
    case DataType::kInt32: return f.template operator()<int32_t>();
    case DataType::kUint32: return f.template operator()<uint32_t>();
    case DataType::kInt64: return f.template operator()<int64_t>();
    case DataType::kUint64: return f.template operator()<uint64_t>();
    case DataType::kFloat16: return f.template operator()<float16>();
    case DataType::kBfloat16: return f.template operator()<bfloat16>();
    case DataType::kFloat32: return f.template operator()<float>();
    case DataType::kFloat64: return f.template operator()<double>();
    case DataType::kFloat8E4M3: return f.template operator()<float8_e4m3>();
    case DataType::kFloat8E5M2: return f.template operator()<float8_e5m2>();
  }
  return f.template operator()<uint8_t>();  // unreachable: callers validate the type first
}

// dst[i] = src[i] * factor over `count` elements (NCCL's PreMulSum scaling; in place when dst ==
// src), `factor` one element of `type`: the arithmetic of the device's scale_on_device.
inline Status scale_on_host(void* dst, const void* src, size_t count, DataType type, const void* factor) {
  if (!is_valid(type)) return invalid_argument("scale_on_host: unknown data type ", static_cast<int>(type));
  dispatch_type(type, [&]<class T>() {
    T f;
    std::memcpy(&f, factor, sizeof(T));
    const T* in = static_cast<const T*>(src);
    T* out = static_cast<T*>(dst);
    for (size_t i = 0; i < count; ++i) out[i] = combine<T, ProdOp>(in[i], f);
    return 0;
  });
  return {};
}

// allow_simd = false gives the portable loops (the reference the SIMD ones are tested against).
// Every collective call makes one, so they are all made once, on the first call, and a call's
// is a lookup in that table (the switch through dispatch_type cost a store-forwarding stall
// in every call).
inline Result<Reducer> make_host_reducer(DataType type, ReduceOp op, int ranks, bool allow_simd = true) {
  if (!is_valid(type)) return invalid_argument("unknown data type ", static_cast<int>(type));
  if (!is_valid(op)) return invalid_argument("unknown reduction op ", static_cast<int>(op));
  using Table = std::array<std::array<std::array<Reducer, kNumReduceOps>, kNumDataTypes>, 2>;
  static const Table table = [] {
    Table t{};
    for (int simd = 0; simd < 2; ++simd)
      for (int ty = 0; ty < kNumDataTypes; ++ty)
        for (int o = 0; o < kNumReduceOps; ++o)
          t[simd][ty][o] = dispatch_type(static_cast<DataType>(ty), [&]<class T>() {
            return detail::make_reducer_for<T>(static_cast<ReduceOp>(o), 1, simd != 0);
          });
    return t;
  }();
  Reducer r = table[allow_simd ? 1 : 0][static_cast<size_t>(type)][static_cast<size_t>(op)];
  r.ranks = ranks;
  return r;
}

DCOMM_NAMESPACE_END
