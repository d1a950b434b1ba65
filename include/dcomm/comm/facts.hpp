// What the ranks of a communicator agreed at set-up, the same on every rank: which host each
// rank is on, the ring order (and each rank's position in it), whether single copy works
// between every pair, whether every link lands rendezvous, and the cost model's link
// parameters. Set once by agree_facts during init; the dispatch, the tuning and the device
// communicator read them.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "dcomm/algo/ring.hpp"
#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/comm/cost_model.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/topo/order.hpp"
#include "dcomm/transport/cma.hpp"

DCOMM_NAMESPACE_BEGIN

struct SetupFacts {
  std::vector<int> host_of;  // host index of each rank, hosts numbered by their first rank
  int hosts = 1;
  std::vector<int> order, pos_of;  // position -> rank and rank -> position (topo/order.hpp)
  std::vector<int> host_at;        // host index at each position
  int pos = 0;                     // this rank's position
  LinkModel link;                  // the cost model's link parameters (tuned later by tuning.hpp)
  bool single_copy = false;        // every rank can read every other's memory
  bool every_link_lands = false;   // every link lands rendezvous payloads (all proxied; the ring lands)

  int size() const { return static_cast<int>(order.size()); }
  int at_position(int p) const { return order[static_cast<size_t>(detail::mod(p, size()))]; }
  void set_order(std::vector<int> o, int rank) {
    order = std::move(o);
    pos_of = positions_of(order);
    pos = pos_of[static_cast<size_t>(rank)];
    host_at.resize(order.size());
    for (size_t p = 0; p < order.size(); ++p) host_at[p] = host_of[static_cast<size_t>(order[p])];
  }
};

// Hosts numbered in order of their first rank (DCOMM_TEST_RANKS_PER_HOST and
// DCOMM_TEST_CYCLIC_HOSTS pretend other hosts).
inline void number_hosts(SetupFacts& f, const std::vector<PeerInfo>& peers, const Config& config) {
  std::vector<std::string> hosts;
  f.host_of.clear();
  for (const auto& p : peers) {
    std::string id = config.test_ranks_per_host > 0 ? std::to_string(p.rank / config.test_ranks_per_host)
                     : config.test_cyclic_hosts > 0 ? std::to_string(p.rank % config.test_cyclic_hosts)
                                                    : p.host_id;
    auto at = std::find(hosts.begin(), hosts.end(), id);
    if (at == hosts.end()) at = hosts.insert(at, id);
    f.host_of.push_back(static_cast<int>(at - hosts.begin()));
  }
  f.hosts = f.host_of.empty() ? 1 : *std::max_element(f.host_of.begin(), f.host_of.end()) + 1;
}

namespace detail {
// This rank's place as agree_facts publishes it: "NUMA-node address bridge/bridge/..." ("-" for
// an empty field). The NUMA node is the device's when the rank drives one the kernel places.
inline std::string publish_place(int rank, const std::string& device) {
  RankPlace place;
  place.numa = numa_node_of_this_thread();
  if (!device.empty() && !place_at_pci_device(device, place))
    DCOMM_LOG(kWarn, kSubsysInit, rank, "device ", device,
              " is not a PCI device this host's /sys shows: the ring order leaves it out");
  std::string path;
  for (const std::string& part : place.path) path += (path.empty() ? "" : "/") + part;
  return cat(place.numa, " ", place.bus_id.empty() ? "-" : place.bus_id, " ", path.empty() ? "-" : path);
}
}  // namespace detail

// What agree_facts needs to know of this rank.
struct FactsContext {
  int rank;
  int local_size;  // ranks on this host
  const std::vector<PeerInfo>& peers;
  const std::vector<TransportChoice>& kinds;  // per peer (choose_transports)
  StoreClient& store;
  const std::string& prefix;
  const Config& config;
};

// Collected through the store: whether single copy works (every rank on this host, over shared
// memory or threads, and able to read every other; each rank probes its peers), whether every
// link lands rendezvous payloads (the ring then moves pieces by rendezvous), the NUMA node and
// device place of each rank (the ring order groups by them; Config::device) and the most ranks
// per core on any host (the cost model's link parameters depend on it). Hosts must be numbered
// first (number_hosts).
inline Status agree_facts(SetupFacts& f, const FactsContext& c) {
  const int size = static_cast<int>(c.peers.size());
  if (size < 2) {
    f.set_order({0}, 0);
    return {};
  }
  bool ok = c.config.cma_bytes != 0 || c.config.cma_reduce_bytes != 0 || c.config.cma_reduce_scatter_bytes != 0 ||
            c.config.cma_reduce_root_bytes != 0;
  for (int p = 0; p < size && ok; ++p) {
    if (p == c.rank) continue;
    const PeerInfo& peer = c.peers[static_cast<size_t>(p)];
    const bool same_process = peer.process_id == c.peers[static_cast<size_t>(c.rank)].process_id;
    ok = !proxied(c.kinds[static_cast<size_t>(p)]) && can_read_process(peer.pid, same_process, peer.probe_addr);
  }
  bool all_land = c.config.rendezvous_bytes != 0;
  for (int p = 0; p < size; ++p) all_land = all_land && (p == c.rank || proxied(c.kinds[static_cast<size_t>(p)]));
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  const int load_milli = c.local_size * 1000 / std::max(cores, 1);
  DCOMM_RETURN_IF_ERROR(c.store.set(detail::cat(c.prefix, "/facts/", c.rank),
                                    detail::cat(ok ? 1 : 0, " ", load_milli, " ", all_land ? 1 : 0, " ",
                                                detail::publish_place(c.rank, c.config.device))));
  f.single_copy = f.every_link_lands = true;
  int max_load_milli = 0;
  std::vector<RankPlace> places(static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    auto v = c.store.get(detail::cat(c.prefix, "/facts/", p));
    if (!v.ok()) return v.status();
    std::istringstream in(*v);
    int verdict = 0, load = 0, landing = 0;
    RankPlace& place = places[static_cast<size_t>(p)];
    std::string path;
    if (!(in >> verdict >> load >> landing >> place.numa >> place.bus_id >> path))
      return make_error(ErrorCode::kInternal, "rank ", p, " published unreadable host facts '", *v, "'");
    f.single_copy = f.single_copy && verdict == 1;
    f.every_link_lands = f.every_link_lands && landing == 1;
    max_load_milli = std::max(max_load_milli, load);
    place.host = f.host_of[static_cast<size_t>(p)];
    if (place.bus_id == "-") place.bus_id.clear();
    for (std::istringstream parts(path); std::getline(parts, path, '/');)
      if (path != "-") place.path.push_back(path);
  }
  f.set_order(ring_order(places), c.rank);
  f.link = LinkModel::for_load(max_load_milli / 1000.0);
  DCOMM_LOG(kInfo, kSubsysInit, c.rank, "single-copy (cross-memory attach) ", f.single_copy ? "on" : "off", "; up to ",
            max_load_milli / 1000.0, " ranks per core: step latency modelled as ", f.link.alpha_us, " us");
  return {};
}

DCOMM_NAMESPACE_END
