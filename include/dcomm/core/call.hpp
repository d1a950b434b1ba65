// What a call is, in the few words every rank can check against its peers': the operation
// kinds, and the stamp each slot of a call carries (two words the transports move without
// reading them: transport/fifo.hpp).
//
// A stamp packs (kind, type, op, root, sequence number) into one word and the count into the
// other. A collective's stamp is the same on every rank that makes the same call: the
// sequence number counts this communicator's collectives. A point-to-point message's stamp
// is (send/recv, type, count) of that message. A receiver that finds a stamp other than its
// own call's fails the call and names both ("rank 1 called all_reduce(float32, sum, 1024)
// where rank 0 called all_reduce(int32, sum, 1024)").
#pragma once

#include <cstdint>
#include <string>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

enum class OpKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kPointToPoint, kBarrier };
inline constexpr int kNumOpKinds = 7;

inline const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kReduce: return "reduce";
    case OpKind::kPointToPoint: return "send/recv";
    case OpKind::kBarrier: return "barrier";
  }
  return "?";
}

inline bool has_reduction(OpKind k) {
  return k == OpKind::kAllReduce || k == OpKind::kReduceScatter || k == OpKind::kReduce;
}
inline bool has_root(OpKind k) { return k == OpKind::kBroadcast || k == OpKind::kReduce; }

// a: bits 0-3 kind + 1 (0: no stamp), 4-7 type, 8-11 op, 12-31 root, 32-63 sequence number;
// b: the count.
struct CallStamp {
  uint64_t a = 0, b = 0;
  friend bool operator==(const CallStamp&, const CallStamp&) = default;
};

inline CallStamp call_stamp(OpKind kind, DataType type, ReduceOp op, uint64_t count, int root, uint32_t seq) {
  const uint64_t r = static_cast<uint64_t>(has_root(kind) ? root : 0) & 0xfffffu;
  const uint64_t o = has_reduction(kind) ? static_cast<uint64_t>(op) : 0;
  CallStamp s;
  s.a = (static_cast<uint64_t>(kind) + 1) | (static_cast<uint64_t>(type) & 15u) << 4 | (o & 15u) << 8 | r << 12 |
        static_cast<uint64_t>(seq) << 32;
  s.b = count;
  return s;
}
// A point-to-point message: its tag (mod 2^20) where a collective's root goes.
inline CallStamp message_stamp(DataType type, uint64_t count, int tag = 0) {
  CallStamp s = call_stamp(OpKind::kPointToPoint, type, ReduceOp::kSum, count, 0, 0);
  s.a |= (static_cast<uint64_t>(static_cast<uint32_t>(tag)) & 0xfffffu) << 12;
  return s;
}

// "all_reduce(float32, sum, 1024)", "broadcast(int8, 16, root 2)", "send/recv(float32, 8)";
// with_seq adds "#seq" (the call's number on its communicator).
inline std::string describe(const CallStamp& s, bool with_seq = false) {
  const uint64_t kind = (s.a & 15u);
  if (kind == 0 || kind > static_cast<uint64_t>(kNumOpKinds)) return "nothing (an unstamped slot)";
  const auto k = static_cast<OpKind>(kind - 1);
  const auto type = static_cast<DataType>((s.a >> 4) & 15u);
  const auto op = static_cast<ReduceOp>((s.a >> 8) & 15u);
  std::string out = detail::cat(to_string(k), "(");
  if (k != OpKind::kBarrier) out += detail::cat(to_string(type), ", ");
  if (has_reduction(k)) out += detail::cat(to_string(op), ", ");
  if (k != OpKind::kBarrier) out += detail::cat(s.b);
  if (has_root(k)) out += detail::cat(", root ", (s.a >> 12) & 0xfffffu);
  if (k == OpKind::kPointToPoint && ((s.a >> 12) & 0xfffffu)) out += detail::cat(", tag ", (s.a >> 12) & 0xfffffu);
  out += ")";
  if (with_seq && k != OpKind::kPointToPoint) out += detail::cat(" #", s.a >> 32);
  return out;
}

DCOMM_NAMESPACE_END
