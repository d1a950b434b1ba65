// An RDMA device opened for the verbs transport (transport/verbs.hpp): the device, port and
// GID, a protection domain with its registration cache (transport/registration.hpp), and what
// the two ends of a link swap at start-up.
//
// The device is the one DCOMM_IB_HCA names ("mlx5_0" or "mlx5_0:1"), else by topology the
// first with an active port on this rank's NUMA node, else any with an active port;
// DCOMM_IB_GID_INDEX picks the GID (default: the first RoCE v2 IPv4 GID, else 0).
// DCOMM_IB_REG_CACHE and DCOMM_IB_REG_CACHE_ENTRIES set the registration cache.
// Build: CMake target dcomm::verbs (defines DCOMM_HAS_VERBS, links libibverbs).
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/topo/order.hpp"
#include "dcomm/transport/registration.hpp"

DCOMM_NAMESPACE_BEGIN

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
    // DCOMM_IB_REG_CACHE=auto: user buffers stay registered, checked at each use, where this
    // process can read its page frames; off (or where it cannot): registered per transfer.
    const std::string mode = env_or("DCOMM_IB_REG_CACHE", "auto");
    if (mode != "auto" && mode != "off") return invalid_argument("DCOMM_IB_REG_CACHE='", mode, "' is not auto or off");
    auto entries = env_size("DCOMM_IB_REG_CACHE_ENTRIES", 64, 0, 1 << 20);
    if (!entries.ok()) return entries.status();
    // DCOMM_IB_TIMEOUT: the queue pairs' ack timeout, 4.096 us x 2^value a try (as NCCL_IB_TIMEOUT).
    auto timeout = env_size("DCOMM_IB_TIMEOUT", dev->ack_timeout_, 1, 31);
    if (!timeout.ok()) return timeout.status();
    dev->ack_timeout_ = static_cast<uint8_t>(*timeout);
    ibv_pd* pd = dev->pd_;
    dev->cache_ = std::make_unique<RegistrationCache>(
        [pd](void* addr, size_t bytes, int access, MemoryKind kind) -> void* {
          // Device memory: ibv_reg_dmabuf_mr with the buffer's dmabuf descriptor, not built yet.
          if (kind == MemoryKind::kDevice) return errno = EOPNOTSUPP, nullptr;
          return ibv_reg_mr(pd, addr, bytes, access);
        },
        [](void* mr) { ibv_dereg_mr(static_cast<ibv_mr*>(mr)); }, static_cast<size_t>(*entries),
        mode == "auto" && PageIdentity::available());
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
  uint8_t ack_timeout() const { return ack_timeout_; }
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
  uint8_t ack_timeout_ = 14;  // DCOMM_IB_TIMEOUT's default: 67 ms a try
  std::string name_;
  std::unique_ptr<RegistrationCache> cache_;
};

// What a peer needs to reach this end of a link, swapped through the store as text.
struct VerbsEndpoint {
  uint32_t qpn = 0, psn = 0, rkey = 0;
  uint16_t lid = 0;
  uint64_t fifo = 0;                   // the receive FIFO's address
  uint64_t slot_bytes = 0, slots = 0;  // its layout, which the writer must share
  uint64_t box = 0;                    // where the peer says where a rendezvous goes
  uint32_t box_rkey = 0;
  ibv_gid gid{};

  std::string encode() const {
    return detail::cat(qpn, " ", psn, " ", rkey, " ", lid, " ", fifo, " ", slot_bytes, " ", slots, " ", box, " ",
                       box_rkey, " ", detail::to_hex(gid.raw, sizeof gid.raw));
  }
  static Result<VerbsEndpoint> decode(const std::string& text) {
    VerbsEndpoint e;
    unsigned long long fifo = 0, slot_bytes = 0, slots = 0, box = 0;
    unsigned lid = 0;
    char g[256] = {};
    if (std::sscanf(text.c_str(), "%u %u %u %u %llu %llu %llu %llu %u %255s", &e.qpn, &e.psn, &e.rkey, &lid, &fifo,
                    &slot_bytes, &slots, &box, &e.box_rkey, g) != 10)
      return make_error(ErrorCode::kInternal, "unreadable verbs endpoint '", text, "'");
    e.lid = static_cast<uint16_t>(lid), e.fifo = fifo, e.slot_bytes = slot_bytes, e.slots = slots, e.box = box;
    const auto raw = detail::from_hex(g);
    if (!raw || raw->size() != sizeof e.gid.raw)
      return make_error(ErrorCode::kInternal, "unreadable GID in verbs endpoint '", text, "'");
    std::memcpy(e.gid.raw, raw->data(), raw->size());
    return e;
  }
};

// Where the receiving end of a rendezvous has the sender write bytes [offset, offset + len) of
// the payload: at addr under rkey (the receiver's buffer, or its bounce area).
struct RendezvousWindow {
  uint64_t addr = 0, offset = 0, len = 0;
  uint32_t rkey = 0, unused = 0;
};

DCOMM_NAMESPACE_END
