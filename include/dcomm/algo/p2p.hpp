// Point-to-point: a batch of sends and receives (NCCL's group of ncclSend/ncclRecv, torch's
// batch_isend_irecv) progressed together, a slot at a time, so two ranks that send large
// messages to each other do not deadlock the way two blocking MPI_Send calls can. Messages
// between one pair of ranks in one direction match in call order. Sends to self are matched
// with receives from self in the same batch.
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/algo/p2p_op.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

// ports[p] is the port to rank p (null for this rank). Each message takes at least one slot,
// so zero-byte messages keep their place in the order. A send whose buffer a receive of the
// same batch also writes (an in-place shift: send to the next rank, receive from the previous
// into the same buffer) is sent from a copy taken first, since the receive may land before
// the whole message has left.
//
// `message_stamps`: a batch the user made (send/recv): every message carries its own stamp
// (type and count), checked by the receive it meets. Otherwise the batch is a step of a
// collective and its slots carry the collective's stamp. `staging`, where given, holds those
// copies and is kept from call to call (its pages are touched, and registered with a wire that
// registers, once, not at every in-place call).
inline Status run_p2p(std::span<const P2POp> ops, int rank, const std::vector<PeerPort*>& ports, const Config& config,
                      bool message_stamps = false, std::vector<char>* staging = nullptr) {
  std::vector<CallStamp> own_stamps;
  if (message_stamps)
    for (const auto& op : ops) own_stamps.push_back(message_stamp(op.type, op.count, op.tag));
  const CallStamp* stamps = message_stamps ? own_stamps.data() : nullptr;
  std::vector<P2POp> own;
  std::vector<char> own_staging;
  if (!staging) staging = &own_staging;
  // Large slices go by reference (PeerPort::sends_by_reference), except a send that a receive
  // of this batch overwrites, which goes from a copy; the batch returns only once the wires
  // have read them (the end of this function), so a collective's next step, or the caller, may
  // write that memory at once.
  std::vector<bool> by_reference(ops.size(), true);
  bool any_by_reference = false;
  // A user's message (or a step's that P2POp::lands) from DCOMM_RENDEZVOUS_BYTES over a link
  // that lands payloads goes as one rendezvous into the receiver's buffer (PeerPort::lands:
  // both ends decide alike).
  std::vector<bool> rendezvous(ops.size(), false);
  for (size_t i = 0; i < ops.size(); ++i)
    rendezvous[i] = (message_stamps || ops[i].lands) && ops[i].peer != rank && !ops[i].fold &&
                    ports[static_cast<size_t>(ops[i].peer)]->lands(ops[i].bytes());
  // A failed call leaves no receive landing in the caller's buffers.
  struct Withdraw {
    std::span<const P2POp> ops;
    const std::vector<bool>& rendezvous;
    const std::vector<PeerPort*>& ports;
    ~Withdraw() {
      for (size_t i = 0; i < ops.size(); ++i)
        if (rendezvous[i] && ops[i].kind == P2POp::Kind::kRecv)
          ports[static_cast<size_t>(ops[i].peer)]->withdraw_landing();
    }
  } withdraw{ops, rendezvous, ports};
  size_t staged = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != P2POp::Kind::kSend || ops[i].peer == rank) continue;
    bool clobbered = false;
    for (const auto& r : ops)
      clobbered |= r.kind == P2POp::Kind::kRecv && r.peer != rank &&
                   detail::ranges_overlap(ops[i].buffer, ops[i].bytes(), r.buffer, r.bytes());
    if (!clobbered) continue;
    by_reference[i] = false;
    if (own.empty()) own.assign(ops.begin(), ops.end());
    own[i].buffer = nullptr;  // its copy's place, once `staging` has its size
    staged += ops[i].bytes();
  }
  if (staging->size() < staged) staging->resize(staged);
  for (size_t i = 0, at = 0; i < own.size(); ++i) {
    if (by_reference[i]) continue;
    if (ops[i].bytes()) std::memcpy(staging->data() + at, ops[i].buffer, ops[i].bytes());
    own[i].buffer = staging->data() + at;
    at += ops[i].bytes();
  }
  if (!own.empty()) ops = own;

  // Self messages: the k-th send to self feeds the k-th receive from self.
  std::vector<const P2POp*> self_sends, self_recvs;
  for (const auto& op : ops)
    if (op.peer == rank) (op.kind == P2POp::Kind::kSend ? self_sends : self_recvs).push_back(&op);
  if (self_sends.size() != self_recvs.size())
    return invalid_argument(self_sends.size(), " send(s) to self but ", self_recvs.size(),
                            " receive(s) from self in one batch; they must pair up");
  for (size_t i = 0; i < self_sends.size(); ++i) {
    if (self_sends[i]->bytes() != self_recvs[i]->bytes())
      return invalid_argument("send to self of ", self_sends[i]->bytes(), " bytes met a receive from self of ",
                              self_recvs[i]->bytes(), " bytes");
    if (self_sends[i]->bytes()) std::memmove(self_recvs[i]->buffer, self_sends[i]->buffer, self_sends[i]->bytes());
  }

  struct Progress {
    size_t done_bytes = 0;
    bool finished = false;
  };
  std::vector<Progress> state(ops.size());
  size_t remaining = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].peer == rank) state[i].finished = true;
    else ++remaining;
  }
  int spin = config.spin_iterations;  // the least of the peers' (a proxied peer's is short)
  for (const P2POp& op : ops)
    if (op.peer != rank) spin = std::min(spin, ports[static_cast<size_t>(op.peer)]->spin_iterations());
  Backoff backoff(spin);
  std::optional<Deadline> deadline, diagnosis;
  while (remaining > 0) {
    bool progress = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (state[i].finished) continue;
      const P2POp& op = ops[i];
      bool blocked = false;  // an earlier message on the same pair and direction goes first
      for (size_t j = 0; j < i && !blocked; ++j)
        blocked = !state[j].finished && ops[j].peer == op.peer && ops[j].kind == op.kind;
      if (blocked) continue;
      PeerPort* port = ports[static_cast<size_t>(op.peer)];
      const size_t total = op.bytes();
      for (;;) {
        size_t n = std::min(port->slot_bytes(), total - state[i].done_bytes);
        char* base = static_cast<char*>(op.buffer) + state[i].done_bytes;
        if (rendezvous[i]) {
          n = total;
          if (op.kind == P2POp::Kind::kSend) {
            if (!port->try_post_rendezvous(base, n, stamps ? &stamps[i] : nullptr)) break;
            any_by_reference = true;
          } else {
            Status bad;
            if (!port->try_receive_landed(base, n, &bad, stamps ? &stamps[i] : nullptr)) break;
            if (!bad.ok()) return bad;
          }
        } else if (op.kind == P2POp::Kind::kSend && by_reference[i] && port->sends_by_reference(n)) {
          if (!port->try_post_by_reference(base, n, stamps ? &stamps[i] : nullptr)) break;
          any_by_reference = true;
        } else if (op.kind == P2POp::Kind::kSend) {
          char* slot = nullptr;
          if (!port->try_acquire_send(n, &slot)) break;
          if (n) std::memcpy(slot, base, n);
          port->commit_send(n, stamps ? &stamps[i] : nullptr);
        } else {
          const char* slot = nullptr;
          Status bad;
          if (!port->try_acquire_recv(n, &slot, &bad, stamps ? &stamps[i] : nullptr)) break;
          if (!bad.ok()) return bad;
          if (n && op.fold) {
            const size_t elems = n / op.fold->elem_bytes;
            if (op.peer_first) op.fold->reduce(base, slot, base, elems);
            else op.fold->reduce(base, base, slot, elems);
          } else if (n) {
            std::memcpy(base, slot, n);
          }
          port->release_recv();
        }
        progress = true;
        state[i].done_bytes += n;
        if (state[i].done_bytes == total) {
          state[i].finished = true;
          --remaining;
          break;
        }
      }
    }
    if (progress) {
      backoff.reset();
      deadline.reset();
      continue;
    }
    for (size_t i = 0; i < ops.size(); ++i)
      if (!state[i].finished) ports[static_cast<size_t>(ops[i].peer)]->progress();
    if (!backoff.pause()) continue;
    for (size_t i = 0; i < ops.size(); ++i)
      if (!state[i].finished)
        DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(ops[i].peer)]->check_alive(ops[i].kind == P2POp::Kind::kSend));
    if (!deadline) {
      deadline.emplace(config.timeout);
      diagnosis.emplace(stall_threshold(config));
    } else if (deadline->expired()) {
      for (size_t i = 0; i < ops.size(); ++i)
        if (!state[i].finished)
          return ports[static_cast<size_t>(ops[i].peer)]->timeout_error(ops[i].kind == P2POp::Kind::kSend);
    } else if (!message_stamps && diagnosis->expired()) {
      // A step of a collective that stalls: are the peers in this call at all?
      for (size_t i = 0; i < ops.size(); ++i)
        if (!state[i].finished)
          DCOMM_RETURN_IF_ERROR(
              ports[static_cast<size_t>(ops[i].peer)]->diagnose_stall(ops[i].kind == P2POp::Kind::kSend));
      diagnosis.emplace(config.timeout);
    }
  }
  // The wires have read what went by reference, before the caller may change it.
  for (size_t i = 0; any_by_reference && i < ops.size(); ++i)
    if ((by_reference[i] || rendezvous[i]) && ops[i].kind == P2POp::Kind::kSend && ops[i].peer != rank)
      DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(ops[i].peer)]->wait_sent());
  return {};
}

DCOMM_NAMESPACE_END
