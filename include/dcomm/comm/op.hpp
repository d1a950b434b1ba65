// OpDesc: one call, as the communicator queues and runs it; and the argument checks every
// call goes through before anything is sent, so bad input fails on the caller's rank with a
// message that names the argument, and the communicator stays usable.
#pragma once

#include <vector>

#include "dcomm/algo/p2p_op.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

struct OpDesc {
  OpDesc(OpKind k, const void* s = nullptr, void* r = nullptr, size_t n = 0, DataType t = DataType::kUint8,
         ReduceOp o = ReduceOp::kSum, int root_rank = 0)
      : kind(k), send(s), recv(r), count(n), type(t), op(o), root(root_rank) {}
  OpKind kind;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // all_reduce, broadcast, reduce: whole buffer; reduce_scatter: per rank
                     // (recv); all_gather: per rank (send)
  DataType type = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  std::vector<P2POp> p2p;

  static OpDesc point_to_point(std::vector<P2POp> ops) {
    OpDesc d{OpKind::kPointToPoint};
    d.p2p = std::move(ops);
    return d;
  }
};

inline Status validate(const OpDesc& d, int rank, int size) {
  auto bad = [&](auto... why) { return invalid_argument(why...); };
  if (d.kind == OpKind::kPointToPoint) {
    for (const P2POp& op : d.p2p) {
      const char* what = op.kind == P2POp::Kind::kSend ? "send" : "recv";
      if (!is_valid(op.type)) return bad(what, ": unknown data type ", static_cast<int>(op.type));
      if (op.peer < 0 || op.peer >= size) return bad(what, ": peer ", op.peer, " is out of range for ", size, " ranks");
      if (!op.buffer && op.count > 0)
        return bad(what, " to/from rank ", op.peer, ": buffer is null but count is ", op.count);
    }
    return {};
  }
  if (d.kind == OpKind::kBarrier) return {};
  if (!is_valid(d.type)) return bad("unknown data type ", static_cast<int>(d.type));
  if (has_reduction(d.kind) && !is_valid(d.op)) return bad("unknown reduction op ", static_cast<int>(d.op));
  if ((d.kind == OpKind::kBroadcast || d.kind == OpKind::kReduce) && (d.root < 0 || d.root >= size))
    return bad("root ", d.root, " is out of range for ", size, " ranks");
  if (d.count == 0) return {};
  bool needs_send = d.kind != OpKind::kBroadcast || rank == d.root;
  bool needs_recv = d.kind != OpKind::kReduce || rank == d.root;
  if (needs_send && !d.send) return bad("send buffer is null but count is ", d.count);
  if (needs_recv && !d.recv) return bad("receive buffer is null but count is ", d.count);
  return {};
}

DCOMM_NAMESPACE_END
