// The RDMA verbs transport (libibverbs, rdma-core): InfiniBand, RoCE, Soft-RoCE (rdma_rxe).
//
// Each link is a reliable-connected queue pair to the peer. The proxy thread
// (transport/proxy.hpp) moves slots: a committed slot of the local send FIFO goes out as one
// RDMA WRITE WITH IMMEDIATE straight into the same slot of the peer's receive FIFO (both
// registered), the immediate carrying the byte count; the peer's receive completion (one
// pre-posted receive per slot, completions in order on an RC queue pair) publishes the slot.
//
// Flow control: the sender writes slot k only when the peer has consumed slot k - slots. The
// receiving proxy tells it how far its consumer got with a credit message (a WRITE WITH
// IMMEDIATE without data, the immediate's top bit set, the low 31 bits of the consumed count);
// one credit message is in flight at a time, so the receive queue (slots + 2 entries) never
// runs dry, and no slot is overwritten before its consumer released it.
//
// Failures: a completion with an error status (the peer died, the link broke: retries
// exhausted) fails the link with an error naming the peer, the device and port, and the
// status. The device is the one DCOMM_IB_HCA names ("mlx5_0" or "mlx5_0:1"), else by topology
// the first with an active port on this rank's NUMA node, else any with an active port;
// DCOMM_IB_GID_INDEX picks the GID (default: the first RoCE v2 IPv4
// GID, else 0). A machine without RDMA devices still builds and runs everything else; asking
// for verbs there is an error that says no device was found.
//
// Registration: memory regions come from a registration cache per device (a buffer
// registered again, or any range inside one, reuses its region).
// Build: CMake target dcomm::verbs (defines DCOMM_HAS_VERBS, links libibverbs).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/topo/order.hpp"
#include "dcomm/transport/proxy.hpp"

DCOMM_NAMESPACE_BEGIN

// Memory regions by address range, on one protection domain: a range inside a registered one
// reuses it; least recently used regions are deregistered past `capacity`, except those
// registered to be kept (a link's FIFOs, which a peer writes into for as long as it lives).
class RegistrationCache {
 public:
  RegistrationCache(ibv_pd* pd, size_t capacity) : pd_(pd), capacity_(capacity) {}
  ~RegistrationCache() {
    for (auto& e : entries_) ibv_dereg_mr(e.mr);
  }
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  Result<ibv_mr*> get(void* addr, size_t bytes, int access, bool keep = false) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto a = reinterpret_cast<uintptr_t>(addr);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (a >= it->begin && a + bytes <= it->end && (it->access & access) == access) {
        entries_.splice(entries_.begin(), entries_, it);  // most recently used first
        ++hits_;
        return entries_.front().mr;
      }
    ibv_mr* mr = ibv_reg_mr(pd_, addr, bytes, access);
    if (!mr)
      return make_error(ErrorCode::kSystemError, "registering ", bytes,
                        " bytes with the RDMA device failed: ", std::strerror(errno),
                        " (is the locked-memory limit, ulimit -l, large enough?)");
    entries_.push_front({a, a + bytes, access, keep, mr});
    ++registrations_;
    size_t evictable = 0;
    for (const auto& e : entries_) evictable += e.keep ? 0 : 1;
    for (auto it = entries_.end(); evictable > capacity_ && it != entries_.begin();) {
      --it;
      if (it->keep) continue;
      ibv_dereg_mr(it->mr);
      it = entries_.erase(it);
      --evictable;
    }
    return mr;
  }
  size_t hits() const { return hits_; }
  size_t registrations() const { return registrations_; }

 private:
  struct Entry {
    uintptr_t begin, end;
    int access;
    bool keep;
    ibv_mr* mr;
  };
  ibv_pd* pd_;
  size_t capacity_;
  std::mutex mu_;
  std::list<Entry> entries_;
  size_t hits_ = 0, registrations_ = 0;
};

// An opened device, port and GID, with a protection domain and its registration cache.
class VerbsDevice {
 public:
  // DCOMM_IB_HCA / DCOMM_IB_GID_INDEX choose (see above).
  static Result<std::shared_ptr<VerbsDevice>> open() {
    const std::string want = env_or("DCOMM_IB_HCA");
    const std::string want_dev = want.substr(0, want.find(':'));
    const int want_port = want.find(':') == std::string::npos ? 0 : std::atoi(want.c_str() + want.find(':') + 1);
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) {
      if (list) ibv_free_device_list(list);
      return make_error(ErrorCode::kInvalidArgument,
                        "no RDMA device found (DCOMM_TRANSPORT=verbs): ibv_get_device_list lists none; load a driver "
                        "(mlx5_ib, or rdma_rxe for Soft-RoCE: rdma link add rxe0 type rxe netdev eth0) or use "
                        "DCOMM_TRANSPORT=tcp");
    }
    auto dev = std::shared_ptr<VerbsDevice>(new VerbsDevice);
    std::string names;
    // Without DCOMM_IB_HCA, by topology: devices on this rank's NUMA node first.
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    const int numa = numa_node_of_this_thread();
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
      return (device_numa(list[x]) == numa ? 0 : 1) < (device_numa(list[y]) == numa ? 0 : 1);
    });
    for (int i : order) {
      if (dev->ctx_) break;
      const std::string name = ibv_get_device_name(list[i]);
      names += (names.empty() ? "" : ", ") + name;
      if (!want_dev.empty() && name != want_dev) continue;
      ibv_context* ctx = ibv_open_device(list[i]);
      if (!ctx) continue;
      ibv_device_attr da{};
      ibv_query_device(ctx, &da);
      for (int port = 1; port <= da.phys_port_cnt; ++port) {
        if (want_port && port != want_port) continue;
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
          dev->ctx_ = ctx, dev->port_ = port, dev->port_attr_ = pa, dev->name_ = name;
          break;
        }
      }
      if (!dev->ctx_) ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    if (!dev->ctx_)
      return make_error(ErrorCode::kInvalidArgument, "no active RDMA port",
                        want.empty() ? "" : detail::cat(" on DCOMM_IB_HCA=", want), " (devices: ", names, ")");
    DCOMM_RETURN_IF_ERROR(dev->choose_gid());
    dev->pd_ = ibv_alloc_pd(dev->ctx_);
    if (!dev->pd_) return make_error(ErrorCode::kSystemError, "ibv_alloc_pd on ", dev->name_, " failed");
    dev->cache_ = std::make_unique<RegistrationCache>(dev->pd_, 64);
    return dev;
  }
  ~VerbsDevice() {
    cache_.reset();
    if (pd_) ibv_dealloc_pd(pd_);
    if (ctx_) ibv_close_device(ctx_);
  }
  VerbsDevice(const VerbsDevice&) = delete;
  VerbsDevice& operator=(const VerbsDevice&) = delete;

  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  int port() const { return port_; }
  const ibv_port_attr& port_attr() const { return port_attr_; }
  const ibv_gid& gid() const { return gid_; }
  int gid_index() const { return gid_index_; }
  RegistrationCache& registrations() { return *cache_; }
  std::string describe() const { return detail::cat(name_, " port ", port_, " GID index ", gid_index_); }

 private:
  VerbsDevice() = default;
  // The NUMA node the device's PCI function sits on (-1 unknown, as sysfs says for Soft-RoCE).
  static int device_numa(ibv_device* d) {
    std::ifstream f(std::string("/sys/class/infiniband/") + ibv_get_device_name(d) + "/device/numa_node");
    int node = -1;
    return f >> node ? node : -1;
  }
  Status choose_gid() {
    if (std::string g = env_or("DCOMM_IB_GID_INDEX"); !g.empty()) {
      gid_index_ = std::atoi(g.c_str());
      if (ibv_query_gid(ctx_, static_cast<uint8_t>(port_), gid_index_, &gid_) != 0)
        return invalid_argument("DCOMM_IB_GID_INDEX=", g, ": ", name_, " port ", port_, " has no such GID");
      return {};
    }
    // InfiniBand addresses by LID (GID 0 is fine); RoCE wants a RoCE v2 GID of an IPv4 address.
    for (int i = 0; i < port_attr_.gid_tbl_len && port_attr_.link_layer == IBV_LINK_LAYER_ETHERNET; ++i) {
      ibv_gid_entry e{};
      if (ibv_query_gid_ex(ctx_, static_cast<uint32_t>(port_), static_cast<uint32_t>(i), &e, 0) != 0) continue;
      const bool v4 = std::all_of(e.gid.raw, e.gid.raw + 10, [](uint8_t b) { return b == 0; }) &&
                      e.gid.raw[10] == 0xff && e.gid.raw[11] == 0xff;
      if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && v4) {
        gid_index_ = i, gid_ = e.gid;
        return {};
      }
    }
    gid_index_ = 0;
    ibv_query_gid(ctx_, static_cast<uint8_t>(port_), 0, &gid_);
    return {};
  }

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  int port_ = 0;
  ibv_port_attr port_attr_{};
  ibv_gid gid_{};
  int gid_index_ = 0;
  std::string name_;
  std::unique_ptr<RegistrationCache> cache_;
};

// What a peer needs to reach this end of a link, swapped through the store as text.
struct VerbsEndpoint {
  uint32_t qpn = 0, psn = 0, rkey = 0;
  uint16_t lid = 0;
  uint64_t fifo = 0;                   // the receive FIFO's address
  uint64_t slot_bytes = 0, slots = 0;  // its layout, which the writer must share
  ibv_gid gid{};

  std::string encode() const {
    return detail::cat(qpn, " ", psn, " ", rkey, " ", lid, " ", fifo, " ", slot_bytes, " ", slots, " ",
                       detail::to_hex(gid.raw, sizeof gid.raw));
  }
  static Result<VerbsEndpoint> decode(const std::string& text) {
    VerbsEndpoint e;
    unsigned long long fifo = 0, slot_bytes = 0, slots = 0;
    unsigned lid = 0;
    char g[256] = {};
    if (std::sscanf(text.c_str(), "%u %u %u %u %llu %llu %llu %255s", &e.qpn, &e.psn, &e.rkey, &lid, &fifo, &slot_bytes,
                    &slots, g) != 8)
      return make_error(ErrorCode::kInternal, "unreadable verbs endpoint '", text, "'");
    e.lid = static_cast<uint16_t>(lid), e.fifo = fifo, e.slot_bytes = slot_bytes, e.slots = slots;
    const auto raw = detail::from_hex(g);
    if (!raw || raw->size() != sizeof e.gid.raw)
      return make_error(ErrorCode::kInternal, "unreadable GID in verbs endpoint '", text, "'");
    std::memcpy(e.gid.raw, raw->data(), raw->size());
    return e;
  }
};

class VerbsLink final : public ProxyLink {
 public:
  static constexpr uint32_t kCreditFlag = 1u << 31;

  VerbsLink(int peer_rank, const Config& c, std::shared_ptr<VerbsDevice> dev)
      : ProxyLink(peer_rank, c), dev_(std::move(dev)), slots_(static_cast<uint32_t>(c.slots)) {}
  ~VerbsLink() override {
    if (qp_) ibv_destroy_qp(qp_);
    if (cq_) ibv_destroy_cq(cq_);
    if (channel_) ibv_destroy_comp_channel(channel_);
  }

  const char* kind() const override { return "verbs"; }
  bool takes_references() const override { return false; }  // only registered memory goes out

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
    qa.cap.max_recv_wr = slots_ + 2;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp_ = ibv_create_qp(dev_->pd(), &qa);
    if (!qp_) return sys_error("ibv_create_qp");
    auto send_mr = dev_->registrations().get(send.memory, send.bytes, IBV_ACCESS_LOCAL_WRITE, /*keep=*/true);
    if (!send_mr.ok()) return send_mr.status();
    auto recv_mr = dev_->registrations().get(recv.memory, recv.bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                                             /*keep=*/true);
    if (!recv_mr.ok()) return recv_mr.status();
    send_mr_ = *send_mr, recv_mr_ = *recv_mr;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = static_cast<uint8_t>(dev_->port());
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
      return sys_error("moving the queue pair to INIT");
    for (uint32_t i = 0; i < slots_ + 2; ++i) DCOMM_RETURN_IF_ERROR(post_recv());
    VerbsEndpoint me;
    me.qpn = qp_->qp_num, me.psn = psn_, me.rkey = recv_mr_->rkey, me.lid = dev_->port_attr().lid;
    me.fifo = reinterpret_cast<uint64_t>(recv.memory), me.gid = dev_->gid();
    me.slot_bytes = recv.fifo.slot_bytes(), me.slots = recv.fifo.slots();
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
    r.timeout = 14;   // 4.096 us x 2^14 = 67 ms per try
    r.retry_cnt = 7;  // then the peer is declared unreachable (a completion error)
    r.rnr_retry = 7;  // a receiver without a posted receive is waited for, not an error
    r.sq_psn = psn_;
    r.max_rd_atomic = 1;
    if (ibv_modify_qp(qp_, &r,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) != 0)
      return sys_error("moving the queue pair to RTS");
    return {};
  }

  bool pump() override {
    bool progress = drain_events();
    if (int n = poll_completions(); n < 0) return false;
    else progress |= n > 0;
    FifoRef out = send.fifo, in = recv.fifo;
    // Data: every committed slot the peer has room for.
    for (const uint64_t tail = out.tail(); next_send_ < tail && next_send_ < peer_consumed_ + slots_; ++next_send_) {
      // The slot's stamp and payload as one run, to the same place in the peer's FIFO.
      const uint64_t bytes = out.size(next_send_);
      const uint64_t remote =
          remote_.fifo + (reinterpret_cast<uint64_t>(in.wire(next_send_)) - reinterpret_cast<uint64_t>(recv.memory));
      if (!post_write(out.wire(next_send_), static_cast<uint32_t>(FifoRef::wire_bytes(bytes)), remote,
                      static_cast<uint32_t>(bytes), kData))
        return false;
      progress = true;
    }
    // Credit: tell the peer how far this rank's consumer got, one message at a time.
    const uint64_t consumed = in.head();
    if (!credit_in_flight_ && consumed > credit_sent_) {
      if (!post_write(nullptr, 0, 0, kCreditFlag | static_cast<uint32_t>(consumed & 0x7fffffff), kCredit)) return false;
      credit_in_flight_ = true, credit_sent_ = consumed, progress = true;
    }
    return progress;
  }

  bool prepare_to_sleep(std::vector<pollfd>& fds) override {
    if (ibv_req_notify_cq(cq_, 0) != 0) return false;
    if (poll_completions() != 0) return false;  // something came in since the last pump
    fds.push_back({channel_->fd, POLLIN, 0});
    return true;
  }

 private:
  enum WrKind : uint64_t { kData = 1, kCredit = 2 };

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
  bool post_write(const char* local, uint32_t bytes, uint64_t remote, uint32_t imm, WrKind kind) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), bytes, send_mr_->lkey};
    ibv_send_wr wr{}, *bad = nullptr;
    wr.wr_id = kind;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.sg_list = bytes ? &sge : nullptr;
    wr.num_sge = bytes ? 1 : 0;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = remote_.rkey;
    if (ibv_post_send(qp_, &wr, &bad) != 0)
      return fail(detail::cat("RDMA write to ", peer_name(), " on ", dev_->describe(),
                              ": ibv_post_send failed: ", std::strerror(errno)));
    return true;
  }
  // Takes completions off the CQ: -1 after a failure, else how many.
  int poll_completions() {
    ibv_wc wc[16];
    int total = 0;
    for (;;) {
      const int n = ibv_poll_cq(cq_, 16, wc);
      if (n < 0)
        return fail(detail::cat("polling completions for ", peer_name(), " on ", dev_->describe(), " failed")), -1;
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != IBV_WC_SUCCESS) {
          fail(detail::cat(wc[i].opcode & IBV_WC_RECV ? "receiving from " : "RDMA write to ", peer_name(), " on ",
                           dev_->describe(), " failed: ", ibv_wc_status_str(wc[i].status),
                           " (the peer died or the link is down)"));
          return -1;
        }
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          const uint32_t imm = ntohl(wc[i].imm_data);
          if (imm & kCreditFlag) {
            // The low 31 bits of the peer's consumed count; it only grows, by at most `slots`.
            const uint64_t low = imm & 0x7fffffff;
            peer_consumed_ += (low - (peer_consumed_ & 0x7fffffff)) & 0x7fffffff;
          } else {
            FifoRef in = recv.fifo;
            if (imm > in.slot_bytes())
              return fail(detail::cat(peer_name(), " wrote a ", imm, "-byte slot into ", in.slot_bytes(),
                                      "-byte slots")),
                     -1;
            in.set_size(received_, imm);
            in.publish_tail(++received_);
          }
          if (!post_recv().ok()) return fail(detail::cat("re-posting a receive for ", peer_name(), " failed")), -1;
        } else if (wc[i].wr_id == kData) {
          send.fifo.publish_head(++send_done_);  // RC completes in order
        } else if (wc[i].wr_id == kCredit) {
          credit_in_flight_ = false;
        }
      }
      total += n;
      if (n < 16) return total;
    }
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
  uint64_t next_send_ = 0, send_done_ = 0, received_ = 0;
  uint64_t peer_consumed_ = 0, credit_sent_ = 0;
  bool credit_in_flight_ = false;
};

DCOMM_NAMESPACE_END
