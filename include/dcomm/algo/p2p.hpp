// Point-to-point: a batch of sends and receives (NCCL's group of ncclSend/ncclRecv, torch's
// batch_isend_irecv) progressed together, a slot at a time, so two ranks that send large
// messages to each other do not deadlock the way two blocking MPI_Send calls can. Messages
// between one pair of ranks in one direction match in call order. Sends to self are matched
// with receives from self in the same batch.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/sanitizer.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/algo/p2p_op.hpp"
#include "dcomm/algo/single_copy.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/reduce/host_reducer.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {

// What run_p2p keeps of each message of a batch, in one array (a small batch's cost is mostly
// its allocations): how it goes (P2PRoute's fields) and how far it has got.
struct MessageState {
  CallStamp stamp;  // its own (a user's batch)
  size_t done = 0;
  int before = -1;  // the batch's previous message on the same pair and direction, which goes first
  bool finished = false, rendezvous = false, by_reference = true, pulled = false;
};

// Each message's state in a batch; a small batch's in place (its cost was mostly allocations).
class BatchStates {
 public:
  explicit BatchStates(size_t n)
      : many_(n > kFew ? n : 0), all_(many_.empty() ? std::span(few_).first(n) : std::span<MessageState>(many_)) {}
  BatchStates(const BatchStates&) = delete;
  BatchStates& operator=(const BatchStates&) = delete;
  std::span<MessageState> all() const { return all_; }

 private:
  static constexpr size_t kFew = 16;
  std::array<MessageState, kFew> few_{};
  std::vector<MessageState> many_;
  std::span<MessageState> all_;
};

// A send whose buffer a receive of the same batch also writes (an in-place shift: send to the
// next rank, receive from the previous into the same buffer) is sent from a copy taken first
// into `staging`, since the receive may land before the whole message has left. Returns the
// batch to run (`own`, the copies in place of those buffers, or `ops` when nothing is
// clobbered); state[i].by_reference becomes false for each copied send. A receive from this rank
// itself counts too: copy_self_messages writes it before anything is sent (an in-place
// all_to_all_v whose own block moves over a block still to be sent).
inline std::span<const P2POp> stage_clobbered_sends(std::span<const P2POp> ops, int rank, std::vector<char>& staging,
                                                    std::vector<P2POp>& own, std::span<MessageState> state) {
  // The span of every receive's bytes: a send outside it (any out-of-place batch) needs no look
  // at each receive, so a wide batch costs one pass, not one per send.
  const char *lo = nullptr, *hi = nullptr;
  for (const auto& r : ops) {
    if (r.kind != P2POp::Kind::kRecv || !r.bytes()) continue;
    const char* at = static_cast<const char*>(r.buffer);
    lo = lo ? std::min(lo, at) : at;
    hi = std::max(hi, at + r.bytes());
  }
  size_t staged = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != P2POp::Kind::kSend || ops[i].peer == rank) continue;
    if (!lo || !ranges_overlap(ops[i].buffer, ops[i].bytes(), lo, static_cast<size_t>(hi - lo))) continue;
    bool clobbered = false;
    for (const auto& r : ops)
      clobbered |= r.kind == P2POp::Kind::kRecv && ranges_overlap(ops[i].buffer, ops[i].bytes(), r.buffer, r.bytes());
    if (!clobbered) continue;
    state[i].by_reference = false;
    if (own.empty()) own.assign(ops.begin(), ops.end());
    own[i].buffer = nullptr;  // its copy's place, once `staging` has its size
    staged += ops[i].bytes();
  }
  if (staging.size() < staged) staging.resize(staged);
  for (size_t i = 0, at = 0; i < own.size(); ++i) {
    if (state[i].by_reference) continue;
    if (ops[i].bytes()) std::memcpy(staging.data() + at, ops[i].buffer, ops[i].bytes());
    own[i].buffer = staging.data() + at;
    at += ops[i].bytes();
  }
  return own.empty() ? ops : std::span<const P2POp>(own);
}

// Self messages: the k-th send to self feeds the k-th receive from self. A copy of at least
// `stream_bytes` apart from its source streams past the cache (DCOMM_STREAM_BYTES: a large
// all_to_all's own block, which nothing reads back soon).
inline Status copy_self_messages(std::span<const P2POp> ops, int rank, size_t stream_bytes) {
  auto self = [&](size_t i, P2POp::Kind kind) { return ops[i].peer == rank && ops[i].kind == kind; };
  size_t sends = 0, recvs = 0;
  for (size_t i = 0; i < ops.size(); ++i) sends += self(i, P2POp::Kind::kSend), recvs += self(i, P2POp::Kind::kRecv);
  if (sends != recvs)
    return invalid_argument(sends, " send(s) to self but ", recvs,
                            " receive(s) from self in one batch; they must pair up");
  for (size_t k = 0, s = 0, r = 0; k < sends; ++k, ++s, ++r) {
    while (!self(s, P2POp::Kind::kSend)) ++s;
    while (!self(r, P2POp::Kind::kRecv)) ++r;
    if (ops[s].bytes() != ops[r].bytes())
      return invalid_argument("send to self of ", ops[s].bytes(), " bytes met a receive from self of ", ops[r].bytes(),
                              " bytes");
    const size_t n = ops[s].bytes();
    if (n >= stream_bytes && !ranges_overlap(ops[r].buffer, n, ops[s].buffer, n)) {
      copy_bytes(ops[r].buffer, ops[s].buffer, n, /*stream=*/true);
      stream_fence();
    } else if (n) {
      std::memmove(ops[r].buffer, ops[s].buffer, n);
    }
  }
  return {};
}

// A round of run_p2p in which nothing moved: progresses the ports still in use; after the
// backoff's spins, checks that their peers live, and at the clock's ticks fails the wait at the
// deadline or diagnoses the stall.
inline Status wait_on_batch(std::span<const P2POp> ops, std::span<const MessageState> state,
                            const std::vector<PeerPort*>& ports, Backoff& backoff, WaitClock& clock,
                            bool message_stamps) {
  auto port_of = [&](const P2POp& op) { return ports[static_cast<size_t>(op.peer)]; };
  for (size_t i = 0; i < ops.size(); ++i)
    if (!state[i].finished) port_of(ops[i])->progress();
  if (!backoff.pause()) return {};
  for (size_t i = 0; i < ops.size(); ++i)
    if (!state[i].finished) DCOMM_RETURN_IF_ERROR(port_of(ops[i])->check_alive(ops[i].kind == P2POp::Kind::kSend));
  const WaitClock::Tick t = clock.tick();
  for (size_t i = 0; t != WaitClock::Tick::kWait && i < ops.size(); ++i) {
    if (state[i].finished) continue;
    const bool sending = ops[i].kind == P2POp::Kind::kSend;
    if (t == WaitClock::Tick::kTimedOut) return port_of(ops[i])->timeout_error(sending);
    // A step of a collective that stalls: are the peers in this call at all? (Messages
    // with stamps of their own are sends and receives, where a peer may simply be late.)
    if (!message_stamps) DCOMM_RETURN_IF_ERROR(port_of(ops[i])->diagnose_stall(sending));
  }
  return {};
}

// How one message goes: `rendezvous` (whole, into the receiver's buffer), `by_reference` (a
// send the wire may read in place), `pulled` (whole, copied by the receiver straight from the
// sender's buffer: single copy on one host), `stamp` (its own, or null: the collective's).
struct P2PRoute {
  bool rendezvous = false;
  bool by_reference = true;
  bool pulled = false;
  const CallStamp* stamp = nullptr;
};

// A pulled message: the send posts where its buffer is; the receive copies it from there
// (cross-memory attach, or plain loads for a thread or a dcomm::mem_alloc buffer) and hands
// the slot back at once, which the sender's wait_sent() waits for.
inline Result<bool> advance_pulled(const P2POp& op, PeerPort& port, const CallStamp* stamp, bool* moved,
                                   bool* referenced) {
  const size_t total = op.bytes();
  if (op.kind == P2POp::Kind::kSend) {
    const BufferDescriptor where = descriptor_of(op.buffer, total);
    DCOMM_TSAN_RELEASE(op.buffer);  // its contents, for a receiver that is a thread of this process
    if (!port.try_post_pulled(&where, sizeof where, stamp)) return false;
    *referenced = true;
  } else {
    const char* slot = nullptr;
    Status bad;
    if (!port.try_acquire_recv(sizeof(BufferDescriptor), &slot, &bad, stamp)) return false;
    if (!bad.ok()) return bad;
    BufferDescriptor where;
    std::memcpy(&where, slot, sizeof where);
    if (where.bytes != total)
      return make_error(ErrorCode::kAborted, port.info().describe(), " sent ", where.bytes,
                        " bytes where this rank receives ", total);
    const bool thread = port.memory().same_process();
    if (thread) DCOMM_TSAN_ACQUIRE(reinterpret_cast<void*>(where.address));
    DCOMM_RETURN_IF_ERROR(port.read_memory(op.buffer, where.address, total, where.input_region));
    if (thread) DCOMM_TSAN_RELEASE(reinterpret_cast<void*>(where.address));  // read: the sender may write it
    port.release_recv(/*now=*/true);
  }
  *moved = true;
  return true;
}

// The wires have read what went by reference, before the caller may change it.
inline Status wait_sent_all(std::span<const P2POp> ops, std::span<const MessageState> state,
                            const std::vector<PeerPort*>& ports, int rank) {
  for (size_t i = 0; i < ops.size(); ++i)
    if ((state[i].by_reference || state[i].rendezvous || state[i].pulled) && ops[i].kind == P2POp::Kind::kSend &&
        ops[i].peer != rank) {
      DCOMM_RETURN_IF_ERROR(ports[static_cast<size_t>(ops[i].peer)]->wait_sent());
      DCOMM_TSAN_ACQUIRE(ops[i].buffer);  // a receiver of this process has read it
    }
  return {};
}

// Moves as much of `op` as its port takes now, from `*done` bytes on: true once the whole
// message has gone; `*moved` says whether any of it did; `*referenced` that a send went by
// reference (the caller waits for the wire to read it).
inline Result<bool> advance_p2p(const P2POp& op, PeerPort& port, const P2PRoute& route, size_t* done, bool* moved,
                                bool* referenced) {
  if (route.pulled) return advance_pulled(op, port, route.stamp, moved, referenced);
  const size_t total = op.bytes();
  for (;;) {
    size_t n = std::min(port.slot_bytes(), total - *done);
    char* base = static_cast<char*>(op.buffer) + *done;
    if (route.rendezvous) {
      n = total;
      if (op.kind == P2POp::Kind::kSend) {
        if (!port.try_post_rendezvous(base, n, route.stamp)) return false;
        *referenced = true;
      } else {
        Status bad;
        if (!port.try_receive_landed(base, n, &bad, route.stamp)) return false;
        if (!bad.ok()) return bad;
      }
    } else if (op.kind == P2POp::Kind::kSend && route.by_reference && port.sends_by_reference(n)) {
      if (!port.try_post_by_reference(base, n, route.stamp)) return false;
      *referenced = true;
    } else if (op.kind == P2POp::Kind::kSend) {
      char* slot = nullptr;
      if (!port.try_acquire_send(n, &slot)) return false;
      if (n) std::memcpy(slot, base, n);
      port.commit_send(n, route.stamp);
    } else {
      const char* slot = nullptr;
      Status bad;
      if (!port.try_acquire_recv(n, &slot, &bad, route.stamp)) return false;
      if (!bad.ok()) return bad;
      if (n && op.fold) {
        const size_t elems = n / op.fold->elem_bytes;
        if (op.peer_first) op.fold->reduce(base, slot, base, elems);
        else op.fold->reduce(base, base, slot, elems);
      } else if (n) {
        std::memcpy(base, slot, n);
      }
      port.release_recv();
    }
    *moved = true;
    *done += n;
    if (*done == total) return true;
  }
}

}  // namespace detail

// Which of a user's messages go single copy, copied by their receiver straight from the
// sender's buffer (run_p2p); both ends decide alike from the same values. The communicator sets
// it where every rank can read every other (comm/algorithm_choice.hpp's pull_rule); the default
// pulls none.
struct PullRule {
  size_t from = 0;             // a message from this size on (0: none), ...
  size_t all_to_all_from = 0;  // ... an all-to-all's from this one, ...
  // ... but where a collective of `ranks` blocks of its size, up to `run_last`, was timed by the
  // host tuning: only in [run_from, run_until) of that whole (kNotMeasured: not timed).
  size_t ranks = 1;
  size_t run_from = kNotMeasured, run_until = kNoUpperBound, run_last = 0;

  bool pulls(const P2POp& op) const {
    const size_t whole = op.bytes() > SIZE_MAX / ranks ? SIZE_MAX : op.bytes() * ranks;
    if (const std::optional<bool> run = in_measured_run(whole, run_from, run_until, run_last)) return *run;
    const size_t at = op.all_to_all ? all_to_all_from : from;
    return at && op.bytes() >= at;
  }
};

// ports[p] is the port to rank p (null for this rank). Each message takes at least one slot,
// so zero-byte messages keep their place in the order; messages on the same pair and
// direction go in batch order, the others all at once. Sends a receive of the batch
// overwrites go from copies (detail::stage_clobbered_sends).
//
// `message_stamps`: a batch the user made (send/recv): every message carries its own stamp
// (type and count), checked by the receive it meets. Otherwise the batch is a step of a
// collective and its slots carry the collective's stamp. `staging`, where given, holds those
// copies and is kept from call to call (its pages are touched, and registered with a wire that
// registers, once, not at every in-place call). `pull`: which of a user's messages are copied by
// their receiver straight from the sender's buffer (PullRule).
inline Status run_p2p(std::span<const P2POp> ops, int rank, const std::vector<PeerPort*>& ports, const Config& config,
                      bool message_stamps = false, std::vector<char>* staging = nullptr,
                      const PullRule& pull = PullRule{}) {
  auto port_of = [&](const P2POp& op) { return ports[static_cast<size_t>(op.peer)]; };
  detail::BatchStates states(ops.size());
  const std::span<detail::MessageState> state = states.all();
  // Large slices go by reference (PeerPort::sends_by_reference), except a send that a receive
  // of this batch overwrites; a user's message (or a step's that P2POp::by_rendezvous marks) from
  // DCOMM_RENDEZVOUS_BYTES over a link that lands payloads goes as one rendezvous into the
  // receiver's buffer (PeerPort::goes_by_rendezvous: both ends decide alike). The batch returns only once
  // the wires have read what went by reference (the end of this function), so a collective's
  // next step, or the caller, may write that memory at once.
  for (size_t i = 0; i < ops.size(); ++i) {
    detail::MessageState& m = state[i];
    for (size_t j = i; j-- > 0 && m.before < 0;)
      if (ops[j].peer == ops[i].peer && ops[j].kind == ops[i].kind) m.before = static_cast<int>(j);
    if (message_stamps) m.stamp = message_stamp(ops[i].type, ops[i].count, ops[i].tag);
    m.pulled = message_stamps && ops[i].peer != rank && pull.pulls(ops[i]);
    m.rendezvous = !m.pulled && (message_stamps || ops[i].by_rendezvous) && ops[i].peer != rank && !ops[i].fold &&
                   port_of(ops[i])->goes_by_rendezvous(ops[i].bytes());
  }
  // A failed call leaves no receive landing in the caller's buffers.
  struct Withdraw {
    std::span<const P2POp> ops;
    std::span<const detail::MessageState> state;
    const std::vector<PeerPort*>& ports;
    ~Withdraw() {
      for (size_t i = 0; i < ops.size(); ++i)
        if (state[i].rendezvous && ops[i].kind == P2POp::Kind::kRecv)
          ports[static_cast<size_t>(ops[i].peer)]->withdraw_landing();
    }
  } withdraw{ops, state, ports};
  std::vector<P2POp> own;
  std::vector<char> own_staging;
  ops = detail::stage_clobbered_sends(ops, rank, staging ? *staging : own_staging, own, state);
  DCOMM_RETURN_IF_ERROR(detail::copy_self_messages(ops, rank, config.stream_bytes));

  size_t remaining = 0;
  int spin = config.spin_iterations;  // the least of the peers' (a proxied peer's is short)
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].peer == rank) {
      state[i].finished = true;
      continue;
    }
    ++remaining;
    spin = std::min(spin, port_of(ops[i])->spin_iterations());
  }
  bool any_by_reference = false;
  // A round of this loop polls every message still under way: a wide batch (an all_to_all's
  // 2 x (n-1) messages) yields after as many polls as a single wait, not that many rounds.
  Backoff backoff(spin, remaining);
  WaitClock clock(config);
  while (remaining > 0) {
    bool moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      detail::MessageState& m = state[i];
      if (m.finished) continue;
      if (m.before >= 0 && !state[static_cast<size_t>(m.before)].finished) continue;  // it goes first
      const detail::P2PRoute route{m.rendezvous, m.by_reference, m.pulled, message_stamps ? &m.stamp : nullptr};
      const Result<bool> whole =
          detail::advance_p2p(ops[i], *port_of(ops[i]), route, &m.done, &moved, &any_by_reference);
      if (!whole.ok()) return whole.status();
      if (whole.value()) {
        m.finished = true;
        --remaining;
      }
    }
    if (moved) {
      backoff.reset();
      clock.restart();
      continue;
    }
    DCOMM_RETURN_IF_ERROR(detail::wait_on_batch(ops, state, ports, backoff, clock, message_stamps));
  }
  return any_by_reference ? detail::wait_sent_all(ops, state, ports, rank) : Status{};
}

DCOMM_NAMESPACE_END
