// The device kernels' loops (reduce/packs.hpp) run here on the CPU: every type and op, every
// relative alignment, head, packs and tail, and teams of several pretended threads (each
// member run in turn covers its share). The result must be the host reducer's bits.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include <dcomm/reduce/host_reducer.hpp>
#include <dcomm/reduce/packs.hpp>

#include "support/values.hpp"

using namespace dcomm;

namespace {
struct Offsets {
  int a, b, d;
};
template <class T>
bool same_values(const T* x, const T* y, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!dcomm_test::same_value(x[i], y[i])) return false;
  return true;
}
template <class T, class Op>
void run_team(int threads, T* dst, T* dst2, const T* a, const T* b, size_t n, int divide_by) {
  for (int k = 0; k < threads; ++k) team_reduce<T, Op>(SerialTeam{k, threads}, dst, dst2, a, b, n, divide_by);
}
}  // namespace

TEST_CASE("pack loops: reduce gives the host reducer's bits for every type, op, alignment and team") {
  std::mt19937 rng(17);
  int cases = 0;
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const int ranks = 3;
      const Reducer ref = *make_host_reducer(type, op, ranks, /*allow_simd=*/false);
      dispatch_type(type, [&]<class T>() {
        dispatch_op(op, [&]<class Op>() {
          const int divide_by = op == ReduceOp::kAvg ? ranks : 0;
          for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, size_t{1003}}) {
            for (int threads : {1, 3, 32}) {
              // Offsets in elements: equal (packs), and different (all scalar).
              for (Offsets off : {Offsets{0, 0, 0}, {1, 1, 1}, {3, 3, 3}, {0, 1, 0}, {2, 0, 1}}) {
                const size_t oa = static_cast<size_t>(off.a), ob = static_cast<size_t>(off.b),
                             od = static_cast<size_t>(off.d);
                const size_t pad = 32;
                std::vector<uint8_t> a_raw((n + pad) * sizeof(T)), b_raw(a_raw.size());
                for (auto& x : a_raw) x = static_cast<uint8_t>(rng());
                for (auto& x : b_raw) x = static_cast<uint8_t>(rng());
                std::vector<T> a(n + pad), b(n + pad), got(n + pad), got2(n + pad), want(n + pad);
                std::memcpy(a.data(), a_raw.data(), a_raw.size());
                std::memcpy(b.data(), b_raw.data(), b_raw.size());
                const T* pa = a.data() + oa;
                const T* pb = b.data() + ob;
                ref.reduce(want.data() + od, pa, pb, n);
                ref.finalize(want.data() + od, n);
                run_team<T, Op>(threads, got.data() + od, got2.data() + od, pa, pb, n, divide_by);
                bool same = same_values(got.data() + od, want.data() + od, n) &&
                            same_values(got2.data() + od, want.data() + od, n);
                REQUIRE_MESSAGE(same, std::string(to_string(type)), " ", std::string(to_string(op)), " n ", n,
                                " threads ", threads, " offsets ", oa, ",", ob, ",", od);
                // In place into the first operand, no second output.
                std::vector<T> inplace(a);
                run_team<T, Op>(threads, inplace.data() + oa, nullptr, inplace.data() + oa, pb, n, divide_by);
                std::vector<T> want_in(a);
                ref.reduce(want_in.data() + oa, want_in.data() + oa, pb, n);
                ref.finalize(want_in.data() + oa, n);
                REQUIRE(same_values(inplace.data(), want_in.data(), inplace.size()));
                ++cases;
              }
            }
          }
          return 0;
        });
        return 0;
      });
    }
  }
  CHECK(cases == kNumDataTypes * kNumReduceOps * 6 * 3 * 5);
}

TEST_CASE("pack loops: copy to one or two outputs at any alignment, nothing outside touched") {
  std::mt19937 rng(5);
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{200}, size_t{4099}}) {
    for (int threads : {1, 4, 64}) {
      for (Offsets off : {Offsets{0, 0, 0}, {5, 5, 5}, {1, 2, 3}, {0, 8, 0}}) {
        const size_t os = static_cast<size_t>(off.a), od = static_cast<size_t>(off.b), od2 = static_cast<size_t>(off.d);
        std::vector<uint8_t> src(bytes + 32), dst(bytes + 32, 0xee), dst2(bytes + 32, 0xdd);
        for (auto& x : src) x = static_cast<uint8_t>(rng());
        for (int k = 0; k < threads; ++k)
          team_copy(SerialTeam{k, threads}, dst.data() + od, dst2.data() + od2, src.data() + os, bytes);
        REQUIRE(std::memcmp(dst.data() + od, src.data() + os, bytes) == 0);
        REQUIRE(std::memcmp(dst2.data() + od2, src.data() + os, bytes) == 0);
        for (size_t i = 0; i < dst.size(); ++i)
          if (i < od || i >= od + bytes) REQUIRE(dst[i] == 0xee);
      }
    }
  }
}
