// The UCX transport (libucx-dev, the UCP tag API): each link is a UCP endpoint to the peer's
// worker, and the proxy thread (transport/proxy.hpp) moves slots between the local FIFOs and
// it, as it does for TCP. UCX picks the wire: shared memory, TCP, InfiniBand or RoCE verbs
// (UCX_TLS, UCX_NET_DEVICES choose, as for any UCX program).
//
// Slot k from rank s travels as one tagged message, tag = s << 44 | k (the low 44 bits of the
// running slot count), received straight into slot k of the peer's receive FIFO; a receive is
// posted only where that FIFO has room. Sends are synchronous (ucp_tag_send_sync_nbx: done
// when the peer has matched them), so a sender is never more than a FIFO ahead of a slow
// consumer and the peer's UCX never queues more than that. Endpoints to other hosts use peer
// error handling (UCX's shared-memory transports have none): a peer that dies, or a wire that
// breaks, fails the link with an error naming the peer.
//
// A rendezvous slot (transport/fifo.hpp) goes as its header (FifoRef::kRendezvousRun) on the
// slot's tag and its payload, from the sender's buffer, as a second message on the slot's tag
// with the top bit set. The receiving proxy posts the payload's receive only once the rank has
// posted where it goes (Landing), so UCX's own rendezvous moves it straight into the user's
// buffer (a single copy over shared memory, zero copy over RDMA); the header's slot is
// published when the payload has landed.
//
// One UCP context and worker per communicator rank, created at init; the endpoints are made
// then too, before the proxy thread starts, and only the proxy thread touches the worker after.
// Build: CMake target dcomm::ucx (defines DCOMM_HAS_UCX and links libucp).
#pragma once

#include <ucp/api/ucp.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/proxy.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
inline Status ucx_error(ucs_status_t s, const std::string& what) {
  return make_error(ErrorCode::kSystemError, what, ": ", ucs_status_string(s));
}
}  // namespace detail

// A UCP context and worker (UCX_* environment variables apply).
class UcxWorker {
 public:
  static Result<std::shared_ptr<UcxWorker>> create() {
    auto w = std::shared_ptr<UcxWorker>(new UcxWorker);
    ucp_config_t* config = nullptr;
    if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK)
      return detail::ucx_error(s, "reading the UCX configuration (UCX_* variables)");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    ucs_status_t s = ucp_init(&params, config, &w->context_);
    ucp_config_release(config);
    if (s != UCS_OK) return detail::ucx_error(s, "ucp_init (is UCX_TLS set to transports this machine has?)");
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    if (s = ucp_worker_create(w->context_, &wp, &w->worker_); s != UCS_OK)
      return detail::ucx_error(s, "ucp_worker_create");
    return w;
  }
  ~UcxWorker() {
    if (abandoned_) {
      DCOMM_LOG(kInfo, kSubsysTransport, -1,
                "the UCX worker is left to the process's exit: a call failed while UCX could still read the "
                "caller's buffers, or an endpoint to a failed peer held requests UCX never completed");
      return;
    }
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  // The worker's address, hex-encoded for the store.
  Result<std::string> address() const {
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    if (ucs_status_t s = ucp_worker_get_address(worker_, &addr, &len); s != UCS_OK)
      return detail::ucx_error(s, "ucp_worker_get_address");
    std::string hex = detail::to_hex(addr, len);
    ucp_worker_release_address(worker_, addr);
    return hex;
  }
  ucp_worker_h worker() const { return worker_; }
  // Progresses the worker once per proxy round (several links share it).
  bool progress() { return ucp_worker_progress(worker_) != 0; }
  // An endpoint closed with requests UCX never completed (its peer died on a wire without
  // peer-failure handling): destroying the worker would make UCX assert, so it is not. What
  // those requests' callbacks write into (`ops`, the closed link's) lives as long as the
  // worker: UCX may still complete them (purged, cancelled) while the worker progresses for
  // other links.
  void abandon(std::shared_ptr<void> ops) {
    abandoned_ = true;
    if (ops) kept_.push_back(std::move(ops));
  }

 private:
  UcxWorker() = default;
  bool abandoned_ = false;
  std::vector<std::shared_ptr<void>> kept_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
};

class UcxLink final : public ProxyLink {
 public:
  static constexpr int kSeqBits = 44;
  static constexpr int kSleepMs = 10;

  UcxLink(int peer_rank, int my_rank, const Config& c, std::shared_ptr<UcxWorker> w)
      : ProxyLink(peer_rank, c),
        me_(my_rank),
        worker_(std::move(w)),
        sends_(static_cast<size_t>(c.slots)),
        recvs_(static_cast<size_t>(c.slots)) {}
  ~UcxLink() override { close_endpoint(std::chrono::milliseconds(0)); }

  // Creates the endpoint to the peer's worker (hex address from the store). Peer-failure
  // handling is asked for between hosts only: UCX's shared-memory transports have none (on one
  // host the communicator's control connections report a dead peer either way).
  Status connect(const std::string& peer_address_hex, bool same_host) {
    const auto decoded = detail::from_hex(peer_address_hex);
    if (!decoded || decoded->empty())
      return make_error(ErrorCode::kInternal, "rank ", peer, " published an unreadable UCX address");
    const std::string& addr = *decoded;
    ucp_ep_params_t p{};
    p.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp_address_t*>(addr.data());
    p.err_mode = same_host ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
    peer_errors_ = !same_host;
    p.err_handler.cb = &UcxLink::on_endpoint_error;
    p.err_handler.arg = this;
    const ucs_status_t s = ucp_ep_create(worker_->worker(), &p, &ep_);
    if (s != UCS_OK) return detail::ucx_error(s, detail::cat("creating a UCX endpoint to rank ", peer));
    return {};
  }

  const char* kind() const override { return "ucx"; }
  bool lands_payloads() const override { return true; }

  bool pump() override {
    bool progress = worker_->progress();
    if (ep_status_ != UCS_OK) {
      // With data still to deliver this is a failure. Otherwise the peer may simply have
      // destroyed its communicator first: the link closes, and a later wait on it reports the
      // peer as gone (a peer that died is reported by the control connections too).
      if (next_send_ > send.fifo.head()) return fail_with(ep_status_, "the UCX endpoint failed");
      DCOMM_LOG(kInfo, kSubsysTransport, rank, "UCX link to ", peer_name(), " closed: ", ucs_status_string(ep_status_));
      failed = true;
      recv.fifo.close_producer();
      send.fifo.close_consumer();
      return false;
    }
    return pump_sends(progress) && pump_receives(progress) && progress;
  }

 private:
  // pump()'s halves: false when the link failed; `progress` set when anything moved.
  bool pump_sends(bool& progress) {
    FifoRef out = send.fifo;
    const uint64_t slots = out.slots();
    // Every committed slot, in order; the slot is freed when the peer has matched it.
    for (const uint64_t tail = out.tail(); next_send_ < tail; ++next_send_) {
      Op& op = sends_[next_send_ % slots];
      const uint64_t bytes = out.size(next_send_);
      op = Op{this};
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      prm.cb.send = &UcxLink::on_send;
      prm.user_data = &op;
      // The slot's stamp and payload, as one run (transport/fifo.hpp); a slot sent by reference
      // as two pieces, its header and the payload where the rank keeps it; a rendezvous as its
      // header run, then the payload as a message of its own.
      const void* buffer = out.wire(next_send_);
      size_t count = FifoRef::wire_bytes(bytes);
      if (out.rendezvous(next_send_)) {
        op.left = 2;
        op.size = bytes;
        op.iov[0] = {out.wire(next_send_), FifoRef::kRendezvousRun - sizeof op.size};
        op.iov[1] = {&op.size, sizeof op.size};
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        if (!send_one(op, op.iov, 2, tag(me_, next_send_), prm)) return false;
        prm.datatype = ucp_dt_make_contig(1);
        if (!send_one(op, out.source(next_send_, bytes), bytes, tag(me_, next_send_) | kPayloadTag, prm)) return false;
        progress = true;
        continue;
      }
      if (out.by_reference(next_send_)) {
        op.iov[0] = {out.wire(next_send_), count - bytes};
        op.iov[1] = {const_cast<char*>(out.source(next_send_, bytes)), bytes};
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_dt_make_iov();
        buffer = op.iov, count = 2;
      }
      if (!send_one(op, buffer, count, tag(me_, next_send_), prm)) return false;
      progress = true;
    }
    uint64_t head = out.head(std::memory_order_relaxed);
    while (head < next_send_ && sends_[head % slots].done) {
      if (sends_[head % slots].status != UCS_OK) return fail_with(sends_[head % slots].status, "a send failed");
      ++head;
    }
    if (head > out.head(std::memory_order_relaxed)) out.publish_head(head), progress = true;
    return true;
  }
  bool pump_receives(bool& progress) {
    FifoRef in = recv.fifo;
    const uint64_t slots = in.slots();
    // Posted into every slot the consumer has freed, completed in order.
    for (const uint64_t room = in.head() + slots; next_post_ < room; ++next_post_) {
      if (!post_receive(recvs_[next_post_ % slots], in.wire(next_post_), in.max_wire_bytes(), tag(peer, next_post_)))
        return false;
      progress = true;
    }
    uint64_t tail = in.tail(std::memory_order_relaxed);
    while (tail < next_post_ && recvs_[tail % slots].done) {
      const Op& op = recvs_[tail % slots];
      if (op.status == UCS_ERR_MESSAGE_TRUNCATED)
        return fail(detail::cat(peer_name(), " sent a slot larger than this rank's ", in.slot_bytes(),
                                " bytes (do all ranks set the same DCOMM_SLOT_BYTES?)"));
      if (op.status != UCS_OK) return fail_with(op.status, "a receive failed");
      // The run landed where its payload belongs, inline or in the data area (transport/fifo.hpp).
      uint64_t bytes = 0;
      if (op.bytes == FifoRef::kRendezvousRun) {
        bytes = in.rendezvous_size(tail);
        if (!landed(tail, bytes, progress)) {
          if (failed) return false;
          break;
        }
        in.set_size(tail, bytes | kRendezvous);
        ++tail;
        continue;
      }
      if (!FifoRef::payload_of_wire(op.bytes, &bytes))
        return fail(detail::cat(peer_name(), " sent a malformed ", op.bytes, "-byte slot over UCX"));
      in.set_size(tail, bytes);
      ++tail;
    }
    if (tail > in.tail(std::memory_order_relaxed)) in.publish_tail(tail), progress = true;
    return true;
  }

 public:
  // No wake-up event: ucp_worker_arm blocked in a read (UCX 1.13) on a host where a
  // shared-memory peer had died, which kept the proxy from hearing of the death. The proxy
  // sleeps at most kSleepMs instead (a millisecond during a call: proxy.hpp).
  int max_sleep_ms() const override { return kSleepMs; }

  void shutdown() override { close_endpoint(std::chrono::milliseconds(1000)); }
  bool closes_before_bye() const override { return true; }
  void linger() override {
    if (!quiesced.load()) worker_->progress();
  }

 private:
  struct Op {
    UcxLink* link = nullptr;
    bool done = false;
    int left = 1;  // a send: messages not yet complete (a rendezvous makes two)
    ucs_status_t status = UCS_OK;
    size_t bytes = 0;
    uint64_t size = 0;         // a rendezvous send: the payload's size, as its header carries it
    void* request = nullptr;   // a posted receive, until it completes
    ucp_dt_iov_t iov[2] = {};  // a send by reference: the slot's header, then the payload
  };
  static constexpr ucp_tag_t kPayloadTag = ucp_tag_t{1} << 63;  // a rendezvous slot's payload

  static ucp_tag_t tag(int sender, uint64_t seq) {
    return (static_cast<ucp_tag_t>(sender) << kSeqBits) | (seq & ((ucp_tag_t{1} << kSeqBits) - 1));
  }
  static void sent(Op* op, ucs_status_t status) {
    if (status != UCS_OK && op->status == UCS_OK) op->status = status;
    op->done = --op->left == 0;
  }
  static void on_send(void* request, ucs_status_t status, void* user) {
    sent(static_cast<Op*>(user), status);
    ucp_request_free(request);
  }
  // One synchronous send of slot `op` (done when the peer has matched it).
  bool send_one(Op& op, const void* buffer, size_t count, ucp_tag_t t, const ucp_request_param_t& prm) {
    ucs_status_ptr_t r = ucp_tag_send_sync_nbx(ep_, buffer, count, t, &prm);
    if (UCS_PTR_IS_ERR(r)) return fail_with(UCS_PTR_STATUS(r), detail::cat("sending slot ", next_send_, " failed"));
    if (r == nullptr) sent(&op, UCS_OK);
    return true;
  }

  // Posts the tagged receive of `bytes` into `buffer` for `op`, always completed through the
  // callback (UCX 1.13 leaves tag_info unset on some immediate completions, which would lose
  // the length); false when the link failed.
  bool post_receive(Op& op, void* buffer, size_t bytes, ucp_tag_t t) {
    op = Op{this};
    ucp_request_param_t prm{};
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    prm.cb.recv = &UcxLink::on_recv;
    prm.user_data = &op;
    ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_->worker(), buffer, bytes, t, ~ucp_tag_t{0}, &prm);
    if (UCS_PTR_IS_ERR(r)) return fail_with(UCS_PTR_STATUS(r), "posting a receive failed");
    if (!op.done) op.request = r;
    return true;
  }

  // The payload of rendezvous slot k (`bytes`): received where the rank posted it (Landing),
  // once it has; true when it is there. A posting the rank withdraws (its call failed) cancels
  // the receive; the link then fails, its stream of slots broken.
  bool landed(uint64_t k, uint64_t bytes, bool& progress) {
    if (payload_slot_ != k + 1) {
      char* dst = hold_landing(k, bytes);
      if (!dst) return false;
      if (!post_receive(*payload_, dst, bytes, tag(peer, k) | kPayloadTag)) {
        landing.release();
        return false;
      }
      payload_slot_ = k + 1;
      progress = true;
    }
    if (!payload_->done) {
      if (!landing.posted(k) && payload_->request) ucp_request_cancel(worker_->worker(), payload_->request);
      return false;
    }
    payload_slot_ = 0;
    landing.release();
    progress = true;
    if (payload_->status != UCS_OK) return fail_with(payload_->status, "a rendezvous receive failed");
    if (payload_->bytes != bytes)
      return fail(detail::cat(peer_name(), " sent ", payload_->bytes, " bytes of a ", bytes, "-byte message"));
    return true;
  }
  static void on_recv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
    auto* op = static_cast<Op*>(user);
    op->status = status, op->done = true, op->request = nullptr;
    op->bytes = info ? info->length : 0;
    ucp_request_free(request);
  }
  static void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
    static_cast<UcxLink*>(arg)->ep_status_ = status;
  }

  bool fail_with(ucs_status_t s, const std::string& what) {
    return fail(detail::cat("UCX link to ", peer_name(), ": ", what, ": ", ucs_status_string(s)));
  }

  // Progresses the worker (at most 1000 rounds) while `pending()` holds.
  template <class Pending>
  void progress_while(Pending pending) {
    for (int spins = 0; spins < 1000 && pending(); ++spins) worker_->progress();
  }

  // Cancels the receives still posted (they belong to the worker, which outlives this link),
  // flushes and closes the endpoint, waiting up to `wait` (forced when the peer is gone and the
  // endpoint handles peer failure: UCX leaves a forced close undefined otherwise), and lets the
  // sends still in flight complete: their callbacks write into this link's Ops. What UCX did
  // not complete by then (a peer that died on shared memory) leaves the worker abandoned, with
  // those Ops.
  static bool in_flight(const Op& op) { return op.request && !op.done; }  // posted, not completed
  void close_endpoint(std::chrono::milliseconds wait) {
    if (quiesced.load()) {
      // A call failed: the worker never progresses again (a send may still refer to the
      // caller's memory, which may be gone by now); the endpoint and worker go with the process.
      if (ep_) abandon();  // once: the destructor's close comes after shutdown()'s
      ep_ = nullptr;
      return;
    }
    for (Op& op : recvs_)
      if (in_flight(op)) ucp_request_cancel(worker_->worker(), op.request);
    if (payload_slot_ && payload_->request && !payload_->done) ucp_request_cancel(worker_->worker(), payload_->request);
    progress_while(
        [&] { return std::any_of(recvs_.begin(), recvs_.end(), in_flight) || (payload_slot_ && !payload_->done); });
    bool left = false;  // requests UCX has not completed
    if (ep_) {
      ucp_request_param_t prm{};
      prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      const bool force = peer_errors_ && (failed || ep_status_ != UCS_OK || wait.count() == 0);
      prm.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &prm);
      ep_ = nullptr;
      if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
        const auto until = std::chrono::steady_clock::now() + std::max(wait, std::chrono::milliseconds(100));
        while (ucp_request_check_status(r) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
          worker_->progress();
        if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
        else left = true;
      }
    }
    auto sending = [&] {
      for (uint64_t k = send.fifo.head(); k < next_send_; ++k)
        if (!sends_[k % sends_.size()].done) return true;
      return false;
    };
    progress_while(sending);
    left |= sending() || (payload_slot_ && !payload_->done) || std::any_of(recvs_.begin(), recvs_.end(), in_flight);
    if (payload_slot_ && payload_->done) landing.release(), payload_slot_ = 0;
    if (left) abandon();
  }

  // Leaves the worker to the process's exit, with every Op a callback may still write into.
  void abandon() {
    struct Ops {
      std::vector<Op> sends, recvs;
      std::shared_ptr<Op> payload;
    };
    // Moving a vector keeps its elements where they are.
    worker_->abandon(std::make_shared<Ops>(Ops{std::move(sends_), std::move(recvs_), payload_}));
    Op inert{this};
    inert.done = true;
    sends_.assign(static_cast<size_t>(send.fifo.slots()), inert);
    recvs_.assign(static_cast<size_t>(recv.fifo.slots()), inert);
    payload_ = std::make_shared<Op>(inert), payload_slot_ = 0;  // its landing stays held: UCX may write there
  }

  int me_;
  std::shared_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  ucs_status_t ep_status_ = UCS_OK;
  bool peer_errors_ = false;       // the endpoint handles peer failure (between hosts)
  std::vector<Op> sends_, recvs_;  // by slot
  uint64_t next_send_ = 0, next_post_ = 0;
  std::shared_ptr<Op> payload_ = std::make_shared<Op>();  // the rendezvous receive in flight
  uint64_t payload_slot_ = 0;                             // its slot + 1; 0: none
};

DCOMM_NAMESPACE_END
