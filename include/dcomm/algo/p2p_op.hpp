// P2POp: one send or receive of a point-to-point batch (algo/p2p.hpp runs batches); apart, so
// that the call description (comm/op.hpp) and whatever reads it need no transport.
#pragma once

#include <cstddef>

#include "dcomm/core/config.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

struct Reducer;  // reduce/host_reducer.hpp

struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind;
  int peer;
  void* buffer;  // read for kSend, written for kRecv
  size_t count;
  DataType type;

  // `tag`: carried with the message and checked by the receive it meets (messages between a
  // pair in one direction still match in call order; a tag that differs is an error).
  static P2POp send(const void* buf, size_t count, DataType type, int peer, int tag = 0) {
    P2POp op{Kind::kSend, peer, const_cast<void*>(buf), count, type};
    op.tag = tag;
    return op;
  }
  static P2POp recv(void* buf, size_t count, DataType type, int peer, int tag = 0) {
    P2POp op{Kind::kRecv, peer, buf, count, type};
    op.tag = tag;
    return op;
  }
  size_t bytes() const { return count * size_of(type); }
  int tag = 0;

  // Internal (the schedules of algo/schedule.hpp): a receive that folds what arrives into the
  // buffer, slot by slot, instead of replacing it; op(peer's, mine) when peer_first.
  const Reducer* fold = nullptr;
  bool peer_first = false;
  // A step's message that may go as one rendezvous into the receiver's buffer (a wire that
  // lands it: zero copy); the schedule sets it alike at both ends (a swap that copies).
  bool by_rendezvous = false;
  // A message of an all-to-all, where every rank sends to and receives from every other in one
  // batch (algo/exchange.hpp sets it at both ends): PullRule's all_to_all_from (algo/p2p.hpp).
  bool all_to_all = false;
};

DCOMM_NAMESPACE_END
