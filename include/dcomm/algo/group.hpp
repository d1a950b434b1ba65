// A group of ranks (one host's ranks, or the hosts' leaders) as an executor of its own, so an
// algorithm written over peer-addressed primitives (algo/tree_collectives.hpp) or a schedule
// (algo/schedule.hpp) runs inside the group unchanged: it addresses the members by their index
// 0..size-1, which this maps to the ranks of the executor below (the host's ports, or the
// simulator's recorder). Composite algorithms (algo/hierarchical.hpp) are built from groups.
//
// With finalize off the group computes a partial result: its finalize steps (kAvg's division)
// are dropped, and the composite finalizes once over the whole.
#pragma once

#include <cstddef>
#include <vector>

#include "dcomm/algo/schedule.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

template <class Ops>
class GroupOps {
 public:
  // members[i]: the rank (of `o`) of member i; rank: this rank in `o`.
  GroupOps(Ops& o, const std::vector<int>& members, int rank, bool finalize)
      : o_(o), members_(members), finalize_(finalize) {
    for (size_t i = 0; i < members.size(); ++i)
      if (members[i] == rank) index_ = static_cast<int>(i);
  }

  int size() const { return static_cast<int>(members_.size()); }
  int index() const { return index_; }  // -1: this rank is not a member

  size_t elem_bytes() const { return o_.elem_bytes(); }
  size_t slice_elems() const { return o_.slice_elems(); }
  int fifo_slots() const { return o_.fifo_slots(); }

  Status send(int i, const void* src, size_t n) { return o_.send(rank_of(i), src, n); }
  Status recv(int i, void* dst, size_t n) { return o_.recv(rank_of(i), dst, n); }
  Status recv_reduce(int i, const void* a, void* dst, size_t n) { return o_.recv_reduce(rank_of(i), a, dst, n); }
  Status local_copy(void* dst, const void* src, size_t n) { return o_.local_copy(dst, src, n); }
  Status local_reduce(void* dst, const void* a, const void* b, size_t n) { return o_.local_reduce(dst, a, b, n); }
  Status finalize(void* dst, size_t n) { return finalize_ ? o_.finalize(dst, n) : Status{}; }

  // A schedule over the members' indices, run as the same steps between their ranks.
  Status run(const Schedule& s, char* buf, char* tmp) {
    Schedule mapped;
    mapped.reserve(s.size());
    for (Step st : s) {
      if (st.kind == Step::Kind::kFinalize && !finalize_) continue;
      if (st.send_peer >= 0) st.send_peer = rank_of(st.send_peer);
      if (st.recv_peer >= 0) st.recv_peer = rank_of(st.recv_peer);
      mapped.push_back(st);
    }
    return o_.run(mapped, buf, tmp);
  }

 private:
  int rank_of(int i) const { return members_[static_cast<size_t>(i)]; }

  Ops& o_;
  const std::vector<int>& members_;
  bool finalize_;
  int index_ = -1;
};

DCOMM_NAMESPACE_END
