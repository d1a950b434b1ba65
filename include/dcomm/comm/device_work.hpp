// What one block of a device collective does: the work descriptors the host fills (passed by
// value as kernel parameters, so a captured CUDA graph holds them) and the per-channel bodies
// that run algo/'s ring and chain schedules over prims/device_prims.hpp. The CUDA kernels in
// comm/device_comm.cuh are one line around these; the CPU tests run the same bodies with host
// threads as ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dcomm/algo/chain.hpp"
#include "dcomm/algo/ring.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/device_prims.hpp"

DCOMM_NAMESPACE_BEGIN

// all_gather and broadcast move bytes: they run in the uint8_t kernel, counts in bytes.
DCOMM_HOST_DEVICE inline bool copy_only(OpKind k) { return k == OpKind::kAllGather || k == OpKind::kBroadcast; }

// One collective. Counts are elements of the kernel's T (bytes for copy_only() collectives).
struct DeviceCollWork {
  OpKind kind = OpKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;                     // all_reduce/broadcast/reduce: the buffer; reduce_scatter/all_gather: per rank
  int pos = 0, size = 1, root_pos = 0;  // this rank's and the root's position in the ring order
  const int* block_of = nullptr;        // position -> rank, device memory (null: identity)
  ReduceOp op = ReduceOp::kSum;
  int divide_by = 0;  // kAvg: the number of ranks
  int channels = 1;
  const DeviceConn* conns = nullptr;  // [channel][2]: from the previous position, to the next
  DeviceControl ctl;
};

// The part of `count` elements channel c of `channels` moves: 16-byte aligned boundaries.
DCOMM_HOST_DEVICE inline void channel_part(size_t count, size_t elem, int c, int channels, size_t* lo, size_t* n) {
  const size_t align = detail::kPackBytes / elem > 0 ? detail::kPackBytes / elem : 1;
  const size_t chans = static_cast<size_t>(channels);
  size_t per = (count + chans - 1) / chans;
  per = (per + align - 1) / align * align;
  size_t begin = per * static_cast<size_t>(c), end = begin + per;
  begin = begin < count ? begin : count;
  end = end < count ? end : count;
  *lo = begin;
  *n = end - begin;
}

// Channel `c` of a collective, run by one team (a CUDA block, or a host thread in the tests).
template <class Team, class T>
DCOMM_HOST_DEVICE DeviceStatus run_coll_channel(const Team& team, const DeviceCollWork& w, int c) {
  DeviceControl ctl = w.ctl;
  ctl.channel = c;
  // One rank has no connections: the schedules copy (local_copy) and touch no FIFO.
  const DeviceConn* prev = w.size > 1 ? &w.conns[2 * static_cast<ptrdiff_t>(c)] : nullptr;
  const DeviceConn* next = w.size > 1 ? &w.conns[2 * static_cast<ptrdiff_t>(c) + 1] : nullptr;
  DevicePrims<Team, T> p(team, prev, next, ctl, w.op, w.divide_by);
  size_t lo, n;
  channel_part(w.count, sizeof(T), c, w.channels, &lo, &n);
  RingBuffers b{static_cast<const char*>(w.send) + lo * sizeof(T), static_cast<char*>(w.recv) + lo * sizeof(T), n,
                w.block_of, w.count};
  // The copy-only collectives run on bytes (T = uint8_t); other instantiations leave them out.
  constexpr bool kBytes = std::is_same_v<T, uint8_t>;
  if constexpr (kBytes) {
    if (w.kind == OpKind::kAllGather) return ring_all_gather(p, w.pos, w.size, b);
    if (w.kind == OpKind::kBroadcast) return chain_broadcast(p, w.pos, w.size, w.root_pos, b);
  }
  switch (w.kind) {
    case OpKind::kAllReduce: return ring_all_reduce(p, w.pos, w.size, b);
    case OpKind::kReduceScatter: return ring_reduce_scatter(p, w.pos, w.size, b);
    case OpKind::kReduce: return chain_reduce(p, w.pos, w.size, w.root_pos, b);
    // kAllGather and kBroadcast must be launched as bytes; point-to-point and barriers are not
    // collective work (a barrier runs as an all_reduce).
    case OpKind::kAllGather:
    case OpKind::kBroadcast:
    case OpKind::kPointToPoint:
    case OpKind::kBarrier: break;
  }
  return {DeviceStatus::kBadWork};
}

// A group of sends and receives (bytes). Items to one peer in one direction form a lane and
// run in order on that lane's blocks (one per channel, each moving its part of every item);
// sends and receives are different lanes, so a pair of ranks sending to each other never
// waits on itself. A send to this rank is the copy the matching receive makes.
struct DeviceP2pItem {
  void* buf = nullptr;
  size_t bytes = 0;
  int peer = 0;
  int is_send = 0;
};
struct DeviceP2pWork {
  static constexpr int kMaxItems = 64;
  int nitems = 0;
  int nlanes = 0;
  int channels = 1;       // blocks per lane: the same on every rank (each item's split must match)
  int conn_channels = 1;  // the connection tables' channels per peer (their stride)
  int rank = 0;
  const DeviceConn* send_conns = nullptr;  // [peer][channel]
  const DeviceConn* recv_conns = nullptr;  // [peer][channel]
  DeviceControl ctl;
  DeviceP2pItem items[kMaxItems];
  int16_t lane_peer[kMaxItems];
  int8_t lane_send[kMaxItems];
};

// Adds an item and its lane; false when the group is full.
inline bool add_p2p_item(DeviceP2pWork& w, const DeviceP2pItem& item) {
  if (w.nitems == DeviceP2pWork::kMaxItems) return false;
  w.items[w.nitems++] = item;
  for (int l = 0; l < w.nlanes; ++l)
    if (w.lane_peer[l] == item.peer && w.lane_send[l] == item.is_send) return true;
  w.lane_peer[w.nlanes] = static_cast<int16_t>(item.peer);
  w.lane_send[w.nlanes] = static_cast<int8_t>(item.is_send);
  ++w.nlanes;
  return true;
}

// Block `block` of a p2p launch: lane block / channels, channel block % channels.
template <class Team>
DCOMM_HOST_DEVICE DeviceStatus run_p2p_block(const Team& team, const DeviceP2pWork& w, int block) {
  const int lane = block / w.channels, c = block % w.channels;
  if (lane >= w.nlanes || w.channels < 1) return {DeviceStatus::kBadWork};
  const int peer = w.lane_peer[lane];
  const bool is_send = w.lane_send[lane] != 0;
  DeviceControl ctl = w.ctl;
  ctl.channel = c;
  if (peer == w.rank) {  // to itself: the k-th receive copies the k-th send
    if (is_send) return {};
    int k = 0;
    for (int i = 0; i < w.nitems; ++i) {
      const DeviceP2pItem& r = w.items[i];
      if (r.peer != peer || r.is_send) continue;
      for (int j = 0, seen = 0; j < w.nitems; ++j) {
        const DeviceP2pItem& s = w.items[j];
        if (s.peer != peer || !s.is_send || seen++ != k) continue;
        size_t lo, n;
        channel_part(r.bytes < s.bytes ? r.bytes : s.bytes, 1, c, w.channels, &lo, &n);
        team_copy(team, static_cast<char*>(r.buf) + lo, nullptr, static_cast<const char*>(s.buf) + lo, n);
      }
      ++k;
    }
    team.sync();
    return {};
  }
  const size_t at = static_cast<size_t>(peer) * static_cast<size_t>(w.conn_channels) + static_cast<size_t>(c);
  const DeviceConn* conn = is_send ? &w.send_conns[at] : &w.recv_conns[at];
  DevicePrims<Team, uint8_t> p(team, is_send ? nullptr : conn, is_send ? conn : nullptr, ctl, ReduceOp::kSum, 0);
  for (int i = 0; i < w.nitems; ++i) {
    const DeviceP2pItem& it = w.items[i];
    if (it.peer != peer || (it.is_send != 0) != is_send) continue;
    size_t lo, n;
    channel_part(it.bytes, 1, c, w.channels, &lo, &n);
    char* base = static_cast<char*>(it.buf) + lo;
    DCOMM_TRY(detail::for_each_slice(
        p, n, [&](size_t off, size_t len) { return is_send ? p.send(base + off, len) : p.recv(base + off, len); }));
  }
  return {};
}

// A kernel's block: its body, and a failure none of its waits recorded (work the block cannot
// run: a bug in the launch) left for the host, so the watchdog aborts every rank with that
// reason instead of the peers timing out on a block that ended silently. The CUDA kernels
// (comm/device_comm.cuh) are these with a thread block as the team.
template <class Team>
DCOMM_HOST_DEVICE void report_block(const Team& team, const DeviceControl& ctl, int channel, DeviceStatus s) {
  if (s.code != DeviceStatus::kBadWork || team.thread() != 0) return;
  DeviceControl at = ctl;
  at.channel = channel;
  detail::record_device_error(at, s, -1, false);
}
template <class Team, class T>
DCOMM_HOST_DEVICE void coll_block(const Team& team, const DeviceCollWork& w, int c) {
  report_block(team, w.ctl, c, run_coll_channel<Team, T>(team, w, c));
}
template <class Team>
DCOMM_HOST_DEVICE void p2p_block(const Team& team, const DeviceP2pWork& w, int block) {
  report_block(team, w.ctl, w.channels > 0 ? block % w.channels : block, run_p2p_block(team, w, block));
}

// What a kernel's report means, for the host: `peer` describes the rank it names.
inline Status device_error_status(const DeviceError& e, int rank, int device, const std::string& peer) {
  const char* what = e.code == DeviceStatus::kTimeout   ? "timed out"
                     : e.code == DeviceStatus::kBadWork ? "was given work it cannot run"
                                                        : "was aborted";
  const std::string where =
      detail::cat("a kernel on rank ", rank, " (CUDA device ", device, ", channel ", e.channel, ") ");
  if (e.code == DeviceStatus::kBadWork)
    return make_error(ErrorCode::kInternal, where, what,
                      " (a bug in dcomm's launch: an unknown collective for its kernel's type, or a block past its "
                      "grid); its peers were aborted rather than left waiting");
  return make_error(e.code == DeviceStatus::kTimeout ? ErrorCode::kTimeout : ErrorCode::kAborted, where, what,
                    " waiting for ", e.waiting_for_data ? "data from " : "room at ", peer);
}

DCOMM_NAMESPACE_END
