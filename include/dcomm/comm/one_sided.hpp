// One-sided access: windows, put, signal and wait, as NCCL 2.30's ncclPutSignal / ncclSignal /
// ncclWaitSignal (dcomm's libnccl.so.2 maps them onto this).
//
// OneSided::create (collective) gives each rank a block of signal counters in mem_alloc memory:
// counter [from][ctx][sig] is written only by rank `from` (atomic adds) and read by its owner.
// register_window (collective) records every rank's buffer. Two ways to a peer's window:
// - direct, to a peer the communicator reaches over shared memory (or in this process): a put
//   copies with plain stores where the window is in mem_alloc memory (mapped here once) or with
//   cross-memory attach (one system call) otherwise, then, if asked, adds 1 to the peer's
//   counter with release order. The target takes no part: nothing of it runs.
// - over TCP (transport/put_wire.hpp), to a peer on another host or one the communicator
//   reaches over a network transport: the record goes on a socket of its own, and the
//   target's wire thread receives the data straight into its window, then counts the signal.
// Either way a waiter that sees the count also sees the data (NCCL's order: a signal follows
// the puts before it). wait() waits, under the communicator's deadline, until each counter has
// risen by the count asked since the last wait consumed it; a record sent to this rank that
// could not be applied (a window it deregistered, a bound it broke) fails the next wait.
// Calls on one OneSided come from one thread; register and destroy it on every rank alike.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/transport/cma.hpp"
#include "dcomm/transport/mem_alloc.hpp"
#include "dcomm/transport/mesh.hpp"
#include "dcomm/transport/put_wire.hpp"

DCOMM_NAMESPACE_BEGIN

class OneSided {
 public:
  static constexpr int kSignals = 64;  // signal indices per context

  struct WaitFor {
    int count;  // signals to wait for since the last wait on this counter
    int peer;
    int signal;
    int context;
  };

  // Collective over `comm`: every rank's signal block. contexts: NCCL's numRmaCtx.
  static Result<std::unique_ptr<OneSided>> create(Communicator& comm, int contexts = 1) {
    if (contexts < 1 || contexts > 64) return invalid_argument("one-sided: ", contexts, " contexts (1 to 64)");
    std::unique_ptr<OneSided> o(new OneSided(comm, contexts));
    const size_t bytes = static_cast<size_t>(comm.size()) * static_cast<size_t>(contexts) * kSignals * sizeof(uint64_t);
    auto block = mem_alloc(bytes);
    if (!block.ok()) return block.status().with_context("one-sided signals");
    o->signals_ = static_cast<std::atomic<uint64_t>*>(*block);
    o->consumed_.assign(bytes / sizeof(uint64_t), 0);
    Entry mine{reinterpret_cast<uint64_t>(*block), bytes, detail::RegionRegistry::instance().find(*block, bytes)};
    auto all = o->gather(mine);
    if (!all.ok()) return all.status().with_context("one-sided signals");
    o->signal_blocks_ = std::move(*all);
    DCOMM_RETURN_IF_ERROR(o->connect_wire().with_context("one-sided over TCP"));
    return o;
  }
  ~OneSided() {
    wire_.reset();  // its thread writes into the signals and windows
    if (signals_) mem_free(signals_).ignore();
  }
  OneSided(const OneSided&) = delete;
  OneSided& operator=(const OneSided&) = delete;

  // Collective: every rank's part of a new window (its buffer may be null when bytes is 0);
  // the window's id, the same on every rank.
  Result<int> register_window(void* buf, size_t bytes) {
    if (!buf && bytes) return invalid_argument("register_window on rank ", comm_.rank(), ": buffer is null");
    auto all = gather({reinterpret_cast<uint64_t>(buf), bytes, detail::RegionRegistry::instance().find(buf, bytes)});
    if (!all.ok()) return all.status().with_context("register_window");
    std::lock_guard<std::mutex> lock(mu_);  // the wire thread looks windows up
    windows_.push_back(std::move(*all));
    registered_.notify_all();
    return static_cast<int>(windows_.size()) - 1;
  }
  // Local: the window can no longer be reached from here (peers drop theirs likewise).
  void deregister_window(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (id >= 0 && static_cast<size_t>(id) < windows_.size()) windows_[static_cast<size_t>(id)].clear();
  }

  // Copies `bytes` from `src` into `peer`'s part of window `id` at `offset`; then, when
  // signal >= 0, signals (peer, signal, context).
  Status put(const void* src, size_t bytes, int peer, int id, size_t offset, int signal, int context) {
    DCOMM_RETURN_IF_ERROR(check_peer(peer, "put"));
    if (signal >= 0) DCOMM_RETURN_IF_ERROR(check_signal(signal, context, "put"));
    if (id < 0 || static_cast<size_t>(id) >= windows_.size() || windows_[static_cast<size_t>(id)].empty())
      return invalid_argument("put on rank ", comm_.rank(), ": window ", id, " is not registered");
    const Entry& w = windows_[static_cast<size_t>(id)][static_cast<size_t>(peer)];
    if (offset > w.bytes || bytes > w.bytes - offset)
      return invalid_argument("put on rank ", comm_.rank(), ": ", bytes, " bytes at offset ", offset, " run past rank ",
                              peer, "'s window of ", w.bytes, " bytes");
    if (!direct_[static_cast<size_t>(peer)])
      return over_wire(peer, {PutRecord::kMagic, id, offset, bytes, signal, context}, src, "put");
    if (bytes > 0) {
      const uint64_t at = w.address + offset;
      if (char* mapped = translate(peer, w, at, bytes)) std::memcpy(mapped, src, bytes);
      else
        DCOMM_RETURN_IF_ERROR(write_process_memory(comm_.peer(peer).pid, same_process(peer), at, src, bytes)
                                  .with_context(detail::cat("put to ", comm_.peer(peer).describe())));
    }
    return signal >= 0 ? add_signal(peer, signal, context) : Status{};
  }

  Status signal(int peer, int signal, int context) {
    DCOMM_RETURN_IF_ERROR(check_peer(peer, "signal"));
    DCOMM_RETURN_IF_ERROR(check_signal(signal, context, "signal"));
    if (!direct_[static_cast<size_t>(peer)])
      return over_wire(peer, {PutRecord::kMagic, -1, 0, 0, signal, context}, nullptr, "signal");
    return add_signal(peer, signal, context);
  }

  // Waits until every counter named has risen by its count since it was last consumed, then
  // consumes those counts. The deadline is the communicator's; an abort ends the wait.
  Status wait(const std::vector<WaitFor>& what) {
    for (const WaitFor& w : what) {
      if (w.peer < 0 || w.peer >= comm_.size())
        return invalid_argument("wait on rank ", comm_.rank(), ": peer ", w.peer, " is out of range");
      DCOMM_RETURN_IF_ERROR(check_signal(w.signal, w.context, "wait"));
      if (w.count < 0) return invalid_argument("wait on rank ", comm_.rank(), ": count ", w.count, " is negative");
    }
    DCOMM_RETURN_IF_ERROR(wire_failure());
    Deadline deadline(comm_.config().timeout);
    Backoff backoff(comm_.config().spin_iterations);
    for (const WaitFor& w : what) {
      const size_t i = index(w.peer, w.signal, w.context);
      const uint64_t want = consumed_[i] + static_cast<uint64_t>(w.count);
      while (signals_[i].load(std::memory_order_acquire) < want) {
        if (!backoff.pause()) continue;
        DCOMM_RETURN_IF_ERROR(wire_failure());
        if (comm_.aborted()) return make_error(ErrorCode::kAborted, "wait on rank ", comm_.rank(), ": aborted");
        if (deadline.expired())
          return make_error(ErrorCode::kTimeout, "wait on rank ", comm_.rank(), ": ", comm_.peer(w.peer).describe(),
                            " sent ", signals_[i].load() - consumed_[i], " of ", w.count, " signals (index ", w.signal,
                            ", context ", w.context, ") in ", deadline.budget().count(), " ms");
      }
      consumed_[i] = want;
      backoff.reset();
    }
    return {};
  }

  // This process's address of `peer`'s part of window `id` where loads and stores reach it (a
  // thread of this process, or mem_alloc memory, mapped here once); else null.
  void* peer_address(int peer, int id) {
    if (peer < 0 || peer >= comm_.size() || !direct_[static_cast<size_t>(peer)] || id < 0 ||
        static_cast<size_t>(id) >= windows_.size() || windows_[static_cast<size_t>(id)].empty())
      return nullptr;
    const Entry& w = windows_[static_cast<size_t>(id)][static_cast<size_t>(peer)];
    return w.bytes ? translate(peer, w, w.address, w.bytes) : nullptr;
  }
  // The size of `peer`'s part of window `id` (0 when there is none).
  size_t window_bytes(int peer, int id) const {
    if (peer < 0 || peer >= comm_.size() || id < 0 || static_cast<size_t>(id) >= windows_.size() ||
        windows_[static_cast<size_t>(id)].empty())
      return 0;
    return windows_[static_cast<size_t>(id)][static_cast<size_t>(peer)].bytes;
  }

  // The counts received so far from `peer` on (signal, context), consumed or not.
  uint64_t received(int peer, int signal, int context) const {
    return signals_[index(peer, signal, context)].load(std::memory_order_acquire);
  }

 private:
  struct Entry {
    uint64_t address = 0;
    size_t bytes = 0;
    RegionRef region;
  };

  OneSided(Communicator& comm, int contexts) : comm_(comm), contexts_(contexts) {
    remote_.resize(static_cast<size_t>(comm.size()));
  }

  size_t index(int from, int signal, int context) const {
    return (static_cast<size_t>(from) * static_cast<size_t>(contexts_) + static_cast<size_t>(context)) * kSignals +
           static_cast<size_t>(signal);
  }
  bool same_process(int peer) const { return comm_.peer(peer).process_id == comm_.peer(comm_.rank()).process_id; }

  Result<std::vector<Entry>> gather(const Entry& mine) {
    std::vector<Entry> all(static_cast<size_t>(comm_.size()));
    DCOMM_RETURN_IF_ERROR(comm_.all_gather(&mine, all.data(), sizeof(Entry), DataType::kUint8));
    return all;
  }

  Status check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= comm_.size())
      return invalid_argument(what, " on rank ", comm_.rank(), ": peer ", peer, " is out of range for ", comm_.size(),
                              " ranks");
    if (comm_.aborted()) return make_error(ErrorCode::kAborted, what, " on rank ", comm_.rank(), ": aborted earlier");
    return {};
  }
  Status check_signal(int signal, int context, const char* what) const {
    if (signal < 0 || signal >= kSignals || context < 0 || context >= contexts_)
      return invalid_argument(what, " on rank ", comm_.rank(), ": signal ", signal, " of context ", context,
                              " is out of range (", kSignals, " signals, ", contexts_, " contexts)");
    return {};
  }

  // This process's address of `peer`'s [at, at + bytes) in entry `e`, or null.
  char* translate(int peer, const Entry& e, uint64_t at, size_t bytes) {
    if (same_process(peer)) return reinterpret_cast<char*>(at);
    auto& r = remote_[static_cast<size_t>(peer)];
    if (!r) r = std::make_unique<RemoteRegions>(comm_.peer(peer).pid);
    return r->translate(e.region, at, bytes);
  }

  Status add_signal(int peer, int signal, int context) {
    const Entry& block = signal_blocks_[static_cast<size_t>(peer)];
    const uint64_t at = block.address + index(comm_.rank(), signal, context) * sizeof(uint64_t);
    char* counter = translate(peer, block, at, sizeof(uint64_t));
    if (!counter)
      return make_error(ErrorCode::kUnsupported, "signal on rank ", comm_.rank(), ": cannot map the signals of ",
                        comm_.peer(peer).describe(), " (this process may not open /proc/<pid>/fd of it)");
    reinterpret_cast<std::atomic<uint64_t>*>(counter)->fetch_add(1, std::memory_order_release);
    return {};
  }

  // The TCP sockets to the peers not reached directly, and the thread that serves them. Where
  // each rank's listens and rank 0's nonce go round with an all_gather, so every rank takes
  // part even when it needs none; the mesh code connects and authenticates them.
  Status connect_wire() {
    const int n = comm_.size(), me = comm_.rank();
    bool any = false;
    direct_.resize(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) {
      const std::string_view via = comm_.transport_to(p);
      direct_[static_cast<size_t>(p)] = via == "self" || via == "shm" || via == "inproc";
      any |= !direct_[static_cast<size_t>(p)];
    }
    struct Hello {
      char address[112];
      uint64_t nonce;
    } mine{};
    mine.nonce = detail::random_u64();
    Socket listener;
    if (any) {
      auto self = parse_address(comm_.peer(me).address);
      if (!self.ok()) return self.status();
      auto l = listen_on({self->host, 0});
      if (!l.ok()) return l.status();
      listener = std::move(*l);
      std::snprintf(mine.address, sizeof mine.address, "%s",
                    SocketAddress{self->host, bound_port(listener.fd())}.to_string().c_str());
    }
    std::vector<Hello> all(static_cast<size_t>(n));
    DCOMM_RETURN_IF_ERROR(comm_.all_gather(&mine, all.data(), sizeof(Hello), DataType::kUint8));
    if (!any) return {};
    std::vector<PeerInfo> peers;
    std::vector<std::string> names;
    MeshPlan plan{std::vector<bool>(static_cast<size_t>(n)), std::vector<int>(static_cast<size_t>(n))};
    for (int p = 0; p < n; ++p) {
      peers.push_back(comm_.peer(p));
      peers.back().address = all[static_cast<size_t>(p)].address;
      names.push_back(comm_.peer(p).describe());
      plan.data_sockets[static_cast<size_t>(p)] = direct_[static_cast<size_t>(p)] ? 0 : 1;
    }
    auto mesh = build_mesh(
        me, all[0].nonce, peers, plan, listener, comm_.config().timeout, comm_.secret(),
        [this]() -> Status { return comm_.aborted() ? make_error(ErrorCode::kAborted, "aborted") : Status{}; });
    if (!mesh.ok()) return mesh.status();
    std::vector<Socket> sockets(static_cast<size_t>(n));
    for (size_t p = 0; p < sockets.size(); ++p)
      if (!mesh->data[p].empty()) sockets[p] = std::move(mesh->data[p][0]);
    wire_ = std::make_unique<PutWire>(
        me, std::move(sockets), std::move(names), comm_.config().timeout,
        [this](int from, const PutRecord& r) { return locate(from, r); },
        [this](int from, int signal, int context) -> Status {
          DCOMM_RETURN_IF_ERROR(check_signal(signal, context, "signal"));
          signals_[index(from, signal, context)].fetch_add(1, std::memory_order_release);
          return {};
        },
        [this](Status s) {
          std::lock_guard<std::mutex> lock(mu_);
          if (wire_error_.ok()) wire_error_ = std::move(s), wire_failed_.store(true);
        });
    return {};
  }
  // The wire thread's: where a record from `from` lands in this rank's part of its window.
  // A peer may put as soon as its register_window returns, before this rank's has recorded the
  // window: the record waits for that (the communicator's deadline).
  Result<char*> locate(int from, const PutRecord& r) {
    std::unique_lock<std::mutex> lock(mu_);
    registered_.wait_for(lock, comm_.config().timeout,
                         [&] { return r.window < 0 || static_cast<size_t>(r.window) < windows_.size(); });
    if (r.window < 0 || static_cast<size_t>(r.window) >= windows_.size() ||
        windows_[static_cast<size_t>(r.window)].empty())
      return invalid_argument("window ", r.window, " is not registered here (deregistered before rank ", from,
                              "'s put arrived?)");
    const Entry& w = windows_[static_cast<size_t>(r.window)][static_cast<size_t>(comm_.rank())];
    if (r.offset > w.bytes || r.bytes > w.bytes - r.offset)
      return invalid_argument(r.bytes, " bytes at offset ", r.offset, " run past this rank's window of ", w.bytes,
                              " bytes");
    return reinterpret_cast<char*>(w.address + r.offset);
  }
  Status over_wire(int peer, const PutRecord& r, const void* data, const char* what) {
    return wire_->send(peer, r, data, Deadline(comm_.config().timeout))
        .with_context(detail::cat(what, " on rank ", comm_.rank(), " to ", comm_.peer(peer).describe(), " over TCP"));
  }
  Status wire_failure() {
    if (!wire_failed_.load(std::memory_order_acquire)) return {};
    std::lock_guard<std::mutex> lock(mu_);
    return wire_error_;
  }

  Communicator& comm_;
  int contexts_;
  std::atomic<uint64_t>* signals_ = nullptr;            // this rank's counters, [from][context][signal]
  std::vector<uint64_t> consumed_;                      // what wait() has consumed of each
  std::vector<Entry> signal_blocks_;                    // every rank's counters
  std::vector<std::vector<Entry>> windows_;             // by id, every rank's part
  std::vector<std::unique_ptr<RemoteRegions>> remote_;  // peers' mem_alloc memory mapped here
  std::vector<bool> direct_;                            // by peer: reached without the wire
  std::mutex mu_;                                       // windows_ (written here, read by the wire) and the error
  std::condition_variable registered_;                  // a window was added
  Status wire_error_;                                   // the first record sent here that failed
  std::atomic<bool> wire_failed_{false};
  std::unique_ptr<PutWire> wire_;  // null when every peer is reached directly
};

DCOMM_NAMESPACE_END
