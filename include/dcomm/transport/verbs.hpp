// The RDMA verbs transport (libibverbs, rdma-core): InfiniBand, RoCE, Soft-RoCE (rdma_rxe).
//
// Each link is a reliable-connected queue pair to the peer. The proxy thread
// (transport/proxy.hpp) moves slots: a committed slot of the local send FIFO goes out as one
// RDMA WRITE WITH IMMEDIATE straight into the same slot of the peer's receive FIFO (both
// registered), the immediate carrying the byte count; the peer's receive completion (one
// pre-posted receive per slot, completions in order on an RC queue pair) publishes the slot.
//
// Flow control: the sender writes slot k only when the peer has consumed slot k - slots. The
// receiving end tells it how far its consumer got with a credit message (a WRITE WITH
// IMMEDIATE without data, the low 30 bits of the consumed count in the immediate), once half a
// FIFO is consumed or the sender has used half its room; one credit message is in flight at a
// time, so the receive queue (slots + 4 entries, with the rendezvous messages) never runs dry,
// and no slot is overwritten before its consumer released it.
//
// A rendezvous (transport/fifo.hpp, from DCOMM_RENDEZVOUS_BYTES) goes as its header into the
// slot; the receiver registers the buffer its rank posted (Landing) and writes where it is into
// the sender's mailbox; the sender registers its own buffer and RDMA WRITEs the payload there,
// the last write's immediate saying it landed. Where a buffer cannot be registered, that end
// goes through the slot's own registered data area instead, window by window (see
// docs/transports.md). A waiting rank moves its links itself (rank_pumps): a small message
// pays no hop through the proxy thread.
//
// Failures: a completion with an error status (the peer died, the link broke: retries
// exhausted) fails the link with an error naming the peer, the device and port, and the
// status. The device (transport/verbs_device.hpp) is chosen by DCOMM_IB_HCA or topology. A
// machine without RDMA devices still builds and runs everything else; asking for verbs there
// is an error that says no device was found.
// Build: CMake target dcomm::verbs (defines DCOMM_HAS_VERBS, links libibverbs).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/registration.hpp"
#include "dcomm/transport/verbs_device.hpp"

DCOMM_NAMESPACE_BEGIN

class VerbsLink final : public ProxyLink {
 public:
  // Immediate data: a data slot's byte count (top bit clear); a credit (top bits 10, then the
  // low 30 bits of the consumed count); a rendezvous message (top bits 11, two bits of
  // RdvMessage, the slot's index in the low 28 bits).
  static constexpr uint32_t kCreditImm = 2u << 30, kRendezvousImm = 3u << 30;
  static constexpr uint32_t kLow30 = (1u << 30) - 1, kIndexBits = (1u << 28) - 1;
  enum RdvMessage : uint32_t { kHeader = 0, kReady = 1, kLanded = 2 };

  VerbsLink(int peer_rank, const Config& c, std::shared_ptr<VerbsDevice> dev)
      : ProxyLink(peer_rank, c),
        dev_(std::move(dev)),
        slots_(static_cast<uint32_t>(c.slots)),
        sent_(c.slots, false),
        rdv_in_(c.slots, false) {}
  ~VerbsLink() override {
    let_go();
    if (qp_) ibv_destroy_qp(qp_);
    if (cq_) ibv_destroy_cq(cq_);
    if (channel_) ibv_destroy_comp_channel(channel_);
  }

  const char* kind() const override { return "verbs"; }
  // Ordinary slots go from the registered FIFO (copied in); a rendezvous goes from the user's
  // buffer, registered for it, into the receiver's, registered too (RDMA WRITE).
  bool takes_references() const override { return false; }
  bool lands_payloads() const override { return true; }
  // The queue pair and completion queue are this link's alone: a waiting rank polls them itself
  // (the proxy still does when no rank is waiting).
  bool rank_pumps() const override { return true; }

  // Creates the queue pair and registers the FIFOs; returns this end's endpoint.
  Result<VerbsEndpoint> prepare() {
    channel_ = ibv_create_comp_channel(dev_->context());
    if (!channel_) return sys_error("ibv_create_comp_channel");
    fcntl(channel_->fd, F_SETFL, fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
    const int depth = static_cast<int>(2 * slots_ + 8);
    cq_ = ibv_create_cq(dev_->context(), 2 * depth, nullptr, channel_, 0);
    if (!cq_) return sys_error("ibv_create_cq");
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = static_cast<uint32_t>(depth);
    qa.cap.max_recv_wr = slots_ + kControlReceives;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    // Small slots go inline (copied at posting: no memory-region lookup for them); a device
    // that takes less inline data gets the least this link needs, the rendezvous window.
    qa.cap.max_inline_data = kSmallInline;
    qp_ = ibv_create_qp(dev_->pd(), &qa);
    if (!qp_) qa.cap.max_inline_data = sizeof(RendezvousWindow), qp_ = ibv_create_qp(dev_->pd(), &qa);
    if (!qp_) return sys_error("ibv_create_qp");
    max_inline_ = qa.cap.max_inline_data;
    RegistrationCache& cache = dev_->registrations();
    constexpr int kRemote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    auto send_mr = cache.keep(send.memory, send.bytes, IBV_ACCESS_LOCAL_WRITE);
    auto recv_mr = send_mr.ok() ? cache.keep(recv.memory, recv.bytes, kRemote) : send_mr;
    auto box_mr = recv_mr.ok() ? cache.keep(&box_, sizeof box_, kRemote) : recv_mr;
    if (!box_mr.ok())
      return make_error(ErrorCode::kSystemError, "registering the FIFOs of the link to rank ", peer, " with ",
                        dev_->describe(), " failed: ", box_mr.status().message(),
                        " (is the locked-memory limit, ulimit -l, large enough?)");
    send_mr_ = static_cast<ibv_mr*>(*send_mr), recv_mr_ = static_cast<ibv_mr*>(*recv_mr);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = static_cast<uint8_t>(dev_->port());
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
      return sys_error("moving the queue pair to INIT");
    for (uint32_t i = 0; i < slots_ + kControlReceives; ++i) DCOMM_RETURN_IF_ERROR(post_recv());
    VerbsEndpoint me;
    me.qpn = qp_->qp_num, me.psn = psn_, me.rkey = recv_mr_->rkey, me.lid = dev_->port_attr().lid;
    me.fifo = reinterpret_cast<uint64_t>(recv.memory), me.gid = dev_->gid();
    me.slot_bytes = recv.fifo.slot_bytes(), me.slots = recv.fifo.slots();
    me.box = reinterpret_cast<uint64_t>(&box_), me.box_rkey = static_cast<ibv_mr*>(*box_mr)->rkey;
    return me;
  }

  // Connects to the peer's endpoint: INIT -> RTR -> RTS.
  Status connect(const VerbsEndpoint& peer_end) {
    if (peer_end.slot_bytes != recv.fifo.slot_bytes() || peer_end.slots != recv.fifo.slots())
      return invalid_argument("rank ", peer, " has ", peer_end.slots, " slots of ", peer_end.slot_bytes,
                              " bytes, this rank ", recv.fifo.slots(), " of ", recv.fifo.slot_bytes(),
                              ": every rank must set the same DCOMM_SLOT_BYTES and DCOMM_SLOTS");
    remote_ = peer_end;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = dev_->port_attr().active_mtu;
    a.dest_qp_num = peer_end.qpn;
    a.rq_psn = peer_end.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = static_cast<uint8_t>(dev_->port());
    a.ah_attr.dlid = peer_end.lid;
    if (dev_->port_attr().link_layer == IBV_LINK_LAYER_ETHERNET || peer_end.lid == 0) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = peer_end.gid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_->gid_index());
      a.ah_attr.grh.hop_limit = 64;
    }
    if (ibv_modify_qp(qp_, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
      return sys_error("moving the queue pair to RTR");
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = dev_->ack_timeout();  // 4.096 us x 2^14 = 67 ms a try by default (DCOMM_IB_TIMEOUT)
    r.retry_cnt = 7;                  // then the peer is declared unreachable (a completion error)
    r.rnr_retry = 7;                  // a receiver without a posted receive is waited for, not an error
    r.sq_psn = psn_;
    r.max_rd_atomic = 1;
    if (ibv_modify_qp(qp_, &r,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      return sys_error("moving the queue pair to RTS");
    return {};
  }

  bool pump() override {
    // A link that fails lets go of the rank's buffers: nothing is written into them after.
    struct LetGoOnFailure {
      VerbsLink* link;
      ~LetGoOnFailure() {
        if (link->failed) link->let_go();
      }
    } on_failure{this};
    // The completion channel is read only after the proxy armed it: a rank polling the queue
    // makes no system call per turn.
    bool progress = armed_ && drain_events();
    armed_ = false;
    if (int n = poll_completions(); n < 0) return false;
    else progress |= n > 0;
    FifoRef out = send.fifo, in = recv.fifo;
    // Every committed slot the peer has room for: its stamp and payload as one run, to the same
    // place in the peer's FIFO; a rendezvous slot as its header run (the payload follows when
    // the peer says where).
    for (const uint64_t tail = out.tail(); next_send_ < tail && next_send_ < peer_consumed_ + slots_; ++next_send_) {
      const uint64_t k = next_send_;
      const uint64_t remote =
          remote_.fifo + (reinterpret_cast<uint64_t>(in.wire(k)) - reinterpret_cast<uint64_t>(recv.memory));
      bool posted;
      if (out.rendezvous(k)) {
        out.set_rendezvous_size(k, out.size(k));
        posted = post_write(out.wire(k), FifoRef::kRendezvousRun, send_mr_->lkey, remote, remote_.rkey,
                            rendezvous_imm(kHeader, k), work(kHeaderWr, k));
      } else {
        const uint64_t bytes = out.size(k), wire = FifoRef::wire_bytes(bytes);
        posted = post_write(out.wire(k), wire, send_mr_->lkey, remote, remote_.rkey, static_cast<uint32_t>(bytes),
                            work(kDataWr, k), /*plain=*/false, /*inline_data=*/wire <= max_inline_);
      }
      if (!posted) return false;
      progress = true;
    }
    if (!write_window(progress) || !land(progress)) return false;
    uint64_t head = out.head(std::memory_order_relaxed);
    while (head < next_send_ && sent_[head % slots_]) sent_[head % slots_] = false, ++head;
    if (head > out.head(std::memory_order_relaxed)) out.publish_head(head), progress = true;
    // Credit: tell the peer how far this rank's consumer got, one message at a time, once half
    // a FIFO is consumed or the peer has used more than half of the room it knows of. A small
    // message back and forth then costs one write each way, not two; a sender never sees less
    // than half the FIFO free while its slots are consumed.
    const uint64_t consumed = in.head(), half = slots_ / 2;
    if (!credit_in_flight_ && consumed > credit_sent_ &&
        (consumed - credit_sent_ >= half || arrived_ - credit_sent_ > half)) {
      if (!post_write(nullptr, 0, 0, 0, 0, kCreditImm | static_cast<uint32_t>(consumed & kLow30), work(kCreditWr, 0)))
        return false;
      credit_in_flight_ = true, credit_sent_ = consumed, progress = true;
    }
    return progress;
  }

  bool prepare_to_sleep(std::vector<pollfd>& fds) override {
    drain_events();  // an event that came after the last pump's read: the fd must not stay readable
    if (ibv_req_notify_cq(cq_, 0) != 0) return false;
    armed_ = true;
    if (poll_completions() != 0) return false;  // something came in since the last pump
    fds.push_back({channel_->fd, POLLIN, 0});
    return true;
  }

 private:
  // Receives for messages outside the slots: a credit, a window asked for, a window landed,
  // and one to spare.
  static constexpr uint32_t kControlReceives = 4;
  static constexpr uint32_t kSmallInline = 256;
  enum WorkKind : uint64_t { kDataWr = 1, kHeaderWr, kCreditWr, kReadyWr, kPieceWr, kLandedWr };
  static uint64_t work(WorkKind kind, uint64_t slot) { return kind | (slot << 4); }
  static uint32_t rendezvous_imm(RdvMessage m, uint64_t slot) {
    return kRendezvousImm | (m << 28) | static_cast<uint32_t>(slot & kIndexBits);
  }

  // The sending end of the rendezvous whose window the peer asked for.
  struct Outgoing {
    bool active = false;
    uint64_t slot = 0, bytes = 0;
    const char* src = nullptr;
    RegistrationCache::Region* region = nullptr;  // null: through the slot's bounce area
    RendezvousWindow window;
    uint64_t written = 0;      // of the window, posted
    bool piece_busy = false;   // a bounced piece is in flight (the bounce area is in use)
    bool window_done = false;  // the window's last write completed
  };
  // The receiving end of the rendezvous at the head of the receive FIFO.
  struct Incoming {
    bool held = false;  // the rank's buffer (Landing::hold)
    char* dst = nullptr;
    uint64_t bytes = 0, offset = 0, window = 0;
    RegistrationCache::Region* region = nullptr;  // null: through the slot's bounce area
  };

  Status sys_error(const char* what) {
    return make_error(ErrorCode::kSystemError, what, " for the link to rank ", peer, " on ", dev_->describe(),
                      " failed: ", std::strerror(errno));
  }
  Status post_recv() {
    ibv_recv_wr wr{}, *bad = nullptr;
    wr.wr_id = 0;
    wr.num_sge = 0;  // WRITE WITH IMMEDIATE: the data lands where the writer says
    if (ibv_post_recv(qp_, &wr, &bad) != 0) return sys_error("ibv_post_recv");
    return {};
  }
  // An RDMA WRITE of `bytes` at `local` (under `lkey`) to `remote` (under `rkey`); with the
  // immediate `imm` unless `plain`; `inline_data` copies the bytes at posting.
  bool post_write(const void* local, uint64_t bytes, uint32_t lkey, uint64_t remote, uint32_t rkey, uint32_t imm,
                  uint64_t wr_id, bool plain = false, bool inline_data = false) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), static_cast<uint32_t>(bytes), lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = wr_id;
    wr.opcode = plain ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED | (inline_data ? IBV_SEND_INLINE : 0);
    wr.imm_data = htonl(imm);
    wr.sg_list = bytes ? &sge : nullptr;
    wr.num_sge = bytes ? 1 : 0;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp_, &wr, &bad) != 0)
      return fail(detail::cat("RDMA write to ", peer_name(), " on ", dev_->describe(),
                              ": ibv_post_send failed: ", std::strerror(errno)));
    return true;
  }
  // A slot's data area past the rendezvous size word: where a rendezvous goes through
  // registered memory when the user's buffer could not be registered (the slot's own area,
  // unused by a rendezvous).
  static char* bounce(FifoRef f, uint64_t slot) { return f.payload(slot, f.slot_bytes()) + kSlotHeaderBytes; }
  uint64_t bounce_bytes() const { return recv.fifo.slot_bytes() - kSlotHeaderBytes; }
  // A buffer registered for a rendezvous, or null (the copy path, said once per process).
  RegistrationCache::Region* register_buffer(const void* p, uint64_t bytes, int access) {
    auto r = dev_->registrations().acquire(const_cast<void*>(p), bytes, access);
    if (r.ok()) return *r;
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      DCOMM_LOG(kWarn, kSubsysTransport, rank, "registering a ", bytes, "-byte buffer with ", dev_->describe(),
                " failed (", r.status().message(),
                "): rendezvous messages whose buffers cannot be registered are copied through the FIFOs' "
                "registered memory (ulimit -l limits what can be registered)");
    return nullptr;
  }

  // The sending end: writes the window the peer asked for (from the user's buffer, or piece
  // by piece through the slot's bounce area), the last write carrying kLanded.
  bool write_window(bool& progress) {
    Outgoing& o = out_;
    const uint64_t newest = next_send_ - 1;  // the slot asked for, from its index's low bits
    const uint64_t k = newest - ((newest - ready_index_) & kIndexBits);
    // A window asked for before the last write of the previous window (of this rendezvous or
    // the one before) completed here waits for that completion: the peer asks for one window
    // at a time, but its request may overtake the write's completion.
    if (ready_ && (!o.active || (o.slot == k && o.window_done))) {
      ready_ = false;
      if (next_send_ == 0 || !send.fifo.rendezvous(k) || sent_[k % slots_])
        return fail(detail::cat(peer_name(), " asked for the payload of slot ", k, ", which is no rendezvous pending"));
      if (!o.active) {
        o = Outgoing{};
        o.active = true, o.slot = k, o.bytes = send.fifo.size(k), o.src = send.fifo.source(k, o.bytes);
        o.region = register_buffer(o.src, o.bytes, IBV_ACCESS_LOCAL_WRITE);
      }
      o.window = window_;
      o.written = 0, o.window_done = false;
      if (o.window.offset + o.window.len > o.bytes)
        return fail(detail::cat(peer_name(), " receives ", o.window.offset + o.window.len,
                                " bytes of a rendezvous where this rank sends ", o.bytes));
    }
    const uint64_t chunk = o.region ? uint64_t{1} << 30 : bounce_bytes();
    while (o.active && o.written < o.window.len && !o.piece_busy) {
      const uint64_t n = std::min(chunk, o.window.len - o.written);
      const bool last = o.written + n == o.window.len;
      const char* from = o.src + o.window.offset + o.written;
      uint32_t lkey = o.region ? static_cast<ibv_mr*>(o.region->handle)->lkey : send_mr_->lkey;
      if (!o.region) {
        std::memcpy(bounce(send.fifo, o.slot), from, n);
        from = bounce(send.fifo, o.slot);
        o.piece_busy = true;
      }
      if (!post_write(from, n, lkey, o.window.addr + o.written, o.window.rkey, rendezvous_imm(kLanded, o.slot),
                      work(last ? kLandedWr : kPieceWr, o.slot), /*plain=*/!last))
        return false;
      o.written += n, progress = true;
    }
    return true;
  }
  // A window of the outgoing rendezvous is written: the slot is sent once its payload is.
  void window_written() {
    Outgoing& o = out_;
    o.piece_busy = false, o.window_done = true;
    if (o.window.offset + o.window.len < o.bytes) return;  // the peer asks for the next window
    if (o.region) dev_->registrations().release(o.region);
    sent_[o.slot % slots_] = true;
    o = Outgoing{};
  }

  // The receiving end: the rendezvous at the head of the receive FIFO waits for the rank to
  // post its buffer, which is registered and offered to the peer (or, unregistrable, the
  // slot's bounce area window by window); the slot is published once the payload is in.
  bool land(bool& progress) {
    FifoRef in = recv.fifo;
    uint64_t tail = received_;
    while (tail < arrived_) {
      if (!rdv_in_[tail % slots_]) {
        ++tail;
        continue;
      }
      Incoming& r = in_;
      const uint64_t bytes = in.rendezvous_size(tail);
      if (!r.held) {
        char* dst = hold_landing(tail, bytes);
        if (!dst) {
          if (failed) return false;
          break;
        }
        r = Incoming{true, dst, bytes};
        r.region = register_buffer(dst, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!offer_window(tail)) return false;
        progress = true;
      }
      if (!landed_) break;
      landed_ = false, progress = true;
      if (!r.region) {
        if (!landing.posted(tail))
          return fail(
              detail::cat("a rendezvous receive from ", peer_name(), " was withdrawn mid-message (the call failed)"));
        std::memcpy(r.dst + r.offset, bounce(in, tail), r.window);
      }
      r.offset += r.window;
      if (r.offset < r.bytes) {
        if (!offer_window(tail)) return false;
        break;
      }
      let_go_incoming();
      rdv_in_[tail % slots_] = false;
      in.set_size(tail, bytes | kRendezvous);
      ++tail;
    }
    if (tail > received_) in.publish_tail(received_ = tail), progress = true;
    return true;
  }
  // Tells the peer where the next window of the incoming rendezvous goes.
  bool offer_window(uint64_t slot) {
    Incoming& r = in_;
    RendezvousWindow w;
    w.offset = r.offset;
    if (r.region) {
      w.addr = reinterpret_cast<uint64_t>(r.dst + r.offset), w.len = r.bytes - r.offset;
      w.rkey = static_cast<ibv_mr*>(r.region->handle)->rkey;
    } else {
      const char* b = bounce(recv.fifo, slot);
      w.addr = reinterpret_cast<uint64_t>(b);
      w.len = std::min(bounce_bytes(), r.bytes - r.offset);
      w.rkey = recv_mr_->rkey;
    }
    r.window = w.len;
    return post_write(&w, sizeof w, 0, remote_.box, remote_.box_rkey, rendezvous_imm(kReady, slot),
                      work(kReadyWr, slot), /*plain=*/false, /*inline_data=*/true);
  }
  // Lets go of the incoming rendezvous's buffer: its payload is in, or the link is done.
  void let_go_incoming() {
    if (in_.region) dev_->registrations().release(in_.region);
    if (in_.held) landing.release();
    in_ = Incoming{};
  }
  // The link failed or goes: lets go of both rendezvous' buffers.
  void let_go() {
    let_go_incoming();
    if (out_.region) dev_->registrations().release(out_.region);
    out_ = Outgoing{};
  }

  // Takes completions off the CQ: -1 after a failure, else how many.
  int poll_completions() {
    ibv_wc wc[16];
    int total = 0;
    for (;;) {
      const int n = ibv_poll_cq(cq_, 16, wc);
      if (n < 0)
        return fail(detail::cat("polling completions for ", peer_name(), " on ", dev_->describe(), " failed")), -1;
      for (int i = 0; i < n; ++i)
        if (!completed(wc[i])) return -1;
      total += n;
      if (n < 16) return total;
    }
  }
  bool completed(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS)
      return fail(detail::cat(wc.opcode & IBV_WC_RECV ? "receiving from " : "RDMA write to ", peer_name(), " on ",
                              dev_->describe(), " failed: ", ibv_wc_status_str(wc.status),
                              " (the peer died or the link is down)"));
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
      switch (static_cast<WorkKind>(wc.wr_id & 15)) {
        case kDataWr: sent_[(wc.wr_id >> 4) % slots_] = true; break;
        case kCreditWr: credit_in_flight_ = false; break;
        case kPieceWr: out_.piece_busy = false; break;
        case kLandedWr: window_written(); break;
        default: break;
      }
      return true;
    }
    const uint32_t imm = ntohl(wc.imm_data);
    FifoRef in = recv.fifo;
    if (!(imm >> 31)) {  // a data slot
      if (imm > in.slot_bytes())
        return fail(detail::cat(peer_name(), " wrote a ", imm, "-byte slot into ", in.slot_bytes(), "-byte slots"));
      in.set_size(arrived_++, imm);
    } else if ((imm >> 30) == 2) {  // the peer's consumed count, which only grows, by at most `slots`
      const uint64_t low = imm & kLow30;
      peer_consumed_ += (low - (peer_consumed_ & kLow30)) & kLow30;
    } else if (const uint32_t m = (imm >> 28) & 3; m == kHeader) {
      rdv_in_[arrived_++ % slots_] = true;
    } else if (m == kReady) {
      std::atomic_thread_fence(std::memory_order_acquire);  // the write landed before its completion
      window_ = box_;
      ready_ = true, ready_index_ = imm & kIndexBits;
    } else if (m == kLanded) {
      landed_ = true;
    }
    if (!post_recv().ok()) return fail(detail::cat("re-posting a receive for ", peer_name(), " failed"));
    return true;
  }
  bool drain_events() {
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    unsigned got = 0;
    while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) ++got;
    if (got) ibv_ack_cq_events(cq_, got);
    return got > 0;
  }

  std::shared_ptr<VerbsDevice> dev_;
  uint32_t slots_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* send_mr_ = nullptr;
  ibv_mr* recv_mr_ = nullptr;
  uint32_t psn_ = 0x1234;
  VerbsEndpoint remote_;
  uint64_t next_send_ = 0, arrived_ = 0, received_ = 0;
  uint64_t peer_consumed_ = 0, credit_sent_ = 0;
  bool credit_in_flight_ = false;
  std::vector<bool> sent_;    // per send slot: written (head moves over these, in order)
  std::vector<bool> rdv_in_;  // per receive slot: a rendezvous header waiting for its payload
  Outgoing out_;
  Incoming in_;
  alignas(64) RendezvousWindow box_;  // the peer writes the window it wants here (RDMA)
  RendezvousWindow window_;           // ... copied out when its message came
  bool ready_ = false, landed_ = false;
  bool armed_ = false;       // the completion channel is armed (prepare_to_sleep)
  uint32_t max_inline_ = 0;  // the most bytes a write may carry inline on this queue pair
  uint64_t ready_index_ = 0;
};

DCOMM_NAMESPACE_END
