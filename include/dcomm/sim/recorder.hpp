// The simulator's executor of the algorithms written over primitives: the ring and chain
// (algo/ring.hpp, algo/chain.hpp, over the ring primitives of prims/primitives.hpp), the trees,
// direct, hierarchical and ordered (algo/tree_collectives.hpp, algo/direct.hpp,
// algo/hierarchical.hpp, algo/ordered.hpp, over peer-addressed primitives, schedules and
// batches). Instead of moving bytes,
// each primitive appends the steps it takes (algo/schedule.hpp) to this rank's schedule, and
// sim/simulator.hpp runs the schedules of all ranks against its network model. So dcomm-sim
// runs the code the communicator runs: the same loops, slices, chunk boundaries and order.
//
// Buffers are ranges of one working buffer of elements. The recorder hands the algorithm
// addresses in a reserved range that is never dereferenced (base() + element), and turns the
// addresses the algorithm passes back into ranges. The algorithms take no branch on data, so
// one recording per rank is the whole run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "dcomm/algo/chain.hpp"
#include "dcomm/algo/direct.hpp"
#include "dcomm/algo/hierarchical.hpp"
#include "dcomm/algo/ordered.hpp"
#include "dcomm/algo/ring.hpp"
#include "dcomm/algo/schedule.hpp"
#include "dcomm/algo/tree_collectives.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/sim/simulator.hpp"

DCOMM_NAMESPACE_BEGIN

class Recorder {
 public:
  // slice: elements per slice (what a slot holds). prev/next: the ring's neighbours, for the
  // ring primitives. scratch_at: one slice of the working buffer where a ring fold lands
  // before it is passed on (the real primitives fold into the next peer's slot).
  explicit Recorder(size_t slice, int prev = -1, int next = -1, size_t scratch_at = 0)
      : slice_(slice), prev_(prev), next_(next), scratch_at_(scratch_at) {}

  // The address of element e of the working buffer.
  static char* at(size_t e) { return reinterpret_cast<char*>(kBase + e); }
  Schedule take() { return static_cast<Schedule&&>(steps_); }

  // What both kinds of algorithms ask of their primitives (counts in elements of one byte:
  // the ranges are elements, the simulator is told their size).
  size_t elem_bytes() const { return 1; }
  size_t slice_elems() const { return slice_; }
  size_t chunk_align() const { return 1; }
  // The host FIFOs' depth, which bounds how far the double tree runs one tree ahead (algo/tree_collectives.hpp):
  // the simulator's links buffer without bound, so the recording keeps the real code's limit.
  int fifo_slots() const { return slots_; }
  void set_slots(int slots) { slots_ = slots; }
  Status local_copy(void* dst, const void* src, size_t n) {
    if (dst != src) steps_.push_back(detail::local_copy(range(src, n), range(dst, n)));
    return {};
  }
  Status finalize(void* dst, size_t n) { return push(detail::finalize(range(dst, n))); }
  Status local_reduce(void* dst, const void* a, const void* b, size_t n) {
    // A copy of a into dst, then b folded in; when b is dst, a is folded into it instead (the
    // fingerprints count contributions, not their order).
    if (b == dst) std::swap(a, b);
    DCOMM_RETURN_IF_ERROR(local_copy(dst, a, n));
    Step fold = detail::local_copy(range(b, n), range(dst, n));
    fold.reduce = true;
    return push(fold);
  }
  // A schedule run in the buffer at `buf` (its ranges count from there).
  Status run(const Schedule& s, char* buf, char* /*tmp: the simulator stages by itself*/) {
    const size_t at = range(buf, 0).begin;
    for (Step st : s) {
      for (Range* r : {&st.send, &st.recv}) r->begin += at, r->end += at;
      steps_.push_back(st);
    }
    return {};
  }

  // Peer-addressed (the trees).
  // A batch: its sends first (the simulator's links buffer them), then its receives.
  Status exchange(std::span<const P2POp> ops) {
    for (bool sends : {true, false})
      for (const P2POp& op : ops)
        if ((op.kind == P2POp::Kind::kSend) == sends)
          steps_.push_back(sends ? detail::send_only(op.peer, range(op.buffer, op.bytes()))
                                 : detail::recv_only(op.peer, range(op.buffer, op.bytes()), false, false));
    return {};
  }
  Status send(int peer, const void* src, size_t n) { return push(detail::send_only(peer, range(src, n))); }
  Status recv(int peer, void* dst, size_t n) { return push(detail::recv_only(peer, range(dst, n), false, false)); }
  Status recv_reduce(int peer, const void* a, void* dst, size_t n) { return fold(peer, a, range(dst, n)); }

  // The ring primitives, from prev to next.
  Status send(const void* src, size_t n) { return send(next_, src, n); }
  Status recv(void* dst, size_t n) { return recv(prev_, dst, n); }
  Status recv_reduce_send(const void* local, size_t n) {
    const Range slot{scratch_at_, scratch_at_ + n};
    DCOMM_RETURN_IF_ERROR(fold(prev_, local, slot));
    return forward(slot);
  }
  Status recv_reduce_copy(const void* local, void* dst, size_t n) {
    DCOMM_RETURN_IF_ERROR(fold(prev_, local, range(dst, n)));
    return finalize(dst, n);
  }
  Status recv_reduce_copy_send(const void* local, void* dst, size_t n) {
    DCOMM_RETURN_IF_ERROR(recv_reduce_copy(local, dst, n));
    return forward(range(dst, n));
  }
  Status recv_copy_send(void* dst, size_t n) {
    DCOMM_RETURN_IF_ERROR(recv(prev_, dst, n));
    return forward(range(dst, n));
  }
  Status copy_send(const void* src, void* dst, size_t n) {
    DCOMM_RETURN_IF_ERROR(local_copy(dst, src, n));
    return send(src, n);
  }

 private:
  static constexpr uintptr_t kBase = uintptr_t{1} << 44;

  static Range range(const void* p, size_t n) {
    const size_t b = static_cast<size_t>(reinterpret_cast<uintptr_t>(p) - kBase);
    return {b, b + n};
  }
  Status push(Step s) {
    steps_.push_back(s);
    return {};
  }
  // dst <- a (+) what arrives from peer: a copied into dst first (as part of the fold) unless
  // it is dst.
  Status fold(int peer, const void* a, Range dst) {
    if (range(a, 0).begin != dst.begin) {
      Step copy = detail::local_copy(range(a, dst.size()), dst);
      copy.fused = true;
      steps_.push_back(copy);
    }
    return push(detail::recv_only(peer, dst, /*reduce=*/true, /*peer_first=*/false));
  }
  // Sends what the step before produced, as part of the same primitive.
  Status forward(Range r) {
    Step s = detail::send_only(next_, r);
    s.fused = true;
    return push(s);
  }

  size_t slice_;
  int prev_, next_;
  size_t scratch_at_;
  int slots_ = Config{}.slots;
  Schedule steps_;
};

// The recordings share one layout of the working buffer: the input at [0, count), the output
// at [count, 2 count), then scratch: two slices, the whole count (direct's fold), or n + 1
// blocks of it (ordered's received blocks: ordered_scratch_elems), whichever is most.
struct RecordedLayout {
  size_t count, slice;
  int ranks = 1;
  size_t input_at() const { return 0; }
  size_t output_at() const { return count; }
  size_t scratch_at() const { return 2 * count; }
  size_t elems() const { return 2 * count + std::max({2 * slice, count, ordered_scratch_elems(count, ranks)}); }
};

// The slices the trees are recorded with: slot-sized, as the host runs them, but at least
// count / max_slices elements (none: 0), so that a 1 GiB call at 65,536 ranks stays a few
// million steps. Fewer, larger slices change the pipeline's fill, not its rate.
inline size_t recorded_tree_slice(size_t count, size_t slot_elems, size_t max_slices) {
  return std::max<size_t>(slot_elems, max_slices ? count / max_slices : 0);
}

namespace detail {
// One rank's recording: run(rec, input, output, scratch) on a recorder laid out as above, its
// ring neighbours x-1 and x+1 (positions are ranks), its FIFOs `slots` deep (0: the default).
template <class Run>
Schedule record(int n, int x, size_t count, size_t slice, Run run, int slots = 0) {
  const RecordedLayout l{count, slice, n};
  Recorder rec(slice, (x + n - 1) % n, (x + 1) % n, l.scratch_at());
  if (slots > 0) rec.set_slots(slots);
  (void)run(rec, Recorder::at(l.input_at()), Recorder::at(l.output_at()), Recorder::at(l.scratch_at()));
  return rec.take();
}
}  // namespace detail

// The steps of rank x of n in each algorithm, slices of `slice` elements.
inline Schedule record_ring_all_reduce(int n, int x, size_t count, size_t slice) {
  return detail::record(n, x, count, slice, [&](Recorder& r, char* in, char* out, char*) {
    return ring_all_reduce(r, x, n, RingBuffers{in, out, count});
  });
}
inline Schedule record_tree_all_reduce(int n, int x, size_t count, size_t slice) {
  return detail::record(n, x, count, slice, [&](Recorder& r, char* in, char* out, char* scratch) {
    return tree_all_reduce(r, x, n, in, out, count, scratch);
  });
}
// slots: the FIFO depth the communicator runs with (fifo_slots: DCOMM_SLOTS, or as deep as the
// tree at scale), which bounds how far one tree may run ahead of the other.
inline Schedule record_double_tree_all_reduce_slots(int n, int x, size_t count, size_t slice, int slots) {
  return detail::record(
      n, x, count, slice,
      [&](Recorder& r, char* in, char* out, char* scratch) {
        return double_tree_all_reduce(r, x, n, in, out, count, scratch);
      },
      slots);
}
inline Schedule record_double_tree_all_reduce(int n, int x, size_t count, size_t slice) {
  return record_double_tree_all_reduce_slots(n, x, count, slice, fifo_slots(Config{}, n));
}
inline Schedule record_direct_all_reduce(int n, int x, size_t count, size_t slice) {
  return detail::record(n, x, count, slice, [&](Recorder& r, char* in, char* out, char* scratch) {
    return direct_all_reduce(r, x, n, in, out, count, scratch);
  });
}
// In one fixed order (algo/ordered.hpp): all_reduce, reduce or reduce_scatter. reduce_scatter
// runs in place, count elements a rank: its input (n x count, at 0) is laid out as a call of that
// many, and each rank's result is its own block of it (the simulator's kReduceScatter check).
inline Schedule record_ordered(OpKind kind, int n, int x, size_t count, size_t slice, int root = 0) {
  const bool scatter = kind == OpKind::kReduceScatter;
  const size_t total = scatter ? count * static_cast<size_t>(n) : count;
  return detail::record(n, x, total, slice, [&](Recorder& r, char* in, char* out, char* scratch) {
    if (scatter) return ordered_reduce_scatter(r, x, n, in, in + static_cast<size_t>(x) * count, count, scratch);
    if (kind == OpKind::kReduce) return ordered_reduce(r, x, n, root, in, out, count, scratch);
    return ordered_all_reduce(r, x, n, in, out, count, scratch);
  });
}

// Ranks packed ranks_per_host to a host in rank order, as the simulator packs them.
inline Schedule record_hierarchical_all_reduce(int n, int x, size_t count, size_t slice, int ranks_per_host) {
  std::vector<int> host_of(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) host_of[static_cast<size_t>(r)] = r / std::max(1, ranks_per_host);
  return detail::record(n, x, count, slice, [&](Recorder& r, char* in, char* out, char* scratch) {
    return hierarchical_all_reduce(r, x, host_of, in, out, count, scratch);
  });
}
// The rooted collectives (broadcast reads the root's input, reduce writes the root's output),
// as the communicator runs them: along the ring order's chain (kRing) or down the tree (kTree).
inline Schedule record_rooted(OpKind kind, Algorithm algorithm, int n, int x, size_t count, size_t slice, int root) {
  const bool broadcast = kind == OpKind::kBroadcast;
  return detail::record(n, x, count, slice, [&](Recorder& r, char* in, char* out, char* scratch) {
    if (algorithm == Algorithm::kTree)
      return broadcast ? tree_broadcast(r, x, n, root, in, out, count)
                       : tree_reduce(r, x, n, root, in, out, count, scratch);
    return broadcast ? chain_broadcast(r, x, n, root, RingBuffers{in, out, count})
                     : chain_reduce(r, x, n, root, RingBuffers{in, out, count});
  });
}

// Simulates one recorded collective (all_reduce, broadcast or reduce) on n ranks: record(n, x,
// count, slice) is one of the above (the rooted ones with their root bound).
template <class Record>
SimResult simulate_recorded(SimCollective what, int n, size_t count, size_t slice, size_t elem_bytes,
                            const SimNetwork& net, Record record, int root = 0) {
  const RecordedLayout l{count, slice, n};
  return simulate(schedules_for(n, [&](int w, int x) { return record(w, x, count, slice); }), what, count, elem_bytes,
                  0, net, SimLayout{l.elems(), l.input_at(), l.output_at(), root});
}
template <class Record>
SimResult simulate_recorded_all_reduce(int n, size_t count, size_t slice, size_t elem_bytes, const SimNetwork& net,
                                       Record record) {
  return simulate_recorded(SimCollective::kAllReduce, n, count, slice, elem_bytes, net, record);
}

DCOMM_NAMESPACE_END
