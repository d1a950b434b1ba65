// The collective test matrix, shared by the thread-rank tests and the process-rank worker:
// every collective x data type x op x count (0, 1, ranks-1, not divisible, several rounds of
// slots), in place and out of place, checked exactly against the reference in values.hpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dcomm/dcomm.hpp>

#include "support/values.hpp"

namespace dcomm_test {

using namespace dcomm;

struct MatrixReport {
  int checked = 0;
  std::vector<std::string> failures;
  void fail(std::string what) {
    if (failures.size() < 20) failures.push_back(std::move(what));
  }
};

struct MatrixOptions {
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
  std::vector<size_t> counts;
  bool registered = false;  // buffers from dcomm::mem_alloc
};

// A std::allocator that takes its memory from dcomm::mem_alloc when `registered`.
template <class T>
struct TestAllocator {
  using value_type = T;
  bool registered = false;
  TestAllocator() = default;
  explicit TestAllocator(bool r) : registered(r) {}
  template <class U>
  TestAllocator(const TestAllocator<U>& o) : registered(o.registered) {}
  T* allocate(size_t n) {
    if (!registered) return std::allocator<T>().allocate(n);
    auto p = mem_alloc(n * sizeof(T));
    if (!p.ok()) throw std::bad_alloc();
    return static_cast<T*>(*p);
  }
  void deallocate(T* p, size_t n) {
    if (!registered) return std::allocator<T>().deallocate(p, n);
    mem_free(p).ignore();
  }
  bool operator==(const TestAllocator& o) const { return registered == o.registered; }
};
template <class T>
using Buf = std::vector<T, TestAllocator<T>>;

inline MatrixOptions full_matrix(int size, size_t slot_bytes) {
  MatrixOptions m;
  for (int t = 0; t < kNumDataTypes; ++t) m.types.push_back(static_cast<DataType>(t));
  for (int o = 0; o < kNumReduceOps; ++o) m.ops.push_back(static_cast<ReduceOp>(o));
  // 0, 1, ranks-1, a count no rank count divides, and one that takes several rounds of slots
  // even for 8-byte types.
  m.counts = {0, 1, static_cast<size_t>(std::max(size - 1, 2)), 13, 3 * slot_bytes * static_cast<size_t>(size) + 5};
  return m;
}

namespace detail {
template <class T, class A>
void fill(std::vector<T, A>& v, DataType t, ReduceOp op, int rank, size_t offset = 0) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = from_int<T>(input_value(t, op, rank, i + offset));
}

template <class T>
void check(MatrixReport& rep, const std::string& what, const T* got, size_t n, auto expected) {
  rep.checked++;
  for (size_t i = 0; i < n; ++i) {
    T want = expected(i);
    if (!same_bits(got[i], want)) {
      rep.fail(dcomm::detail::cat(what, ": element ", i, " of ", n, " is wrong"));
      return;
    }
  }
}

template <class T>
void run_type(Communicator& c, DataType t, const MatrixOptions& m, MatrixReport& rep) {
  const int size = c.size(), rank = c.rank();
  const size_t usize = static_cast<size_t>(size);
  const TestAllocator<T> al(m.registered);
  auto name = [&](const char* coll, ReduceOp op, size_t count, bool in_place) {
    return dcomm::detail::cat(coll, " ", to_string(t), " ", to_string(op), " count ", count,
                              in_place ? " in place" : " out of place", " on rank ", rank, " of ", size);
  };
  auto call = [&](const std::string& what, Status s) {
    if (!s.ok()) rep.fail(what + ": " + s.message());
    return s.ok();
  };
  for (size_t count : m.counts) {
    for (bool in_place : {false, true}) {
      for (ReduceOp op : m.ops) {
        // all_reduce
        Buf<T> in(count, al), out(count, al);
        fill(in, t, op, rank);
        T* dst = in_place ? in.data() : out.data();
        std::string what = name("all_reduce", op, count, in_place);
        if (call(what, c.all_reduce(in.data(), dst, count, t, op)))
          check<T>(rep, what, dst, count, [&](size_t i) { return expected_reduction<T>(t, op, size, i); });

        // reduce_scatter: block b of rank r's input holds values at indices b*count + i.
        Buf<T> rs_in(count * usize, al), rs_out(count, al);
        fill(rs_in, t, op, rank);
        T* rs_dst = in_place ? rs_in.data() + static_cast<size_t>(rank) * count : rs_out.data();
        what = name("reduce_scatter", op, count, in_place);
        if (call(what, c.reduce_scatter(rs_in.data(), rs_dst, count, t, op)))
          check<T>(rep, what, rs_dst, count,
                   [&](size_t i) { return expected_reduction<T>(t, op, size, static_cast<size_t>(rank) * count + i); });

        // reduce to a root that moves with the count
        int root = static_cast<int>((count + static_cast<size_t>(op)) % usize);
        Buf<T> r_in(count, al), r_out(count, al);
        fill(r_in, t, op, rank);
        T* r_dst = in_place ? r_in.data() : r_out.data();
        what = name("reduce", op, count, in_place) + dcomm::detail::cat(" root ", root);
        if (call(what, c.reduce(r_in.data(), r_dst, count, t, op, root)) && rank == root)
          check<T>(rep, what, r_dst, count, [&](size_t i) { return expected_reduction<T>(t, op, size, i); });
      }

      // all_gather: rank r contributes input_value(r, i).
      Buf<T> ag_in(count, al), ag_out(count * usize, al);
      fill(ag_in, t, ReduceOp::kSum, rank);
      T* ag_src = ag_in.data();
      if (in_place) {
        std::copy(ag_in.begin(), ag_in.end(),
                  ag_out.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(rank) * count));
        ag_src = ag_out.data() + static_cast<size_t>(rank) * count;
      }
      std::string what = name("all_gather", ReduceOp::kSum, count, in_place);
      if (call(what, c.all_gather(ag_src, ag_out.data(), count, t)))
        check<T>(rep, what, ag_out.data(), count * usize, [&](size_t i) {
          return from_int<T>(input_value(t, ReduceOp::kSum, static_cast<int>(i / std::max<size_t>(count, 1)),
                                         i % std::max<size_t>(count, 1)));
        });

      // broadcast from a root that moves with the count
      int root = static_cast<int>((count * 7 + 3) % usize);
      Buf<T> b_in(count, al), b_out(count, al);
      fill(b_in, t, ReduceOp::kSum, rank);
      T* b_dst = in_place ? b_in.data() : b_out.data();
      what = name("broadcast", ReduceOp::kSum, count, in_place) + dcomm::detail::cat(" root ", root);
      if (call(what, c.broadcast(b_in.data(), b_dst, count, t, root)))
        check<T>(rep, what, b_dst, count,
                 [&](size_t i) { return from_int<T>(input_value(t, ReduceOp::kSum, root, i)); });
    }

    // all-to-all through one p2p batch (self included), then a ring shift with send_recv.
    Buf<T> a2a_in(count * usize, al), a2a_out(count * usize, al);
    fill(a2a_in, t, ReduceOp::kSum, rank);
    std::vector<P2POp> ops;
    for (int p = 0; p < size; ++p) {
      ops.push_back(P2POp::send(a2a_in.data() + static_cast<size_t>(p) * count, count, t, p));
      ops.push_back(P2POp::recv(a2a_out.data() + static_cast<size_t>(p) * count, count, t, p));
    }
    std::string what = name("all_to_all (p2p batch)", ReduceOp::kSum, count, false);
    if (call(what, c.p2p(ops)))
      check<T>(rep, what, a2a_out.data(), count * usize, [&](size_t i) {
        size_t from = i / std::max<size_t>(count, 1), j = i % std::max<size_t>(count, 1);
        return from_int<T>(
            input_value(t, ReduceOp::kSum, static_cast<int>(from), static_cast<size_t>(rank) * count + j));
      });
    Buf<T> shift_in(count, al), shift_out(count, al);
    fill(shift_in, t, ReduceOp::kSum, rank);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    what = name("send_recv ring shift", ReduceOp::kSum, count, false);
    if (call(what, c.send_recv(shift_in.data(), count, next, shift_out.data(), count, prev, t)))
      check<T>(rep, what, shift_out.data(), count,
               [&](size_t i) { return from_int<T>(input_value(t, ReduceOp::kSum, prev, i)); });
    // In place: the message received overwrites the one sent from the same buffer.
    what = name("send_recv ring shift", ReduceOp::kSum, count, true);
    if (call(what, c.send_recv(shift_in.data(), count, next, shift_in.data(), count, prev, t)))
      check<T>(rep, what, shift_in.data(), count,
               [&](size_t i) { return from_int<T>(input_value(t, ReduceOp::kSum, prev, i)); });
  }
}
}  // namespace detail

inline MatrixReport run_matrix(Communicator& c, const MatrixOptions& m) {
  MatrixReport rep;
  for (DataType t : m.types) dispatch_type(t, [&]<class T>() { detail::run_type<T>(c, t, m, rep); });
  Status s = c.barrier();
  if (!s.ok()) rep.fail("final barrier: " + s.message());
  return rep;
}

}  // namespace dcomm_test
