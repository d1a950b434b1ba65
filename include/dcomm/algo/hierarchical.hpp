// Hierarchical all_reduce for several ranks per host: reduce within each host to its first
// rank (a pipelined binary tree over shared memory), all_reduce among those host leaders
// (Rabenseifner: 2 log H steps, each leader sends 2S(H-1)/H over the network), then broadcast
// within each host. Only S(H-1)/H x 2 crosses each host's network link instead of the ring's
// 2S(n-1)/n through every rank, and the network steps grow with log of the hosts, not ranks.
//
// Written once over peer-addressed primitives and schedules (the executor's run()), from the
// pieces it composes, each run inside a group (algo/group.hpp): the host's ports run it
// (algo/on_ports.hpp), and so does the simulator's recorder (sim/recorder.hpp).
#pragma once

#include <vector>

#include "dcomm/algo/group.hpp"
#include "dcomm/algo/schedule.hpp"
#include "dcomm/algo/tree_collectives.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// host_of[r]: the host index of rank r (0 .. hosts-1, numbered in order of first rank).
// acc: one slice of scratch (the host's tree reduce folds there before passing up).
template <class Ops>
Status hierarchical_all_reduce(Ops& o, int rank, const std::vector<int>& host_of, const char* send, char* recv,
                               size_t count, char* acc) {
  const int me = host_of[static_cast<size_t>(rank)];
  std::vector<int> local, leaders;
  for (int x = 0; x < static_cast<int>(host_of.size()); ++x) {
    if (host_of[static_cast<size_t>(x)] == me) local.push_back(x);
    if (static_cast<int>(leaders.size()) == host_of[static_cast<size_t>(x)])
      leaders.push_back(x);  // first rank of a new host
  }
  // The average divides once, on the leaders, after the last sum: the groups' results are partial.
  GroupOps<Ops> host(o, local, rank, /*finalize=*/false), heads(o, leaders, rank, /*finalize=*/false);
  DCOMM_RETURN_IF_ERROR(tree_reduce(host, host.index(), host.size(), 0, send, recv, count, acc));
  if (heads.index() >= 0) {
    if (count)
      DCOMM_RETURN_IF_ERROR(heads.run(schedule_rabenseifner(heads.size(), heads.index(), count), recv, nullptr));
    DCOMM_RETURN_IF_ERROR(o.finalize(recv, count));
  }
  return tree_broadcast(host, host.index(), host.size(), 0, recv, recv, count);
}

DCOMM_NAMESPACE_END
