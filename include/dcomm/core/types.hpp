// DataType and ReduceOp: the runtime description of what a collective moves and computes.
// Typed spans deduce the DataType through data_type_of<T>; the raw API takes it explicitly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

#include "dcomm/core/config.hpp"
#include "dcomm/core/float8.hpp"
#include "dcomm/core/half.hpp"

DCOMM_NAMESPACE_BEGIN

enum class DataType : uint8_t {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kFloat8E4M3,
  kFloat8E5M2,
};
inline constexpr int kNumDataTypes = 12;

// kAvg divides the sum by the number of ranks once, at the end (integers truncate, as NCCL).
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };
inline constexpr int kNumReduceOps = 5;

inline bool is_valid(DataType t) { return static_cast<int>(t) < kNumDataTypes; }
inline bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

inline size_t size_of(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

inline const char* to_string(DataType t) {
  switch (t) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat8E4M3: return "float8_e4m3";
    case DataType::kFloat8E5M2: return "float8_e5m2";
  }
  return "invalid-type";
}

inline const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid-op";
}

// Accepts dcomm's names and nccl-tests' short ones ("float", "half", "bf16", "int", ...).
inline std::optional<DataType> parse_data_type(std::string_view s) {
  struct Name {
    std::string_view name;
    DataType type;
  };
  static constexpr Name kNames[] = {
      {"int8", DataType::kInt8},
      {"char", DataType::kInt8},
      {"uint8", DataType::kUint8},
      {"int32", DataType::kInt32},
      {"int", DataType::kInt32},
      {"uint32", DataType::kUint32},
      {"int64", DataType::kInt64},
      {"uint64", DataType::kUint64},
      {"float16", DataType::kFloat16},
      {"half", DataType::kFloat16},
      {"bfloat16", DataType::kBfloat16},
      {"bf16", DataType::kBfloat16},
      {"float32", DataType::kFloat32},
      {"float", DataType::kFloat32},
      {"float64", DataType::kFloat64},
      {"double", DataType::kFloat64},
      {"float8_e4m3", DataType::kFloat8E4M3},
      {"f8e4m3", DataType::kFloat8E4M3},
      {"float8_e5m2", DataType::kFloat8E5M2},
      {"f8e5m2", DataType::kFloat8E5M2},
  };
  for (const auto& n : kNames)
    if (n.name == s) return n.type;
  return std::nullopt;
}

inline std::optional<ReduceOp> parse_reduce_op(std::string_view s) {
  for (int i = 0; i < kNumReduceOps; ++i)
    if (s == to_string(static_cast<ReduceOp>(i))) return static_cast<ReduceOp>(i);
  return std::nullopt;
}

template <class T>
struct DataTypeOf {
  static_assert(sizeof(T) == 0,
                "dcomm: no DataType for this element type; use int8/uint8/int32/uint32/int64/uint64, "
                "float16, bfloat16, float8_e4m3, float8_e5m2, float or double");
};
#define DCOMM_DATA_TYPE_OF(T, V)                   \
  template <>                                      \
  struct DataTypeOf<T> {                           \
    static constexpr DataType value = DataType::V; \
  }
DCOMM_DATA_TYPE_OF(int8_t, kInt8);
DCOMM_DATA_TYPE_OF(uint8_t, kUint8);
DCOMM_DATA_TYPE_OF(int32_t, kInt32);
DCOMM_DATA_TYPE_OF(uint32_t, kUint32);
DCOMM_DATA_TYPE_OF(int64_t, kInt64);
DCOMM_DATA_TYPE_OF(uint64_t, kUint64);
DCOMM_DATA_TYPE_OF(float16, kFloat16);
DCOMM_DATA_TYPE_OF(bfloat16, kBfloat16);
DCOMM_DATA_TYPE_OF(float, kFloat32);
DCOMM_DATA_TYPE_OF(double, kFloat64);
DCOMM_DATA_TYPE_OF(float8_e4m3, kFloat8E4M3);
DCOMM_DATA_TYPE_OF(float8_e5m2, kFloat8E5M2);
#undef DCOMM_DATA_TYPE_OF

template <class T>
inline constexpr DataType data_type_of = DataTypeOf<std::remove_cv_t<T>>::value;

DCOMM_NAMESPACE_END
