// One-sided puts and signals over TCP, for OneSided (comm/one_sided.hpp) where this process
// cannot reach a peer's memory itself: a peer on another host, or one the communicator talks
// to over a network transport (DCOMM_TRANSPORT=tcp, ucx, verbs).
//
// One socket to each such peer (authenticated like the mesh's), and one thread per rank that
// applies what arrives: a record's data is received straight into the window it names (no
// staging copy), then its signal, if any, is counted with release order. Records from one
// peer are applied in the order it sent them, so a signal follows the puts before it, as NCCL
// orders them. The sender's put returns once the kernel holds its data (the source may be
// reused); the target's rank thread takes no part.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"

DCOMM_NAMESPACE_BEGIN

struct PutRecord {
  static constexpr uint32_t kMagic = 0x64507574;  // "dPut"
  uint32_t magic = kMagic;
  int32_t window = -1;  // -1: a signal alone
  uint64_t offset = 0;
  uint64_t bytes = 0;
  int32_t signal = -1;  // -1: no signal
  int32_t context = 0;
};

class PutWire {
 public:
  // Where record `r` from rank `from` lands in this rank's memory, or why it cannot.
  using Locate = std::function<Result<char*>(int from, const PutRecord& r)>;
  // Counts the signal of a record from `from` (after its data, if any, has landed).
  using Count = std::function<Status(int from, int signal, int context)>;
  // A record that could not be applied: the first one is kept for the target's next wait.
  using Fail = std::function<void(Status)>;

  // sockets: by peer rank, invalid where the peer is reached another way; names: by peer
  // rank, for messages. timeout bounds the receipt of one record once its header began.
  PutWire(int rank, std::vector<Socket> sockets, std::vector<std::string> names, std::chrono::milliseconds timeout,
          Locate locate, Count count, Fail fail)
      : rank_(rank),
        sockets_(std::move(sockets)),
        names_(std::move(names)),
        timeout_(timeout),
        locate_(std::move(locate)),
        count_(std::move(count)),
        fail_(std::move(fail)),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~PutWire() {
    stop_.store(true);
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {}
    thread_.join();
    ::close(wake_fd_);
  }
  PutWire(const PutWire&) = delete;
  PutWire& operator=(const PutWire&) = delete;

  bool reaches(int peer) const { return sockets_[static_cast<size_t>(peer)].valid(); }

  // Sends record `r` and its `r.bytes` of data from `data`; returns once the kernel holds them.
  Status send(int peer, const PutRecord& r, const void* data, const Deadline& deadline) {
    const int fd = sockets_[static_cast<size_t>(peer)].fd();
    DCOMM_RETURN_IF_ERROR(send_all(fd, &r, sizeof r, deadline));
    return r.bytes ? send_all(fd, data, r.bytes, deadline) : Status{};
  }

 private:
  void serve() {
    std::vector<pollfd> fds;
    std::vector<int> peer_of;
    while (!stop_.load()) {
      fds.assign(1, {wake_fd_, POLLIN, 0});
      peer_of.assign(1, -1);
      for (size_t p = 0; p < sockets_.size(); ++p)
        if (sockets_[p].valid() && !closed_[p])
          fds.push_back({sockets_[p].fd(), POLLIN, 0}), peer_of.push_back(static_cast<int>(p));
      if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
      for (size_t i = 1; i < fds.size() && !stop_.load(); ++i)
        if (fds[i].revents) serve_one(peer_of[i]);
    }
  }

  // One record from `peer`, whose socket is readable.
  void serve_one(int peer) {
    const int fd = sockets_[static_cast<size_t>(peer)].fd();
    char probe;
    const ssize_t n = ::recv(fd, &probe, 1, MSG_PEEK);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      // The peer destroyed its one-sided state (or died: its proxy reports that).
      closed_[static_cast<size_t>(peer)] = true;
      return;
    }
    if (n < 0) return;
    Deadline deadline(timeout_);
    PutRecord r;
    Status s = read_exact(fd, &r, sizeof r, deadline);
    if (s.ok() && r.magic != PutRecord::kMagic) s = make_error(ErrorCode::kInternal, "a malformed record");
    if (!s.ok()) {
      closed_[static_cast<size_t>(peer)] = true;  // the stream is out of step: nothing more from it is trusted
      return fail(peer, s);
    }
    if (r.bytes > 0) {
      // A record that cannot land is read past, and its signal not counted: the wait for it
      // fails with the reason instead.
      auto at = locate_(peer, r);
      s = at.ok() ? read_exact(fd, *at, r.bytes, deadline) : drain(fd, r.bytes, deadline);
      if (!s.ok()) closed_[static_cast<size_t>(peer)] = true;
      if (!s.ok() || !at.ok()) return fail(peer, s.ok() ? at.status() : s);
    }
    if (r.signal >= 0)
      if (Status c = count_(peer, r.signal, r.context); !c.ok()) fail(peer, c);
  }

  void fail(int peer, const Status& s) {
    Status named =
        s.with_context(detail::cat("one-sided record from ", names_[static_cast<size_t>(peer)], " to rank ", rank_));
    DCOMM_LOG(kWarn, kSubsysTransport, rank_, named.message());
    fail_(named);
  }

  // recv_all's loop, but a stop request ends it too.
  Status read_exact(int fd, void* data, size_t bytes, const Deadline& deadline) {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n = ::recv(fd, p, bytes, 0);
      if (n > 0) {
        p += n, bytes -= static_cast<size_t>(n);
        continue;
      }
      if (n == 0) return make_error(ErrorCode::kPeerFailure, "connection closed in the middle of a record");
      if (errno != EAGAIN && errno != EINTR) return errno_status("recv");
      if (stop_.load()) return make_error(ErrorCode::kAborted, "stopped in the middle of a record");
      if (deadline.expired())
        return make_error(ErrorCode::kTimeout, "the rest of a record did not come within ", timeout_.count(), " ms");
      pollfd pf{fd, POLLIN, 0};
      ::poll(&pf, 1, 100);
    }
    return {};
  }
  Status drain(int fd, size_t bytes, const Deadline& deadline) {
    char sink[65536];
    while (bytes > 0) {
      const size_t n = std::min(bytes, sizeof sink);
      DCOMM_RETURN_IF_ERROR(read_exact(fd, sink, n, deadline));
      bytes -= n;
    }
    return {};
  }

  int rank_;
  std::vector<Socket> sockets_;
  std::vector<std::string> names_;
  std::chrono::milliseconds timeout_;
  Locate locate_;
  Count count_;
  Fail fail_;
  int wake_fd_;
  std::vector<bool> closed_ = std::vector<bool>(sockets_.size());  // the server's: peers that left
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

DCOMM_NAMESPACE_END
