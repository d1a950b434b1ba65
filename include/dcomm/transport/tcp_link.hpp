// The TCP wire of a proxied link (transport/proxy.hpp moves it): each slot is striped over
// the link's sockets, each socket carrying a slice of every slot prefixed with the slot's
// byte count and stamp. Sockets never block: pump() moves what the kernel takes and gives,
// and asks the proxy to poll for the rest.
//
// A rendezvous slot (transport/fifo.hpp; its byte count carries kRendezvous) is sent from the
// sender's buffer, and each socket reads its slice straight into the buffer the receiving
// rank posted (Landing); a socket whose next slice has nowhere to go yet waits, and TCP's
// own flow control holds the sender back meanwhile.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/proxy.hpp"

DCOMM_NAMESPACE_BEGIN

// One TCP peer: the sockets between the FIFOs.
class TcpLink final : public ProxyLink {
 public:
  // What opens each stripe's slice of a slot: the slot's byte count and stamp.
  struct SliceHeader {
    uint64_t total = 0;
    SlotStamp stamp;
  };
  static constexpr size_t kHeaderBytes = sizeof(SliceHeader);
  struct Stripe {
    Socket sock;
    uint64_t send_slot = 0;  // slot this socket is sending its slice of
    size_t send_off = 0;     // bytes of (header + slice) sent
    SliceHeader send_hdr;
    uint64_t recv_slot = 0;
    size_t recv_off = 0;
    SliceHeader recv_hdr;  // the slot's byte count and stamp, once in
    bool holding = false;  // reading a rendezvous slice into the rank's buffer (Landing::hold)
    bool eof = false;
    bool want_out = false, want_in = false;
  };
  TcpLink(int peer_rank, std::vector<Socket> socks, const Config& c) : ProxyLink(peer_rank, c) {
    for (auto& s : socks) {
      Stripe st;
      st.sock = std::move(s);
      stripes.push_back(std::move(st));
    }
  }
  const char* kind() const override { return "tcp"; }
  bool lands_payloads() const override { return true; }
  bool pump() override;
  // One stripe's half of pump(): false when the link failed; `progress` set when bytes moved.
  bool pump_send(size_t k, FifoRef& out, uint64_t tail, bool& progress);
  bool pump_recv(size_t k, FifoRef& in, uint64_t room_end, bool& progress);
  bool prepare_to_sleep(std::vector<pollfd>& fds) override {
    for (auto& st : stripes) {
      short ev = static_cast<short>((st.want_in && !st.eof ? POLLIN : 0) | (st.want_out ? POLLOUT : 0));
      if (ev && st.sock.valid()) fds.push_back({st.sock.fd(), ev, 0});
    }
    return true;
  }
  void shutdown() override {
    for (auto& st : stripes)
      if (st.sock.valid()) ::shutdown(st.sock.fd(), SHUT_WR);
  }

  // A socket call failed: true when it would have blocked (`want` asks the proxy to poll for
  // it), else the link fails naming what it did.
  bool would_block(bool& want, const char* doing) {
    if (errno == EAGAIN || errno == EINTR) return want = true;
    return fail(detail::cat(doing, peer_name(), " failed: ", std::strerror(errno)));
  }

  // The slice of a slot of `total` bytes that stripe k carries.
  std::pair<size_t, size_t> slice(size_t k, uint64_t total) const {
    size_t n = stripes.size();
    size_t part = ((total + n - 1) / n + 63) & ~size_t{63};
    size_t begin = std::min<size_t>(k * part, total);
    return {begin, std::min<size_t>(begin + part, total)};
  }
  // Where stripe `st` reads the payload of its current slot of `total` bytes (a rendezvous:
  // where the rank posted it), or null while it has nowhere to go yet; a posting withdrawn
  // mid-slice fails the link (its stream is broken).
  char* payload_base(Stripe& st, uint64_t total) {
    if (!(st.recv_hdr.total & kRendezvous)) return recv.fifo.payload(st.recv_slot, total);
    if (st.holding) {
      if (landing.posted(st.recv_slot)) return landing.dst;
      fail(detail::cat("a rendezvous receive from ", peer_name(), " was withdrawn mid-message (the call failed)"));
      return nullptr;
    }
    char* dst = hold_landing(st.recv_slot, total);
    st.holding = dst != nullptr;
    return dst;
  }
  // Every hold on the rank's buffer let go (the slices are in, or the link failed).
  void release(Stripe& st) {
    if (st.holding) st.holding = false, landing.release();
  }
  std::vector<Stripe> stripes;
};

// Stripe k sends its slice of each committed slot, header first, until the socket would block.
inline bool TcpLink::pump_send(size_t k, FifoRef& out, uint64_t tail, bool& progress) {
  auto& st = stripes[k];
  st.want_out = false;
  while (st.send_slot < tail) {
    if (st.send_off == 0)
      st.send_hdr = {out.size(st.send_slot) | (out.rendezvous(st.send_slot) ? kRendezvous : 0),
                     out.stamp(st.send_slot)};
    const uint64_t total = st.send_hdr.total & ~kRendezvous;
    auto [b, e] = slice(k, total);
    size_t want = kHeaderBytes + (e - b);
    iovec iov[2];
    int n_iov = 0;
    if (st.send_off < kHeaderBytes)
      iov[n_iov++] = {reinterpret_cast<char*>(&st.send_hdr) + st.send_off, kHeaderBytes - st.send_off};
    size_t data_off = st.send_off < kHeaderBytes ? 0 : st.send_off - kHeaderBytes;
    if (e - b > data_off)
      iov[n_iov++] = {const_cast<char*>(out.source(st.send_slot, total)) + b + data_off, e - b - data_off};
    // sendmsg with MSG_NOSIGNAL: a peer that died must be an error here, not a SIGPIPE.
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n_iov);
    ssize_t n = want > st.send_off ? ::sendmsg(st.sock.fd(), &msg, MSG_NOSIGNAL) : 0;
    if (n < 0) return would_block(st.want_out, "sending to ");
    st.send_off += static_cast<size_t>(n);
    progress |= n > 0;
    if (st.send_off == want) st.send_slot++, st.send_off = 0, progress = true;
  }
  return true;
}

// Stripe k reads its slice of each slot there is room for, header first, until the socket
// would block, the peer closes, or a rendezvous has nowhere to go yet.
inline bool TcpLink::pump_recv(size_t k, FifoRef& in, uint64_t room_end, bool& progress) {
  auto& st = stripes[k];
  st.want_in = false;
  while (!st.eof && st.recv_slot < room_end) {
    char* dst;
    size_t left;
    if (st.recv_off < kHeaderBytes) {
      dst = reinterpret_cast<char*>(&st.recv_hdr) + st.recv_off;
      left = kHeaderBytes - st.recv_off;
    } else {
      const uint64_t total = st.recv_hdr.total & ~kRendezvous;
      auto [b, e] = slice(k, total);
      char* base = e > b ? payload_base(st, total) : nullptr;
      if (failed) return false;
      if (!base && e > b) break;  // the rank has not said where this rendezvous goes yet
      dst = base + b + (st.recv_off - kHeaderBytes);
      left = (e - b) - (st.recv_off - kHeaderBytes);
    }
    ssize_t n = left ? ::recv(st.sock.fd(), dst, left, 0) : 0;
    if (n == 0 && left) {
      st.eof = true;
      if (st.recv_off != 0) return fail(detail::cat(peer_name(), " closed its connection mid-message"));
      break;
    }
    if (n < 0) return would_block(st.want_in, "receiving from ");
    st.recv_off += static_cast<size_t>(n);
    progress |= n > 0;
    if (st.recv_off < kHeaderBytes) continue;
    const uint64_t total = st.recv_hdr.total & ~kRendezvous;
    if (total > in.slot_bytes() && !(st.recv_hdr.total & kRendezvous))
      return fail(detail::cat(peer_name(), " sent a ", total, "-byte slot; this rank's slots hold ", in.slot_bytes(),
                              " (do all ranks set the same DCOMM_SLOT_BYTES?)"));
    auto [b, e] = slice(k, total);
    if (st.recv_off == kHeaderBytes + (e - b)) {
      release(st);
      in.set_size(st.recv_slot, st.recv_hdr.total);
      if (k == 0) in.set_stamp(st.recv_slot, st.recv_hdr.stamp);
      st.recv_slot++, st.recv_off = 0, progress = true;
    }
  }
  return true;
}

// Moves whatever can move on the sockets without blocking; true if anything moved.
inline bool TcpLink::pump() {
  // A link that fails lets go of the rank's buffer: nothing is read into it after.
  struct ReleaseOnFailure {
    TcpLink* link;
    ~ReleaseOnFailure() {
      if (link->failed)
        for (auto& st : link->stripes) link->release(st);
    }
  } on_failure{this};
  bool progress = false;
  FifoRef out = send.fifo, in = recv.fifo;
  const uint64_t tail = out.tail(), room_end = in.head() + in.slots();
  uint64_t sent_min = UINT64_MAX, recv_min = UINT64_MAX;
  for (size_t k = 0; k < stripes.size(); ++k) {
    if (!pump_send(k, out, tail, progress) || !pump_recv(k, in, room_end, progress)) return false;
    sent_min = std::min(sent_min, stripes[k].send_slot);
    recv_min = std::min(recv_min, stripes[k].recv_slot);
  }
  if (sent_min != UINT64_MAX && sent_min > out.head(std::memory_order_relaxed)) out.publish_head(sent_min);
  if (recv_min != UINT64_MAX && recv_min > in.tail(std::memory_order_relaxed)) in.publish_tail(recv_min);
  bool all_eof = !stripes.empty();
  for (auto& st : stripes) all_eof &= st.eof;
  if (all_eof && !in.producer_closed()) in.close_producer();
  return progress;
}

DCOMM_NAMESPACE_END
