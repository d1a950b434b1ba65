// The simulator's executor of the algorithms written over primitives: the ring and chain
// (algo/ring.hpp, algo/chain.hpp, over the ring primitives of prims/primitives.hpp) and the
// trees (algo/tree_collectives.hpp, over peer-addressed primitives). Instead of moving bytes,
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

#include "dcomm/algo/ring.hpp"
#include "dcomm/algo/schedule.hpp"
#include "dcomm/algo/tree_collectives.hpp"
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

  // Peer-addressed (the trees).
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

// The all_reduce recordings share one layout of the working buffer: the input at [0, count),
// the output at [count, 2 count), then two slices of scratch.
struct RecordedLayout {
  size_t count, slice;
  size_t input_at() const { return 0; }
  size_t output_at() const { return count; }
  size_t scratch_at() const { return 2 * count; }
  size_t elems() const { return 2 * count + 2 * slice; }
};

// The slices the trees are recorded with: slot-sized, as the host runs them, but at least
// count / max_slices elements (none: 0), so that a 1 GiB call at 65,536 ranks stays a few
// million steps. Fewer, larger slices change the pipeline's fill, not its rate.
inline size_t recorded_tree_slice(size_t count, size_t slot_elems, size_t max_slices) {
  return std::max<size_t>(slot_elems, max_slices ? count / max_slices : 0);
}

// The steps of rank x of n in ring_all_reduce (positions are ranks), slices of `slice` elements.
inline Schedule record_ring_all_reduce(int n, int x, size_t count, size_t slice) {
  const RecordedLayout l{count, slice};
  Recorder rec(slice, (x + n - 1) % n, (x + 1) % n, l.scratch_at());
  (void)ring_all_reduce(rec, x, n, RingBuffers{Recorder::at(l.input_at()), Recorder::at(l.output_at()), count});
  return rec.take();
}

inline Schedule record_tree_all_reduce(int n, int x, size_t count, size_t slice) {
  const RecordedLayout l{count, slice};
  Recorder rec(slice);
  (void)tree_all_reduce(rec, x, n, Recorder::at(l.input_at()), Recorder::at(l.output_at()), count,
                        Recorder::at(l.scratch_at()));
  return rec.take();
}

// slots: the FIFO depth the communicator runs with (DCOMM_SLOTS), which bounds how far one
// tree may run ahead of the other.
inline Schedule record_double_tree_all_reduce_slots(int n, int x, size_t count, size_t slice, int slots) {
  const RecordedLayout l{count, slice};
  Recorder rec(slice);
  rec.set_slots(slots);
  (void)double_tree_all_reduce(rec, x, n, Recorder::at(l.input_at()), Recorder::at(l.output_at()), count,
                               Recorder::at(l.scratch_at()));
  return rec.take();
}
inline Schedule record_double_tree_all_reduce(int n, int x, size_t count, size_t slice) {
  return record_double_tree_all_reduce_slots(n, x, count, slice, Config{}.slots);
}

// Simulates one recorded all_reduce on n ranks: record(n, x, count, slice) is one of the above.
template <class Record>
SimResult simulate_recorded_all_reduce(int n, size_t count, size_t slice, size_t elem_bytes, const SimNetwork& net,
                                       Record record) {
  const RecordedLayout l{count, slice};
  return simulate(schedules_for(n, [&](int w, int x) { return record(w, x, count, slice); }), SimCollective::kAllReduce,
                  count, elem_bytes, 0, net, SimLayout{l.elems(), l.input_at(), l.output_at()});
}

DCOMM_NAMESPACE_END
