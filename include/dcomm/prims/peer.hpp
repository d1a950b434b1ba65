// PeerPort: this rank's end of a connection to one peer, with the waiting rules every
// primitive follows: spin, then yield, then sleep (core/wait.hpp); give up when the
// communicator is aborted, when the peer has closed its side, or when the deadline passes
// with no progress. Errors name the peer.
//
// Every slot it sends carries the stamp of the call it belongs to (core/call.hpp), and every
// slot it takes is checked against this rank's call first: ranks that make different calls
// fail, naming both calls, instead of mixing their data.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/prims/peer_memory.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

// The largest data area a consumer takes before it releases the slot (FifoRef::take_area):
// DCOMM_TAKE_AREA_BYTES when set, else this core's L2 over twice the FIFO's `slots` data
// areas: a consumer copies or folds each area it reads into as many bytes of its own, so the
// ring of areas read since the producer last wrote one stays in the L2 with what they became
// (the lines a take holds are still there when the producer comes back). Larger areas cost
// time taken (2 processes on the AMD EPYC, L2 1 MiB: areas of 128 KiB, all_reduce 256-512 KiB
// 1.10x; 4 processes, broadcast 64 KiB-1 MiB 1.06-1.43x), smaller ones gain. 0 where the L2's
// size is not known.
inline uint64_t take_area_bytes(const Config& c, uint64_t slots) {
  if (c.take_area_bytes >= 0) return static_cast<uint64_t>(c.take_area_bytes);
  static const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 && slots ? static_cast<uint64_t>(l2) / (2 * slots) : 0;
}

class PeerPort {
 public:
  // same_process: the peer is a thread of this process (its addresses are ours). `call`: the
  // stamp of the call this rank is in (the communicator's; it changes with every call).
  // `directory`: asked which call the peer is in when a wait on it stalls (may be null).
  PeerPort(std::unique_ptr<Connection> conn, const PeerInfo* info, const AbortState* abort, const Config* config,
           bool same_process, const CallStamp* call, int self_rank, CallDirectory* directory = nullptr)
      : conn_(std::move(conn)),
        out_(conn_->send_fifo()),
        in_(conn_->recv_fifo()),
        info_(info),
        abort_(abort),
        config_(config),
        memory_(info, same_process),
        call_(call),
        self_rank_(self_rank),
        directory_(directory),
        take_bytes_(conn_->proxied() ? 0 : take_area_bytes(*config, in_.slots())) {}

  const PeerInfo& info() const { return *info_; }
  Connection& connection() const { return *conn_; }
  size_t slot_bytes() const { return out_.slot_bytes(); }

  // Producer side: room for `bytes` (at most slot_bytes()) in the next slot, then commit()
  // with the same count.
  Result<char*> acquire_send(size_t bytes) {
    DCOMM_RETURN_IF_ERROR(wait([this, bytes] { return writable(bytes); }, /*sending=*/true));
    return out_.payload(out_.tail(std::memory_order_relaxed), bytes);
  }
  bool try_acquire_send(size_t bytes, char** slot) {
    if (!writable(bytes)) return false;
    *slot = out_.payload(out_.tail(std::memory_order_relaxed), bytes);
    return true;
  }
  // `stamp`: a point-to-point message's own (else the call's).
  void commit_send(size_t bytes, const CallStamp* stamp = nullptr) {
    const CallStamp& s = stamp ? *stamp : *call_;
    out_.commit(bytes, s);
    conn_->notify();
    const uint64_t next = out_.tail(std::memory_order_relaxed);
    if (bytes > kSmallBytes && next - head_cache_ < out_.slots()) out_.own_area_early(next, bytes);
  }
  // Whether a send of `bytes` to this peer goes by reference: the link's wire reads from the
  // rank's memory (TCP, UCX) and the slice is at least DCOMM_ZERO_COPY_BYTES.
  bool sends_by_reference(size_t bytes) const {
    return config_->zero_copy_bytes && bytes >= config_->zero_copy_bytes && bytes > kInlineBytes &&
           conn_->takes_references();
  }
  // Sends `bytes` (at most a slot) from `data` without copying them: the wire reads them
  // there. `data` must not change until wait_sent() returns.
  // `rendezvous`: as try_post_rendezvous, waiting for a free slot.
  Status post_by_reference(const void* data, size_t bytes, const CallStamp* stamp = nullptr, bool rendezvous = false) {
    DCOMM_RETURN_IF_ERROR(wait([this] { return writable(kByReference); }, /*sending=*/true));
    commit_by_reference(data, bytes, stamp, rendezvous);
    return {};
  }
  bool try_post_by_reference(const void* data, size_t bytes, const CallStamp* stamp) {
    if (!writable(kByReference)) return false;
    commit_by_reference(data, bytes, stamp);
    return true;
  }
  // A message its receiver copies straight out of this rank's memory (single copy on one
  // host, algo/p2p.hpp): the slot holds only where it is (`where`, `where_bytes`), and the
  // message's memory must not change until wait_sent() returns, which waits for the receiver
  // to hand that slot back once it has copied.
  bool try_post_pulled(const void* where, size_t where_bytes, const CallStamp* stamp) {
    char* slot = nullptr;
    if (!try_acquire_send(where_bytes, &slot)) return false;
    std::memcpy(slot, where, where_bytes);
    commit_send(where_bytes, stamp);
    refs_end_ = out_.tail(std::memory_order_relaxed);
    return true;
  }
  // A waiting rank moves a wire it may move itself (verbs), instead of waiting for the proxy.
  void progress() const { conn_->progress(); }
  // Whether a message of `bytes` to or from this peer goes as one rendezvous, straight from the
  // sender's buffer into the receiver's (transport/fifo.hpp): over a link that lands payloads
  // (TCP, UCX, verbs) from DCOMM_RENDEZVOUS_BYTES. Both ends decide alike (same link, same
  // setting). A link that lands reads a rendezvous from the sender's buffer, even one that
  // copies other slots (verbs registers the buffer for it).
  bool goes_by_rendezvous(size_t bytes) const {
    return config_->rendezvous_bytes && bytes >= config_->rendezvous_bytes && bytes > kInlineBytes && conn_->landing();
  }
  // The sending end of one: `bytes` of any size at `data` (unchanged until wait_sent()).
  bool try_post_rendezvous(const void* data, size_t bytes, const CallStamp* stamp) {
    if (!writable(kByReference)) return false;
    commit_by_reference(data, bytes, stamp, /*rendezvous=*/true);
    return true;
  }
  // The receiving end: posts `dst` for the next slot (once), then true when the message has
  // landed there and the slot is handed back, or *status says why it cannot (as
  // try_acquire_recv). A slot the peer sent whole (a message of exactly a slot that it did not
  // send as a rendezvous) is copied.
  bool try_receive_landed(void* dst, size_t bytes, Status* status, const CallStamp* expect) {
    Landing* l = conn_->landing();
    if (!l->posted(recv_head_)) {
      l->post(recv_head_, dst, bytes);
      conn_->notify();
    }
    if (!in_.ready(recv_head_)) return false;
    auto r = checked_slot(bytes, expect);
    if (!r.ok()) {
      *status = r.status();
      return true;
    }
    if (!in_.rendezvous(recv_head_)) std::memcpy(dst, *r, bytes);
    l->slot.store(0);
    release_recv();
    return true;
  }
  // try_receive_landed until it has landed, within the deadline; a failure withdraws the posting.
  Status receive_landed(void* dst, size_t bytes) {
    Status bad;
    Status s = wait([&] { return try_receive_landed(dst, bytes, &bad, nullptr); }, /*sending=*/false);
    if (s.ok()) s = bad;
    if (!s.ok()) withdraw_landing();
    return s;
  }
  // A call that ends before its rendezvous landed (a failure): the wire stops writing into the
  // user's buffer before the call returns. On an aborted communicator the wire stops for good
  // (a receive from a dead peer may never be let go of: UCX cannot cancel a rendezvous it has
  // begun); otherwise it waits up to two seconds for the wire to let go.
  void withdraw_landing() {
    Landing* l = conn_->landing();
    if (!l || l->slot.load() == 0) return;
    l->slot.store(0);
    if (abort_->aborted()) {
      conn_->stop_wire();
      return;
    }
    Deadline d(std::chrono::milliseconds(2000));
    while (l->busy.load() > 0 && !d.expired()) {
      conn_->notify();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (l->busy.load() > 0)
      DCOMM_LOG(kWarn, kSubsysTransport, self_rank_, "a receive from ", info_->describe(),
                " was withdrawn while its wire still writes into the caller's buffer");
  }
  // Returns once the wire has read every slot sent by reference (or those before `mark`, a
  // sent_mark() taken earlier): before a call returns, so the caller may change or free its
  // buffers, or before it rewrites one it sent from.
  Status wait_sent(uint64_t mark = UINT64_MAX) {
    const uint64_t end = std::min(mark, refs_end_);
    if (head_cache_ >= end) return {};
    return wait([this, end] { return (head_cache_ = out_.head()) >= end; }, /*sending=*/true);
  }
  uint64_t sent_mark() const { return refs_end_; }
  // Sends one message of at most a slot (copied in whole).
  Status post(const void* data, size_t bytes) {
    auto slot = acquire_send(bytes);
    if (!slot.ok()) return slot.status();
    if (bytes) std::memcpy(*slot, data, bytes);
    commit_send(bytes);
    return {};
  }

  // Consumer side: the next slot's data; release_recv() hands the slot back.
  Result<const char*> acquire_recv(size_t expected_bytes) {
    DCOMM_RETURN_IF_ERROR(wait([this] { return in_.ready(recv_head_); }, /*sending=*/false));
    return checked_slot(expected_bytes, nullptr);
  }
  // False when nothing has arrived; a slot of another call, or of another size, is reported
  // through *status. `expect`: the message's stamp for a point-to-point receive.
  bool try_acquire_recv(size_t expected_bytes, const char** slot, Status* status,
                        const CallStamp* expect = nullptr) const {
    if (!in_.ready(recv_head_)) {
      const Landing* l = conn_->landing();
      if (!l || l->unposted.load(std::memory_order_relaxed) != recv_head_ + 1) return false;
      *status = make_error(ErrorCode::kAborted, info_->describe(), " sent a message of ", l->unposted_bytes.load(),
                           " bytes as one rendezvous where this rank receives ", expected_bytes,
                           "-byte pieces: the ranks disagree on the message's size (or on DCOMM_RENDEZVOUS_BYTES)");
      return true;
    }
    auto r = checked_slot(expected_bytes, expect);
    if (!r.ok()) *status = r.status();
    else *slot = *r;
    return true;
  }
  // Hands the slot back. The consumer's `head` is a cache line the producer reads, so it is
  // published in batches (half the ring) while more data is already waiting, and at once when
  // the consumer has caught up, a proxy thread is the producer, or `now` (a caller that reads
  // this peer only now and then and counts on the whole ring: the double tree). Behind the
  // producer, it asks early for the slot two past the next one (FifoRef::prefetch).
  // Over shared memory and between threads, a data area of up to take_bytes_ read here is
  // taken for the producer's next write first (FifoRef::take_area).
  void release_recv(bool now = false) {
    if (take_bytes_) {
      const uint64_t bytes = in_.size(recv_head_);
      if (bytes > kSmallBytes && bytes <= take_bytes_ && !in_.by_reference(recv_head_))
        in_.take_area(recv_head_, bytes);
    }
    ++recv_head_;
    if (now || recv_head_ - published_head_ >= in_.slots() / 2 || conn_->proxied() || !in_.ready(recv_head_)) {
      in_.publish_head(recv_head_);
      published_head_ = recv_head_;
      conn_->notify();
    } else {
      in_.prefetch(recv_head_ + 2);
    }
  }

  // The peer's memory, for the single-copy paths (prims/peer_memory.hpp).
  PeerMemory& memory() { return memory_; }
  // A single copy from or into the peer's buffers (PeerMemory's read and write); one that fails
  // reports the communicator's abort reason when it arrives within the grace (abort_reason_or).
  Status read_memory(void* dst, uint64_t src, size_t bytes, const RegionRef& region = {}, bool stream = false) {
    return abort_reason_or(memory_.read(dst, src, bytes, region, stream));
  }
  Status write_memory(uint64_t dst, const void* src, size_t bytes, const RegionRef& region = {}, bool stream = false) {
    return abort_reason_or(memory_.write(dst, src, bytes, region, stream));
  }

  // How long a wait on this peer spins before it yields: briefly when a proxy thread on this
  // host moves the data, since spinning takes the CPU from the thread it waits for.
  int spin_iterations() const {
    return conn_->proxied() ? std::min(config_->spin_iterations, kProxiedSpin) : config_->spin_iterations;
  }

  // The slow-path conditions of a wait that is not (yet) satisfied: abort, peer gone.
  // A peer that failed tells every rank why (the abort fan-out) before it closes, but its
  // closed link can be seen here first: the wait gives that reason a moment to arrive, so
  // that every survivor names the rank at fault, not the one that reported it and left.
  Status check_alive(bool sending) const {
    if (abort_->aborted()) return abort_->status();
    if (!(sending ? out_.consumer_closed() : (in_.producer_closed() && !in_.ready(recv_head_)))) return {};
    return abort_reason_or(
        make_error(ErrorCode::kPeerFailure, "peer ", info_->describe(),
                   " has destroyed its communicator (or closed its connection) while this rank still ",
                   sending ? "sends to it" : "expects data from it"));
  }
  // The abort's reason, once it arrives within the grace, else `otherwise`. Also for a single
  // copy from or into this peer's buffers that failed: a peer that is leaving (it aborted, or
  // its process is ending) unmaps them, and the reason it left names the rank at fault.
  Status abort_reason_or(Status otherwise) const {
    if (otherwise.ok()) return otherwise;
    for (Deadline grace(kCloseGrace); !grace.expired();) {
      if (abort_->aborted()) return abort_->status();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return otherwise;
  }
  // A wait that has stalled for a while asks which call the peer is in (core/abort.hpp).
  Status diagnose_stall(bool sending) const {
    return directory_ ? stalled_on_other_call(*directory_, info_->rank, info_->describe(), self_rank_, *call_, sending)
                      : Status{};
  }
  Status timeout_error(bool sending) const {
    return make_error(ErrorCode::kTimeout, "no progress for ", config_->timeout.count(), " ms waiting for ",
                      info_->describe(), sending ? " to take data (its receive slots stay full)" : " to send data",
                      "; it may have crashed or hung, or it did not make the same call with the same count "
                      "(DCOMM_TIMEOUT_MS sets this deadline)");
  }

 private:
  // A free slot for `bytes` (FifoRef::room: more of them for a message that fits inline; a
  // slot sent by reference takes a data area), reading the consumer's `head` (a cache line the
  // consumer writes) only when the cached copy says the FIFO is full.
  bool writable(uint64_t bytes) {
    const uint64_t t = out_.tail(std::memory_order_relaxed), room = out_.room(bytes);
    if (t - head_cache_ < room) return true;
    head_cache_ = out_.head();
    return t - head_cache_ < room;
  }

  void commit_by_reference(const void* data, size_t bytes, const CallStamp* stamp, bool rendezvous = false) {
    out_.commit_ref(data, bytes, stamp ? *stamp : *call_, rendezvous);
    refs_end_ = out_.tail(std::memory_order_relaxed);
    conn_->notify();
  }

  template <class Ready>
  Status wait(Ready ready, bool sending) const {
    if (ready()) return {};
    Backoff backoff(spin_iterations());
    WaitClock clock(*config_);
    while (!ready()) {
      conn_->progress();
      if (!backoff.pause()) continue;
      DCOMM_RETURN_IF_ERROR(check_alive(sending));
      const WaitClock::Tick t = clock.tick();
      if (t == WaitClock::Tick::kTimedOut) return timeout_error(sending);
      if (t == WaitClock::Tick::kDiagnose) DCOMM_RETURN_IF_ERROR(diagnose_stall(sending));
    }
    return {};
  }
  // Ranks whose calls differ fail here with kAborted (the communicator is aborted for it).
  Result<const char*> checked_slot(size_t expected_bytes, const CallStamp* expect) const {
    uint64_t index = recv_head_;
    const CallStamp got_stamp = in_.stamp(index);
    const CallStamp& mine = expect ? *expect : *call_;
    if (got_stamp.a != mine.a || got_stamp.b != mine.b)
      return make_error(ErrorCode::kAborted, "rank ", info_->rank, " called ", describe(got_stamp, true),
                        " where rank ", self_rank_, " called ", describe(mine, true), " (", info_->describe(),
                        "): every rank must make the same calls, in the same order, with the same types, ops, counts ",
                        "and roots");
    uint64_t got = in_.size(index);
    if (got != expected_bytes)
      return make_error(ErrorCode::kAborted, info_->describe(), " sent a slot of ", got,
                        " bytes where this rank expected ", expected_bytes, " in ", describe(mine),
                        ": do all ranks set the same DCOMM_SLOT_BYTES and DCOMM_RENDEZVOUS_BYTES?");
    return static_cast<const char*>(in_.payload(index, got));
  }

  static constexpr int kProxiedSpin = 16;
  static constexpr std::chrono::milliseconds kCloseGrace{250};

  std::unique_ptr<Connection> conn_;
  FifoRef out_, in_;
  uint64_t head_cache_ = 0;                      // producer: the consumer's head, last read
  uint64_t refs_end_ = 0;                        // producer: one past the last slot sent by reference
  uint64_t recv_head_ = 0, published_head_ = 0;  // consumer: slots taken, slots handed back
  const PeerInfo* info_;
  const AbortState* abort_;
  const Config* config_;
  PeerMemory memory_;
  const CallStamp* call_;
  int self_rank_;
  CallDirectory* directory_;
  uint64_t take_bytes_;  // the largest data area release_recv takes (0: none; a proxy thread produces)
};

DCOMM_NAMESPACE_END
