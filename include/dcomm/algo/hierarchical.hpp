// Hierarchical all_reduce for several ranks per host: reduce within each host to its first
// rank (a pipelined binary tree over shared memory), all_reduce among those host leaders
// (Rabenseifner: 2 log H steps, each leader sends 2S(H-1)/H over the network), then broadcast
// within each host. Only S(H-1)/H x 2 crosses each host's network link instead of the ring's
// 2S(n-1)/n through every rank, and the network steps grow with log of the hosts, not ranks.
#pragma once

#include <vector>

#include "dcomm/algo/recursive.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// The ranks of one group (a host's ranks, or the hosts' leaders) as a PeerSet of its own:
// group index i is world rank members[i].
struct Subgroup {
  std::vector<PeerPort*> ports;
  int index = -1;  // this rank's index, -1 when it is not a member

  Subgroup(const PeerSet& world, const std::vector<int>& members) {
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == world.rank) index = static_cast<int>(i);
      ports.push_back(world.ports[static_cast<size_t>(members[i])]);
    }
  }
  PeerSet peers(const PeerSet& world) const { return {ports, index, world.config}; }
};

// host_of[r]: the host index of rank r (0 .. hosts-1, numbered in order of first rank).
inline Status hierarchical_all_reduce(const PeerSet& ps, const std::vector<int>& host_of, const Reducer& r,
                                      const void* send, void* recv, size_t count, std::vector<char>& scratch) {
  const int me = host_of[static_cast<size_t>(ps.rank)];
  std::vector<int> local, leaders;
  for (int x = 0; x < ps.size(); ++x) {
    if (host_of[static_cast<size_t>(x)] == me) local.push_back(x);
    if (static_cast<int>(leaders.size()) == host_of[static_cast<size_t>(x)])
      leaders.push_back(x);  // first rank of a new host
  }
  Reducer partial = r;  // the average divides once, on the leaders, after the last sum
  partial.divide = nullptr;
  const Subgroup host(ps, local), heads(ps, leaders);
  DCOMM_RETURN_IF_ERROR(tree_reduce(host.peers(ps), partial, 0, send, recv, count, scratch));
  if (heads.index >= 0) {
    DCOMM_RETURN_IF_ERROR(rabenseifner_all_reduce(heads.peers(ps), partial, recv, recv, count));
    r.finalize(recv, count);
  }
  return tree_broadcast(host.peers(ps), 0, recv, recv, count * r.elem_bytes);
}

DCOMM_NAMESPACE_END
