// The one transport interface. A transport connects this rank to one peer and hands back a
// Connection: a FIFO to produce into (towards the peer) and one to consume from (from the
// peer). Transports move bytes and know nothing about collectives; the primitives above wait
// on the FIFOs, and the algorithms above them never see a transport.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/abort.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/fifo.hpp"

DCOMM_NAMESPACE_BEGIN

// Where the rank wants the payload of one slot of its receive FIFO to land: a rendezvous
// (transport/fifo.hpp), whose wire writes the payload straight into the user's buffer. One at
// a time per link: the rank posts it for the slot it is about to take, and withdraws it when
// its call ends before the slot came (a failure), waiting until the wire no longer writes there.
// `slot` and `busy` follow Dekker's rule (both sequentially consistent): the wire raises busy,
// then checks the slot is still posted; the rank withdraws the slot, then waits while busy.
struct Landing {
  std::atomic<uint64_t> slot{0};  // the slot's index + 1; 0: none
  std::atomic<int> busy{0};       // wire streams (sockets, requests) writing into dst
  char* dst = nullptr;
  uint64_t bytes = 0;
  // Set by the wire: the rendezvous header of slot `unposted` - 1 (`unposted_bytes` long) waits
  // for a posting, so a receive that takes that slot in pieces (the ranks disagree on the
  // message) can say so instead of waiting out its deadline.
  std::atomic<uint64_t> unposted{0}, unposted_bytes{0};

  void post(uint64_t index, void* to, uint64_t n) {
    dst = static_cast<char*>(to), bytes = n;
    slot.store(index + 1);
  }
  bool posted(uint64_t index) const { return slot.load() == index + 1; }
  // The wire: the destination for slot `index` (whose header says `header_bytes`), held (busy)
  // until release(); null when none is posted (yet), or it was withdrawn.
  char* hold(uint64_t index, uint64_t header_bytes) {
    if (!posted(index)) {
      unposted_bytes.store(header_bytes);
      unposted.store(index + 1);
      return nullptr;
    }
    busy.fetch_add(1);
    if (posted(index)) return dst;
    busy.fetch_sub(1);
    return nullptr;
  }
  void release() { busy.fetch_sub(1); }
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual FifoRef send_fifo() const = 0;  // this rank produces, the peer consumes
  virtual FifoRef recv_fifo() const = 0;  // the peer produces, this rank consumes
  // Called after committing or releasing slots; a proxy-driven transport wakes its thread.
  virtual void notify() const {}
  // Called while the rank waits on the link: a wire the rank may move itself (verbs) moves.
  virtual void progress() const {}
  // True when a proxy thread on this host moves the data: a waiter should yield soon, since
  // spinning takes the CPU from the thread it waits for.
  virtual bool proxied() const { return false; }
  // True when the wire can read a slot's payload where the rank keeps it (FifoRef::commit_ref):
  // the proxied TCP and UCX links.
  virtual bool takes_references() const { return false; }
  // Where the rank posts the destination of a rendezvous slot (transport/fifo.hpp): the
  // proxied TCP and UCX links; null where the wire cannot land a payload in the user's buffer.
  virtual Landing* landing() const { return nullptr; }
  // The communicator was aborted: the wire stops for good, and writes into the rank's memory no
  // more (a landing it still holds may be let go of at once).
  virtual void stop_wire() {}
  virtual const char* kind() const = 0;
  // Staging memory this rank holds for the link: the FIFO it receives on (and, over TCP, its
  // local send FIFO too).
  virtual size_t staging_bytes() const = 0;
  // Clean shutdown: tells the peer that this side will neither produce nor consume again.
  virtual void close() {
    send_fifo().close_producer();
    recv_fifo().close_consumer();
  }
};

struct ConnectContext {
  int rank = -1;
  const PeerInfo* self = nullptr;
  const PeerInfo* peer = nullptr;
  const Config* config = nullptr;
  StoreClient* store = nullptr;
  std::string key_prefix;  // unique per communicator, for store keys and shared names
  std::shared_ptr<AbortState> abort;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Publishes what the peer needs to connect to this rank; never waits for the peer. A rank
  // prepares every link it is about to use before it connects any, so two ranks that each
  // wait on the other's half (a ring of three, say) cannot deadlock.
  virtual Status prepare(const ConnectContext& /*ctx*/) { return {}; }
  // Completes the link; may wait (with the store's deadline) for the peer's prepare.
  virtual Result<std::unique_ptr<Connection>> connect(const ConnectContext& ctx) = 0;
};

// The bytes of one FIFO between ranks of one host (shared memory, threads): DCOMM_SMALL_SLOTS
// slots, DCOMM_SLOTS data areas (transport/fifo.hpp).
inline size_t local_fifo_bytes(const Config& c) {
  return fifo_bytes(c.slot_bytes, static_cast<size_t>(c.slots), static_cast<size_t>(c.small_slots));
}

// Heap memory for a FIFO that only this process touches. `lines`: its slots in all, more
// than c.slots for a FIFO its ranks share directly (a wire's FIFOs keep one line per slot).
struct HeapFifo {
  explicit HeapFifo(const Config& c, size_t lines = 0)
      : bytes(fifo_bytes(c.slot_bytes, static_cast<size_t>(c.slots), lines)),
        memory(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) & ~size_t{4095}))),
        fifo(FifoRef::initialize(memory, c.slot_bytes, static_cast<size_t>(c.slots), lines)) {}
  ~HeapFifo() { std::free(memory); }
  HeapFifo(const HeapFifo&) = delete;
  HeapFifo& operator=(const HeapFifo&) = delete;
  size_t bytes;
  char* memory;
  FifoRef fifo;
};

DCOMM_NAMESPACE_END
