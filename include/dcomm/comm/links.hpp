// Which transport reaches each peer, and the links the proxy thread moves for the remote ones
// (UCX endpoints, verbs queue pairs; the TCP sockets come with the mesh), made at init before
// the proxy starts. Pure set-up: the communicator calls these once and keeps what they make.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/transport.hpp"
#if DCOMM_HAS_UCX
#include "dcomm/transport/ucx.hpp"
#endif
#if DCOMM_HAS_VERBS
#include "dcomm/transport/verbs.hpp"
#endif

DCOMM_NAMESPACE_BEGIN

// What link set-up needs of its communicator.
struct LinkContext {
  int rank;
  const std::vector<PeerInfo>& peers;
  const std::vector<TransportChoice>& kinds;  // per peer (choose_transports)
  StoreClient& store;
  const std::string& prefix;  // the communicator's store prefix
  const Config& config;
  Proxy& proxy;

  int size() const { return static_cast<int>(peers.size()); }
  // The peers reached over transport `k`.
  std::vector<int> peers_over(TransportChoice k) const {
    std::vector<int> out;
    for (int p = 0; p < size(); ++p)
      if (kinds[static_cast<size_t>(p)] == k) out.push_back(p);
    return out;
  }
  // What rank p published under prefix + `key` (waits, with the store's deadline).
  Result<std::string> published_by(int p, const std::string& key, const char* what) const {
    auto v = store.get(prefix + key);
    if (!v.ok()) return v.status().with_context(detail::cat("rank ", rank, " waiting for rank ", p, "'s ", what));
    return v;
  }
};

// Between hosts that both have an RDMA device: UCX where both have it built in, else verbs;
// otherwise TCP. Both ends decide from the same two PeerInfos, so they agree.
inline TransportChoice between_hosts(const PeerInfo& a, const PeerInfo& b) {
  if (!a.rdma || !b.rdma) return TransportChoice::kTcp;
  const int both = a.built & b.built;
  if (both & PeerInfo::kBuiltUcx) return TransportChoice::kUcx;
  if (both & PeerInfo::kBuiltVerbs) return TransportChoice::kVerbs;
  return TransportChoice::kTcp;
}

// The transport to each peer (kAuto for this rank): DCOMM_TRANSPORT, else the same process
// inproc, the same host shm, another host between_hosts(). An impossible forced choice is an
// error naming the peer.
inline Result<std::vector<TransportChoice>> choose_transports(int rank, const std::vector<PeerInfo>& peers,
                                                              const Config& config) {
  const PeerInfo& self = peers[static_cast<size_t>(rank)];
  std::vector<TransportChoice> kinds(peers.size(), TransportChoice::kAuto);
  for (size_t p = 0; p < peers.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    const PeerInfo& peer = peers[p];
    const bool same_process = peer.process_id == self.process_id, same_host = peer.host_id == self.host_id;
    TransportChoice k = config.transport;
    if (k == TransportChoice::kAuto)
      k = same_process ? TransportChoice::kInproc : same_host ? TransportChoice::kShm : between_hosts(self, peer);
    if (k == TransportChoice::kInproc && !same_process)
      return invalid_argument("DCOMM_TRANSPORT=inproc, but ", peer.describe(), " is another process");
    if (k == TransportChoice::kShm && !same_host)
      return invalid_argument("DCOMM_TRANSPORT=shm, but ", peer.describe(), " is on another host");
    kinds[p] = k;
  }
  return kinds;
}

// UCX (transport/ucx.hpp): one worker for this rank, its address swapped through the store,
// an endpoint to every UCX peer. Null when no peer is reached over UCX.
inline Result<std::unique_ptr<ProxiedTransport>> make_ucx_links(const LinkContext& c) {
  const std::vector<int> peers = c.peers_over(TransportChoice::kUcx);
  if (peers.empty()) return std::unique_ptr<ProxiedTransport>();
#if DCOMM_HAS_UCX
  auto worker = UcxWorker::create();
  if (!worker.ok()) return worker.status().with_context(detail::cat("rank ", c.rank, " setting up UCX"));
  auto address = (*worker)->address();
  if (!address.ok()) return address.status();
  DCOMM_RETURN_IF_ERROR(c.store.set(detail::cat(c.prefix, "/ucx/", c.rank), *address));
  std::vector<ProxyLink*> links(static_cast<size_t>(c.size()), nullptr);
  for (int p : peers) {
    auto theirs = c.published_by(p, detail::cat("/ucx/", p), "UCX address");
    if (!theirs.ok()) return theirs.status();
    auto link = std::make_unique<UcxLink>(p, c.rank, c.config, *worker);
    const bool same_host = c.peers[static_cast<size_t>(p)].host_id == c.peers[static_cast<size_t>(c.rank)].host_id;
    DCOMM_RETURN_IF_ERROR(link->connect(*theirs, same_host));
    links[static_cast<size_t>(p)] = c.proxy.add_link(std::move(link));
  }
  return std::make_unique<ProxiedTransport>("ucx", &c.proxy, std::move(links));
#else
  return invalid_argument("rank ", c.rank, ": DCOMM_TRANSPORT=ucx, but this program was built without UCX: link the ",
                          "CMake target dcomm::ucx (package libucx-dev)");
#endif
}

// Verbs (transport/verbs.hpp): one device for this rank, a queue pair per verbs peer, the
// endpoints swapped through the store. Null when no peer is reached over verbs.
inline Result<std::unique_ptr<ProxiedTransport>> make_verbs_links(const LinkContext& c) {
  const std::vector<int> peers = c.peers_over(TransportChoice::kVerbs);
  if (peers.empty()) return std::unique_ptr<ProxiedTransport>();
#if DCOMM_HAS_VERBS
  auto dev = VerbsDevice::open();
  if (!dev.ok()) return dev.status().with_context(detail::cat("rank ", c.rank));
  std::vector<std::unique_ptr<VerbsLink>> made(static_cast<size_t>(c.size()));
  for (int p : peers) {
    auto link = std::make_unique<VerbsLink>(p, c.config, *dev);
    auto mine = link->prepare();
    if (!mine.ok()) return mine.status();
    DCOMM_RETURN_IF_ERROR(c.store.set(detail::cat(c.prefix, "/verbs/", c.rank, "/", p), mine->encode()));
    made[static_cast<size_t>(p)] = std::move(link);
  }
  std::vector<ProxyLink*> links(static_cast<size_t>(c.size()), nullptr);
  for (int p : peers) {
    auto theirs = c.published_by(p, detail::cat("/verbs/", p, "/", c.rank), "queue pair");
    if (!theirs.ok()) return theirs.status();
    auto end = VerbsEndpoint::decode(*theirs);
    if (!end.ok()) return end.status();
    DCOMM_RETURN_IF_ERROR(made[static_cast<size_t>(p)]->connect(*end));
    links[static_cast<size_t>(p)] = c.proxy.add_link(std::move(made[static_cast<size_t>(p)]));
  }
  DCOMM_LOG(kInfo, kSubsysInit, c.rank, "verbs links over ", (*dev)->describe());
  return std::make_unique<ProxiedTransport>("verbs", &c.proxy, std::move(links));
#else
  return invalid_argument("rank ", c.rank, ": DCOMM_TRANSPORT=verbs, but this program was built without verbs: link ",
                          "the CMake target dcomm::verbs (packages libibverbs-dev, rdma-core)");
#endif
}

DCOMM_NAMESPACE_END
