// ProxyLink: one peer whose slots the proxy thread (transport/proxy.hpp) moves between local
// FIFOs and a wire: TCP sockets (transport/tcp_link.hpp), a UCX endpoint (transport/ucx.hpp) or
// an RDMA queue pair (transport/verbs.hpp). The wire's hooks are virtual; the locking between
// the proxy and a rank that moves the wire itself, and the failure rules, are here.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

// One peer moved by the proxy thread: local FIFOs at both ends and a wire between them.
class ProxyLink {
 public:
  ProxyLink(int peer_rank, const Config& c) : peer(peer_rank), send(c), recv(c) {}
  virtual ~ProxyLink() = default;
  virtual const char* kind() const = 0;
  // Moves whatever can move without blocking; true if anything moved. A broken wire calls fail().
  virtual bool pump() = 0;
  // Before the proxy sleeps: adds what to wait on to `fds`; false (must not sleep): events pending.
  virtual bool prepare_to_sleep(std::vector<pollfd>& /*fds*/) { return true; }
  // The longest the proxy may sleep with this link (a wire with no wake-up event); -1: no bound.
  virtual int max_sleep_ms() const { return -1; }
  // The proxy is stopping: flush and close the wire (bounded).
  virtual void shutdown() {}
  // Whether the wire closes before this rank says goodbye, and then answers the peer's wire
  // (linger()) until every peer has said goodbye: UCX, whose close flushes, which needs the
  // peer's worker to answer.
  virtual bool closes_before_bye() const { return false; }
  virtual void linger() {}
  // Whether the wire reads slots sent by reference from the rank's memory (verbs: registered only).
  virtual bool takes_references() const { return true; }
  // Whether the wire lands rendezvous payloads where the rank posts them (`landing`).
  virtual bool lands_payloads() const { return false; }
  // Whether a waiting rank may move the wire itself (verbs: its queue pair is the link's own).
  virtual bool rank_pumps() const { return false; }

  // pump(), by whichever thread gets the link first (the proxy, or a waiting rank where
  // rank_pumps()); false when another thread has it now. A quiesced link no longer moves.
  bool try_pump(bool* progress) {
    *progress = false;
    if (pumping_.exchange(true, std::memory_order_acquire)) return false;
    *progress = !failed && !quiesced.load(std::memory_order_relaxed) && pump();
    pumping_.store(false, std::memory_order_release);
    return true;
  }
  // prepare_to_sleep(), likewise: false (do not sleep) when another thread has the link.
  bool try_prepare_to_sleep(std::vector<pollfd>& fds) {
    if (pumping_.exchange(true, std::memory_order_acquire)) return false;
    const bool ok = failed || quiesced.load(std::memory_order_relaxed) || prepare_to_sleep(fds);
    pumping_.store(false, std::memory_order_release);
    return ok;
  }

  bool drained() const { return failed || send.fifo.head() == send.fifo.tail(); }
  // Fails the link: closes its FIFOs (waiters see it) and aborts the communicator, naming the peer.
  // Once this rank is shutting down, a wire the peer closes first is no failure.
  bool fail(const std::string& why) {
    failed = true;
    recv.fifo.close_producer();
    send.fifo.close_consumer();
    if (stopping) {
      DCOMM_LOG(kInfo, kSubsysTransport, rank, "while shutting down: ", why);
      return false;
    }
    DCOMM_LOG(kWarn, kSubsysTransport, rank, why);
    if (read_controls) read_controls();  // a peer's abort that explains the broken wire comes first
    if (abort) abort->abort(make_error(ErrorCode::kPeerFailure, why));
    return false;
  }
  std::string peer_name() const { return info ? info->describe() : detail::cat("rank ", peer); }
  // The rank's buffer for rendezvous slot `index`, whose header says `bytes`, held until
  // landing.release(); null while none is posted, or after failing the link when the posted
  // receive is of another size.
  char* hold_landing(uint64_t index, uint64_t bytes) {
    char* dst = landing.hold(index, bytes);
    if (!dst || landing.bytes == bytes) return dst;
    landing.release();
    fail(detail::cat(peer_name(), " sent a message of ", bytes, " bytes where this rank receives ", landing.bytes));
    return nullptr;
  }

  // A call failed: the link stops for good, so no wire reads the caller's memory after (bounded).
  void quiesce() {
    quiesced.store(true);
    for (Deadline d(std::chrono::milliseconds(2000)); pumping_.load() && !d.expired();) std::this_thread::yield();
  }

  int peer;
  HeapFifo send;    // this rank produces; the proxy consumes and puts it on the wire
  HeapFifo recv;    // the proxy produces from the wire; this rank consumes
  Landing landing;  // the receive the rank is waiting for, when it is a rendezvous
  bool failed = false;
  bool stopping = false;              // set by the proxy when this rank shuts down
  std::atomic<bool> quiesced{false};  // see quiesce()
  // Set by Proxy::add_link.
  int rank = -1;
  const PeerInfo* info = nullptr;
  std::shared_ptr<AbortState> abort;
  std::function<void()> read_controls;  // in the proxy thread: reads the peers' control sockets

 private:
  std::atomic<bool> pumping_{false};  // a thread is in pump() or prepare_to_sleep()
};

DCOMM_NAMESPACE_END
