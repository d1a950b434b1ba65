// The table of a rank's links to its peers: which transport reaches each, and the port
// (prims/peer.hpp) to each once connected. Links are connected on first use, so a program
// that only runs rings holds two; the algorithms over all peers connect every one once.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/prims/peer.hpp"
#include "dcomm/transport/fifo.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

// What a communicator holds (Communicator::mem_stats; ncclCommMemStats maps it): `suspendable`,
// what suspend() releases (the FIFOs of links made on first use: shared memory, threads; the
// scratch and the broadcast staging block); `persistent`, what it keeps (the FIFOs of the links
// the proxy thread moves: TCP, UCX and verbs, made at start-up with the socket mesh).
struct MemStats {
  size_t suspendable = 0;
  size_t persistent = 0;
  bool suspended = false;
  size_t total() const { return suspendable + persistent; }
};

class LinkTable {
 public:
  // What connecting needs of the communicator; every pointer outlives the table.
  struct Context {
    int rank = 0;
    const std::vector<PeerInfo>* peers = nullptr;
    const std::vector<TransportChoice>* kinds = nullptr;  // per peer (choose_transports)
    const Config* config = nullptr;
    StoreClient* store = nullptr;
    std::string prefix;
    std::shared_ptr<AbortState> abort;
    const CallStamp* call = nullptr;  // the call in progress, as its slots carry it
    CallDirectory* directory = nullptr;
  };

  // transports[p]: the transport that reaches rank p (null for this rank).
  void init(Context c, std::vector<Transport*> transports) {
    ctx_ = std::move(c);
    transports_ = std::move(transports);
    ports_.resize(transports_.size());
    by_rank_.assign(transports_.size(), nullptr);
  }

  int size() const { return static_cast<int>(transports_.size()); }
  const char* transport_name(int p) const {
    return transports_[static_cast<size_t>(p)] ? transports_[static_cast<size_t>(p)]->name() : "self";
  }
  PeerPort* port(int p) const { return ports_[static_cast<size_t>(p)].get(); }
  // Every port by rank, null where not connected (yet).
  const std::vector<PeerPort*>& by_rank() const { return by_rank_; }
  // After connect_all: every peer's port by rank, and by position in `order`.
  const std::vector<PeerPort*>& all() const { return all_; }
  const std::vector<PeerPort*>& all_by_position() const { return all_by_position_; }

  // Staging memory (FIFOs) held now, in bytes: all, or only the proxied links' or the others'.
  size_t staging_bytes(std::optional<bool> proxied = std::nullopt) const {
    size_t total = 0;
    for (const auto& p : ports_)
      if (p && (!proxied || p->connection().proxied() == *proxied)) total += p->connection().staging_bytes();
    return total;
  }

  // Suspend: drops the links whose FIFOs are this table's own (not proxied), on every rank at
  // once (the caller's barrier has ended every call), with no goodbye, so each side frees its
  // half and the shared-memory files go when both have; later links connect under `prefix`
  // (their store keys and shared names must be new). Returns the peers dropped, for resume.
  std::vector<int> release_own(std::string prefix) {
    std::vector<int> dropped;
    for (size_t p = 0; p < ports_.size(); ++p)
      if (ports_[p] && !ports_[p]->connection().proxied()) {
        ports_[p].reset();
        by_rank_[p] = nullptr;
        dropped.push_back(static_cast<int>(p));
      }
    all_.clear();  // connect_all makes them again
    all_by_position_.clear();
    ctx_.prefix = std::move(prefix);
    return dropped;
  }

  // Prepares every link first, then connects each: see Transport::prepare.
  Status connect(std::vector<int> want) {
    const Config& config = *ctx_.config;
    const auto& peers = *ctx_.peers;
    std::erase_if(want, [&](int p) { return p == ctx_.rank || ports_[static_cast<size_t>(p)]; });
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    // Every link holds about one FIFO here (TCP: two); refuse before allocating past the bound.
    const size_t per_link = local_fifo_bytes(config);
    size_t after = staging_bytes();
    for (int p : want) after += per_link * (proxied((*ctx_.kinds)[static_cast<size_t>(p)]) ? 2 : 1);
    if (!want.empty() && after > config.max_staging_bytes)
      return make_error(ErrorCode::kOutOfResources, "connecting to ", want.size(),
                        " more peer(s) would raise this rank's ", "staging memory to ", after >> 20,
                        " MiB, over DCOMM_MAX_STAGING_BYTES (", config.max_staging_bytes >> 20,
                        " MiB); raise it, or lower DCOMM_SLOT_BYTES / DCOMM_SLOTS");
    const PeerInfo& self = peers[static_cast<size_t>(ctx_.rank)];
    auto ctx = [&](int p) {
      return ConnectContext{ctx_.rank,   &self,     &peers[static_cast<size_t>(p)], &config, ctx_.store,
                            ctx_.prefix, ctx_.abort};
    };
    for (int p : want)
      DCOMM_RETURN_IF_ERROR(transports_[static_cast<size_t>(p)]->prepare(ctx(p)).with_context(
          detail::cat("connecting to ", peers[static_cast<size_t>(p)].describe())));
    for (int p : want) {
      auto conn = transports_[static_cast<size_t>(p)]->connect(ctx(p));
      if (!conn.ok()) return conn.status();
      const PeerInfo& peer = peers[static_cast<size_t>(p)];
      ports_[static_cast<size_t>(p)] =
          std::make_unique<PeerPort>(std::move(*conn), &peer, ctx_.abort.get(), &config,
                                     peer.process_id == self.process_id, ctx_.call, ctx_.rank, ctx_.directory);
      by_rank_[static_cast<size_t>(p)] = ports_[static_cast<size_t>(p)].get();
      DCOMM_LOG(kInfo, kSubsysTransport, ctx_.rank, "connected to ", peer.describe(), " via ", transport_name(p));
    }
    return {};
  }

  // Connects the peers `peer_of(i)` names, i < n, that are not connected yet (a list of them is
  // made only then: a small batch's cost was mostly allocations).
  template <class PeerOf>
  Status connect_missing(size_t n, PeerOf&& peer_of) {
    bool all = true;
    for (size_t i = 0; i < n && all; ++i) all = peer_of(i) == ctx_.rank || by_rank_[static_cast<size_t>(peer_of(i))];
    if (all) return {};
    std::vector<int> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = peer_of(i);
    return connect(std::move(want));
  }

  // Connects every peer once, for the algorithms that talk to all of them; `order` is the
  // ring order (position -> rank) of all_by_position().
  Status connect_all(const std::vector<int>& order) {
    if (!all_.empty()) return {};
    std::vector<int> everyone(ports_.size());
    for (size_t p = 0; p < everyone.size(); ++p) everyone[p] = static_cast<int>(p);
    DCOMM_RETURN_IF_ERROR(connect(everyone));
    all_ = by_rank();
    all_by_position_.resize(all_.size());
    for (size_t p = 0; p < all_.size(); ++p) all_by_position_[p] = all_[static_cast<size_t>(order[p])];
    return {};
  }

  // A clean goodbye to every connected peer.
  void close_all() {
    for (auto& p : ports_)
      if (p) p->connection().close();
  }

 private:
  Context ctx_;
  std::vector<Transport*> transports_;
  std::vector<std::unique_ptr<PeerPort>> ports_;
  std::vector<PeerPort*> by_rank_;  // ports_ as plain pointers, for the calls that take them
  std::vector<PeerPort*> all_, all_by_position_;
};

DCOMM_NAMESPACE_END
