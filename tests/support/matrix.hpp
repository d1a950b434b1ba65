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

// gather, scatter and all_to_all, in place and not, with roots that move with the count; then
// all_to_all_v with uneven counts (count + (r + 2p) % 3 from rank r to rank p, some of them 0),
// send blocks in reverse order and receive blocks one element apart, out of place and in place.
// Rank r's block for rank p holds input_value(r, p * (count + 3) + j).
template <class T>
void run_exchanges(Communicator& c, DataType t, size_t count, const TestAllocator<T>& al, MatrixReport& rep) {
  const int size = c.size(), rank = c.rank();
  const size_t usize = static_cast<size_t>(size), stride = count + 3;
  auto value = [&](int from, int to, size_t j) {
    return from_int<T>(input_value(t, ReduceOp::kSum, from, static_cast<size_t>(to) * stride + j));
  };
  auto name = [&](const char* coll, bool in_place, int root) {
    return dcomm::detail::cat(coll, " ", to_string(t), " count ", count, in_place ? " in place" : " out of place",
                              root >= 0 ? dcomm::detail::cat(" root ", root) : std::string(), " on rank ", rank, " of ",
                              size);
  };
  // Fills block p of `buf` (at at[p], n[p] elements) with what this rank sends rank p.
  auto fill_blocks = [&](Buf<T>& buf, auto at, auto n) {
    for (int p = 0; p < size; ++p)
      for (size_t j = 0; j < n(p); ++j) buf[at(p) + j] = value(rank, p, j);
  };
  auto check_blocks = [&](const std::string& what, Status s, const Buf<T>& buf, auto at, auto n, auto from) {
    if (!s.ok()) return rep.fail(what + ": " + s.message());
    rep.checked++;
    for (int p = 0; p < size; ++p)
      for (size_t j = 0; j < n(p); ++j)
        if (!same_bits(buf[at(p) + j], value(from(p), rank, j)))
          return rep.fail(dcomm::detail::cat(what, ": element ", j, " of block ", p, " is wrong"));
  };
  auto equal_at = [&](int p) { return static_cast<size_t>(p) * count; };
  auto equal_n = [&](int) { return count; };
  for (bool in_place : {false, true}) {
    const int g_root = static_cast<int>((count + 1) % usize), s_root = static_cast<int>((count * 3 + 1) % usize);
    // gather: the root's block p is rank p's block for the root.
    Buf<T> g_in(count, al), g_out(count * usize, al);
    for (size_t j = 0; j < count; ++j) g_in[j] = value(rank, g_root, j);
    const T* g_src = g_in.data();
    if (in_place && rank == g_root) {
      std::copy(g_in.begin(), g_in.end(), g_out.begin() + static_cast<ptrdiff_t>(equal_at(rank)));
      g_src = g_out.data() + equal_at(rank);
    }
    Status s = c.gather(g_src, rank == g_root ? g_out.data() : nullptr, count, t, g_root);
    if (rank == g_root)
      check_blocks(name("gather", in_place, g_root), s, g_out, equal_at, equal_n, [](int p) { return p; });
    else if (!s.ok()) rep.fail(name("gather", in_place, g_root) + ": " + s.message());
    // scatter: rank r gets the root's block for r.
    Buf<T> s_in(rank == s_root ? count * usize : 0, al), s_out(count, al);
    if (rank == s_root) fill_blocks(s_in, equal_at, equal_n);
    T* s_dst = in_place && rank == s_root ? s_in.data() + equal_at(rank) : s_out.data();
    s = c.scatter(s_in.data(), s_dst, count, t, s_root);
    if (s.ok()) std::copy(s_dst, s_dst + count, s_out.begin());
    check_blocks(
        name("scatter", in_place, s_root), s, s_out, [](int) { return size_t{0}; },
        [&](int p) { return p == rank ? count : 0; }, [&](int) { return s_root; });
    // all_to_all: block p comes from rank p.
    Buf<T> a_in(count * usize, al), a_out(count * usize, al);
    fill_blocks(a_in, equal_at, equal_n);
    Buf<T>& a_dst = in_place ? a_in : a_out;
    s = c.all_to_all(a_in.data(), a_dst.data(), count, t);
    check_blocks(name("all_to_all", in_place, -1), s, a_dst, equal_at, equal_n, [](int p) { return p; });
    // all_to_all_v
    std::vector<size_t> sc(usize), sd(usize), rc(usize), rd(usize);
    size_t send_end = 0, recv_end = 0;
    for (int p = size - 1; p >= 0; --p) {
      sc[static_cast<size_t>(p)] = count + static_cast<size_t>((rank + 2 * p) % 3);
      sd[static_cast<size_t>(p)] = send_end;
      send_end += sc[static_cast<size_t>(p)];
    }
    for (int p = 0; p < size; ++p) {
      rc[static_cast<size_t>(p)] = count + static_cast<size_t>((p + 2 * rank) % 3);
      rd[static_cast<size_t>(p)] = recv_end;
      recv_end += rc[static_cast<size_t>(p)] + 1;
    }
    Buf<T> v_in(std::max(send_end, recv_end), al), v_out(recv_end, al);
    fill_blocks(
        v_in, [&](int p) { return sd[static_cast<size_t>(p)]; }, [&](int p) { return sc[static_cast<size_t>(p)]; });
    Buf<T>& v_dst = in_place ? v_in : v_out;
    s = c.all_to_all_v(v_in.data(), sc, sd, v_dst.data(), rc, rd, t);
    check_blocks(
        name("all_to_all_v", in_place, -1), s, v_dst, [&](int p) { return rd[static_cast<size_t>(p)]; },
        [&](int p) { return rc[static_cast<size_t>(p)]; }, [](int p) { return p; });
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

    run_exchanges<T>(c, t, count, al, rep);
    // A ring shift with send_recv.
    Buf<T> shift_in(count, al), shift_out(count, al);
    fill(shift_in, t, ReduceOp::kSum, rank);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    std::string what = name("send_recv ring shift", ReduceOp::kSum, count, false);
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
