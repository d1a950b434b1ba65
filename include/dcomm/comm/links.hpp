// Which transport reaches each peer, the socket mesh, and the links the proxy thread moves for
// the remote ones (TCP sockets of the mesh, UCX endpoints, verbs queue pairs), made at init
// before the proxy starts. Pure set-up: the communicator calls build_transports once and keeps
// what it makes (HostTransports).
#pragma once

#include <sched.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dcomm/bootstrap/auth.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/inproc.hpp"
#include "dcomm/transport/mesh.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/tcp_link.hpp"
#include "dcomm/transport/shm.hpp"
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

// DCOMM_SPIN and DCOMM_PROXY_SPIN_US left at -1 (auto), by whether this host has a core for
// every local rank (env.hpp says what each value means).
inline void resolve_auto_spin(Config& config, int local_size, const std::vector<TransportChoice>& kinds) {
  if (config.spin_iterations >= 0 && config.proxy_spin_us >= 0) return;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  if (config.spin_iterations < 0) config.spin_iterations = local_size > cores ? 16 : 2000;
  // A polling proxy shares its rank's core (it yields between turns); over verbs it needs a
  // core of its own, since an emulated NIC (Soft-RoCE) works on the same cores.
  const bool verbs = std::find(kinds.begin(), kinds.end(), TransportChoice::kVerbs) != kinds.end();
  if (config.proxy_spin_us < 0) config.proxy_spin_us = (verbs ? 2 : 1) * local_size > cores ? 0 : 2000;
}

// The transports of one rank: threads and shared memory always; the proxy thread and what it
// moves (the mesh's TCP sockets, UCX endpoints, verbs queue pairs) when some peer needs it.
// The proxied transports are declared after the proxy, so they go first.
struct HostTransports {
  InprocTransport inproc;
  ShmTransport shm;
  std::unique_ptr<Proxy> proxy;
  std::unique_ptr<ProxiedTransport> tcp, ucx, verbs;

  // The transport to each peer by its kind (null for this rank).
  std::vector<Transport*> table(int rank, const std::vector<TransportChoice>& kinds) {
    std::vector<Transport*> out(kinds.size(), nullptr);
    for (size_t p = 0; p < kinds.size(); ++p) {
      if (static_cast<int>(p) == rank) continue;
      switch (kinds[p]) {
        case TransportChoice::kInproc: out[p] = &inproc; break;
        case TransportChoice::kShm: out[p] = &shm; break;
        case TransportChoice::kUcx: out[p] = ucx.get(); break;
        case TransportChoice::kVerbs: out[p] = verbs.get(); break;
        default: out[p] = tcp.get(); break;
      }
    }
    return out;
  }
};

// What building the transports needs beyond the links' context.
struct TransportSetup {
  const Socket& listener;  // the mesh's, on the address the roster published
  uint64_t nonce;          // the communicator's, so meshes of two communicators never cross
  const JobSecret& secret;
  std::shared_ptr<AbortState> abort;
  std::function<Status()> should_stop;  // a rank that gave up during set-up
};

// Builds the socket mesh (a control socket to every other process, data sockets to the TCP
// peers) and, when some peer needs it, the proxy with its TCP, UCX and verbs links, then
// starts the proxy.
inline Status build_transports(HostTransports& t, int rank, const std::vector<PeerInfo>& peers,
                               const std::vector<TransportChoice>& kinds, StoreClient& store, const std::string& prefix,
                               const Config& config, const TransportSetup& setup) {
  const int size = static_cast<int>(peers.size());
  MeshPlan plan{std::vector<bool>(static_cast<size_t>(size)), std::vector<int>(static_cast<size_t>(size))};
  bool need_proxy = false;
  for (int p = 0; p < size; ++p) {
    const size_t up = static_cast<size_t>(p);
    plan.control[up] = p != rank && peers[up].process_id != peers[static_cast<size_t>(rank)].process_id;
    plan.data_sockets[up] = kinds[up] == TransportChoice::kTcp ? config.sockets_per_peer : 0;
    need_proxy |= plan.control[up] || proxied(kinds[up]);
  }
  auto mesh =
      build_mesh(rank, setup.nonce, peers, plan, setup.listener, config.timeout, setup.secret, setup.should_stop);
  if (!mesh.ok()) return mesh.status();
  if (!need_proxy) return {};
  t.proxy = std::make_unique<Proxy>(rank, peers, setup.abort, std::chrono::microseconds(config.proxy_spin_us));
  std::vector<ProxyLink*> links(static_cast<size_t>(size), nullptr);
  for (int p = 0; p < size; ++p) {
    const size_t up = static_cast<size_t>(p);
    if (mesh->control[up].valid()) t.proxy->add_control(p, std::move(mesh->control[up]));
    if (plan.data_sockets[up])
      links[up] = t.proxy->add_link(std::make_unique<TcpLink>(p, std::move(mesh->data[up]), config));
  }
  t.tcp = std::make_unique<ProxiedTransport>("tcp", t.proxy.get(), std::move(links));
  const LinkContext ctx{rank, peers, kinds, store, prefix, config, *t.proxy};
  auto ucx = make_ucx_links(ctx);
  if (!ucx.ok()) return ucx.status();
  auto verbs = make_verbs_links(ctx);
  if (!verbs.ok()) return verbs.status();
  t.ucx = std::move(*ucx), t.verbs = std::move(*verbs);
  t.proxy->start();
  return {};
}

DCOMM_NAMESPACE_END
