// dcomm's libnccl.so.2 on host memory, driven as nccl-tests drives NCCL: built against the CUDA
// toolkit's own nccl.h, the unique id broadcast by MPI (mpirun -np 2/3/4). Every collective x
// every type x every op (PreMulSum and avg included), in place and out of place, against a
// reference; grouped init; non-blocking init; split (with NCCL_SPLIT_NOCOLOR); grouped sends
// and receives; argument errors. Prints "FAIL: ..." for each wrong result and exits 1.
#include <mpi.h>
#include <unistd.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <dcomm/core/float8.hpp>
#include <dcomm/core/half.hpp>

namespace {

int g_rank = 0, g_size = 1, g_failures = 0;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      ++g_failures;                                               \
      std::printf("FAIL (rank %d, line %d): ", g_rank, __LINE__); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
    }                                                             \
  } while (0)
#define NCCL_OK(call)                                                                                  \
  do {                                                                                                 \
    ncclResult_t r_ = (call);                                                                          \
    CHECK(r_ == ncclSuccess, "%s: %s (%s)", #call, ncclGetErrorString(r_), ncclGetLastError(nullptr)); \
  } while (0)

// Elements of every ncclDataType_t as doubles, both ways.
size_t elem_size(ncclDataType_t t) {
  static const size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return kSizes[t];
}
void put(ncclDataType_t t, void* p, size_t i, double v) {
  switch (t) {
    case ncclInt8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<dcomm::float16*>(p)[i] = dcomm::float16(static_cast<float>(v)); break;
    case ncclFloat32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(p)[i] = v; break;
    case ncclBfloat16: static_cast<dcomm::bfloat16*>(p)[i] = dcomm::bfloat16(static_cast<float>(v)); break;
    case ncclFloat8e4m3: static_cast<dcomm::float8_e4m3*>(p)[i] = dcomm::float8_e4m3(static_cast<float>(v)); break;
    case ncclFloat8e5m2: static_cast<dcomm::float8_e5m2*>(p)[i] = dcomm::float8_e5m2(static_cast<float>(v)); break;
    default: break;
  }
}
double get(ncclDataType_t t, const void* p, size_t i) {
  switch (t) {
    case ncclInt8: return static_cast<const int8_t*>(p)[i];
    case ncclUint8: return static_cast<const uint8_t*>(p)[i];
    case ncclInt32: return static_cast<const int32_t*>(p)[i];
    case ncclUint32: return static_cast<const uint32_t*>(p)[i];
    case ncclInt64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case ncclUint64: return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case ncclFloat16: return static_cast<float>(static_cast<const dcomm::float16*>(p)[i]);
    case ncclFloat32: return static_cast<const float*>(p)[i];
    case ncclFloat64: return static_cast<const double*>(p)[i];
    case ncclBfloat16: return static_cast<float>(static_cast<const dcomm::bfloat16*>(p)[i]);
    case ncclFloat8e4m3: return static_cast<float>(static_cast<const dcomm::float8_e4m3*>(p)[i]);
    case ncclFloat8e5m2: return static_cast<float>(static_cast<const dcomm::float8_e5m2*>(p)[i]);
    default: return 0;
  }
}
bool is_int(ncclDataType_t t) { return t <= ncclUint64; }
const char* type_name(ncclDataType_t t) {
  static const char* kNames[] = {"int8", "uint8", "int32",  "uint32", "int64",  "uint64",
                                 "half", "float", "double", "bf16",   "f8e4m3", "f8e5m2"};
  return kNames[t];
}

// Rank r's input element i: 1 or 2, so sums, products and 2x sums of up to 4 ranks are exact in
// every type (fp8 included).
double input(int r, size_t i) { return 1.0 + static_cast<double>((static_cast<size_t>(r) + i) % 2); }

enum Op { kSum, kProd, kMax, kMin, kAvg, kPreMul };
const char* op_name(int op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
  return kNames[op];
}
// The reduction of input(*, i) over all ranks, as the type computes it (avg truncates for
// integers, as NCCL's does).
double reduced(int op, size_t i, ncclDataType_t t) {
  double sum = 0, prod = 1, mx = -1e300, mn = 1e300;
  for (int r = 0; r < g_size; ++r) {
    double v = input(r, i);
    sum += v, prod *= v, mx = std::max(mx, v), mn = std::min(mn, v);
  }
  switch (op) {
    case kSum: return sum;
    case kProd: return prod;
    case kMax: return mx;
    case kMin: return mn;
    case kAvg: return is_int(t) ? std::floor(sum / g_size) : sum / g_size;
    default: return 2 * sum;  // PreMulSum with the factor 2
  }
}
bool close(ncclDataType_t t, double got, double want) {
  const double tol = t >= ncclFloat8e4m3 ? 0.07 : t == ncclFloat16 || t == ncclBfloat16 ? 0.01 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

struct Buf {
  explicit Buf(size_t bytes) : b(bytes + 1) {}
  void* p() { return b.data(); }
  std::vector<unsigned char> b;
};

// One collective: in place and out of place, each checked against `want(i)` over `out_count`.
void check_collective(const char* what, ncclComm_t comm, ncclDataType_t t, int op, size_t in_count, size_t out_count,
                      const std::function<double(size_t)>& in_value,
                      const std::function<std::optional<double>(size_t)>& want,
                      const std::function<ncclResult_t(const void*, void*, ncclRedOp_t)>& run, size_t in_place_offset) {
  ncclRedOp_t nop = static_cast<ncclRedOp_t>(op);
  unsigned char two[8] = {};
  if (op == kPreMul) {
    put(t, two, 0, 2.0);
    NCCL_OK(ncclRedOpCreatePreMulSum(&nop, two, t, ncclScalarHostImmediate, comm));
    put(t, two, 0, 5.0);  // read at creation: changing it now must not matter
  }
  const size_t es = elem_size(t);
  for (int in_place = 0; in_place < 2; ++in_place) {
    Buf send(in_count * es), recv(std::max(out_count, in_count + in_place_offset) * es);
    void* src = in_place ? static_cast<char*>(recv.p()) + in_place_offset * es : send.p();
    for (size_t i = 0; i < in_count; ++i) put(t, src, i, in_value(i));
    ncclResult_t r = run(src, recv.p(), nop);
    CHECK(r == ncclSuccess, "%s %s %s %s: %s (%s)", what, type_name(t), op_name(op),
          in_place ? "in place" : "out of place", ncclGetErrorString(r), ncclGetLastError(comm));
    int wrong = 0;
    for (size_t i = 0; i < out_count && r == ncclSuccess; ++i) {
      auto w = want(i);
      if (!w) continue;
      double got = get(t, recv.p(), i);
      if (!close(t, got, *w) && wrong++ < 3)
        CHECK(false, "%s %s %s %s: element %zu is %g, want %g", what, type_name(t), op_name(op),
              in_place ? "in place" : "out of place", i, got, *w);
    }
  }
  if (op == kPreMul) NCCL_OK(ncclRedOpDestroy(nop, comm));
}

// In place for reduce_scatter and scatter means recvbuff is this rank's block of sendbuff (when
// it_applies): run there, then move the result to the start, where the check reads it.
ncclResult_t in_own_block(const void* send, void* recv, bool it_applies, size_t offset, size_t bytes,
                          const std::function<ncclResult_t(void*)>& run) {
  if (send != recv || !it_applies) return run(recv);
  void* dst = static_cast<char*>(recv) + offset;
  ncclResult_t r = run(dst);
  std::memmove(recv, dst, bytes);
  return r;
}

void every_collective(ncclComm_t comm) {
  const size_t n = 1031;  // odd: no slot or vector boundary falls evenly
  const int me = g_rank, P = g_size;
  const size_t uP = static_cast<size_t>(P), ume = static_cast<size_t>(me);
  const cudaStream_t s = nullptr;
  for (int ti = 0; ti < ncclNumTypes; ++ti) {
    const auto t = static_cast<ncclDataType_t>(ti);
    for (int op = kSum; op <= kPreMul; ++op) {
      check_collective(
          "ncclAllReduce", comm, t, op, n, n, [&](size_t i) { return input(me, i); },
          [&](size_t i) { return reduced(op, i, t); },
          [&](const void* a, void* b, ncclRedOp_t o) { return ncclAllReduce(a, b, n, t, o, comm, s); }, 0);
      const int root = (op + ti) % P;
      check_collective(
          "ncclReduce", comm, t, op, n, me == root ? n : 0, [&](size_t i) { return input(me, i); },
          [&](size_t i) { return reduced(op, i, t); },
          [&](const void* a, void* b, ncclRedOp_t o) { return ncclReduce(a, b, n, t, o, root, comm, s); }, 0);
      // reduce_scatter: rank r's input element j*n + i is input(r, j*n + i); rank me gets block me.
      check_collective(
          "ncclReduceScatter", comm, t, op, n * uP, n, [&](size_t i) { return input(me, i); },
          [&](size_t i) { return reduced(op, ume * n + i, t); },
          [&](const void* a, void* b, ncclRedOp_t o) {
            return in_own_block(a, b, true, ume * n * elem_size(t), n * elem_size(t),
                                [&](void* dst) { return ncclReduceScatter(a, dst, n, t, o, comm, s); });
          },
          0);
    }
    const int root = ti % P;
    auto value_of = [&](int r, size_t i) {
      return static_cast<double>((static_cast<size_t>(r) * 7 + i) % 8);
    };  // exact in every type
    check_collective(
        "ncclBroadcast", comm, t, kSum, n, n, [&](size_t i) { return me == root ? value_of(root, i) : 0.0; },
        [&](size_t i) { return value_of(root, i); },
        [&](const void* a, void* b, ncclRedOp_t) { return ncclBroadcast(a, b, n, t, root, comm, s); }, 0);
    check_collective(
        "ncclBcast", comm, t, kSum, n, n, [&](size_t i) { return me == root ? value_of(root, i) : 0.0; },
        [&](size_t i) { return value_of(root, i); },
        [&](const void* a, void* b, ncclRedOp_t) {
          if (a != b) std::memcpy(b, a, n * elem_size(t));  // ncclBcast is in place only
          return ncclBcast(b, n, t, root, comm, s);
        },
        0);
    check_collective(
        "ncclAllGather", comm, t, kSum, n, n * uP, [&](size_t i) { return value_of(me, i); },
        [&](size_t i) { return value_of(static_cast<int>(i / n), i % n); },
        [&](const void* a, void* b, ncclRedOp_t) { return ncclAllGather(a, b, n, t, comm, s); }, ume * n);
    // all-to-all: block j of rank r's input goes to rank j's block r.
    auto a2a = [&](int from, int to, size_t i) {
      return static_cast<double>((static_cast<size_t>(from * 3 + to) + i) % 8);
    };
    check_collective(
        "ncclAlltoAll", comm, t, kSum, n * uP, n * uP,
        [&](size_t i) { return a2a(me, static_cast<int>(i / n), i % n); },
        [&](size_t i) { return a2a(static_cast<int>(i / n), me, i % n); },
        [&](const void* a, void* b, ncclRedOp_t) { return ncclAlltoAll(a, b, n, t, comm, s); }, 0);
    check_collective(
        "ncclGather", comm, t, kSum, n, me == root ? n * uP : 0, [&](size_t i) { return value_of(me, i); },
        [&](size_t i) { return value_of(static_cast<int>(i / n), i % n); },
        [&](const void* a, void* b, ncclRedOp_t) { return ncclGather(a, b, n, t, root, comm, s); },
        me == root ? ume * n : 0);
    check_collective(
        "ncclScatter", comm, t, kSum, me == root ? n * uP : 0, n,
        [&](size_t i) { return value_of(static_cast<int>(i / n), i % n); }, [&](size_t i) { return value_of(me, i); },
        [&](const void* a, void* b, ncclRedOp_t) {
          return in_own_block(a, b, me == root, ume * n * elem_size(t), n * elem_size(t),
                              [&](void* dst) { return ncclScatter(a, dst, n, t, root, comm, s); });
        },
        0);
  }
}

void grouped_p2p(ncclComm_t comm) {
  const int me = g_rank, P = g_size;
  // A ring both ways in one group, then an all-to-all-v of grouped sends and receives.
  std::vector<int> right(100), left(100), from_left(100, -1), from_right(100, -1);
  for (int i = 0; i < 100; ++i) right[i] = me * 1000 + i, left[i] = -me * 1000 - i;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(right.data(), 100, ncclInt32, (me + 1) % P, comm, nullptr));
  NCCL_OK(ncclSend(left.data(), 100, ncclInt32, (me + P - 1) % P, comm, nullptr));
  NCCL_OK(ncclRecv(from_left.data(), 100, ncclInt32, (me + P - 1) % P, comm, nullptr));
  NCCL_OK(ncclRecv(from_right.data(), 100, ncclInt32, (me + 1) % P, comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  const int l = (me + P - 1) % P, r = (me + 1) % P;
  CHECK(from_left[7] == l * 1000 + 7 && from_right[9] == -r * 1000 - 9, "ring exchange got %d and %d", from_left[7],
        from_right[9]);
  // all-to-all-v: rank a sends (a + b + 1) * 10 elements to rank b.
  std::vector<std::vector<float>> out(static_cast<size_t>(P)), in(static_cast<size_t>(P));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclGroupStart());  // nested
  for (int b = 0; b < P; ++b) {
    out[b].assign(static_cast<size_t>((me + b + 1) * 10), static_cast<float>(me * 100 + b));
    in[b].assign(static_cast<size_t>((b + me + 1) * 10), -1.f);
    NCCL_OK(ncclSend(out[b].data(), out[b].size(), ncclFloat32, b, comm, nullptr));
    NCCL_OK(ncclRecv(in[b].data(), in[b].size(), ncclFloat32, b, comm, nullptr));
  }
  NCCL_OK(ncclGroupEnd());
  NCCL_OK(ncclGroupEnd());
  for (int b = 0; b < P; ++b)
    CHECK(in[b].back() == static_cast<float>(b * 100 + me), "all-to-all-v from %d got %g", b, in[b].back());
  // Two collectives in one group on one comm.
  std::vector<double> x(64, me + 1.0), y(64, 1.0);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(x.data(), x.data(), 64, ncclFloat64, ncclSum, comm, nullptr));
  NCCL_OK(ncclAllReduce(y.data(), y.data(), 64, ncclFloat64, ncclMax, comm, nullptr));
  NCCL_OK(ncclGroupEnd());
  CHECK(x[5] == P * (P + 1) / 2.0 && y[5] == 1.0, "grouped all_reduces got %g and %g", x[5], y[5]);
}

void errors(ncclComm_t comm) {
  float f[4] = {};
  CHECK(ncclAllReduce(f, f, 4, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument, "NULL comm accepted");
  CHECK(ncclAllReduce(f, f, 4, static_cast<ncclDataType_t>(12), ncclSum, comm, nullptr) == ncclInvalidArgument,
        "type 12 accepted");
  CHECK(std::strstr(ncclGetLastError(comm), "data type 12") != nullptr, "last error '%s' does not name the type",
        ncclGetLastError(comm));
  CHECK(ncclAllReduce(f, f, 4, ncclFloat32, static_cast<ncclRedOp_t>(9), comm, nullptr) == ncclInvalidArgument,
        "op 9 accepted");
  CHECK(ncclBroadcast(f, f, 4, ncclFloat32, g_size, comm, nullptr) == ncclInvalidArgument, "root %d accepted", g_size);
  CHECK(std::strstr(ncclGetLastError(comm), "root") != nullptr, "last error '%s' does not name the root",
        ncclGetLastError(comm));
  CHECK(ncclSend(f, 4, ncclFloat32, -1, comm, nullptr) == ncclInvalidArgument, "peer -1 accepted");
  CHECK(ncclAllReduce(nullptr, f, 4, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument,
        "NULL sendbuff accepted");
  double two = 2;
  ncclRedOp_t op;
  NCCL_OK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat64, ncclScalarHostImmediate, comm));
  CHECK(op >= ncclNumOps, "PreMulSum op %d below ncclNumOps", static_cast<int>(op));
  CHECK(ncclAllReduce(f, f, 4, ncclFloat32, op, comm, nullptr) == ncclInvalidArgument,
        "a float64 PreMulSum accepted for float32");
  NCCL_OK(ncclRedOpDestroy(op, comm));
  CHECK(ncclRedOpDestroy(op, comm) == ncclInvalidArgument, "a PreMulSum destroyed twice");
  // ncclCommShrink's arguments are checked on the caller's rank before anything is sent.
  ncclComm_t none;
  CHECK(ncclCommShrink(comm, nullptr, 1, &none, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument,
        "ncclCommShrink: one excluded rank at NULL accepted");
  CHECK(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without start accepted");
  CHECK(std::strcmp(ncclGetErrorString(ncclRemoteError), "remote process exited or there was a network error") == 0,
        "error string");
  // The communicator is still good after refused calls.
  float one = 1;
  NCCL_OK(ncclAllReduce(&one, &one, 1, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(one == static_cast<float>(g_size), "all_reduce after errors got %g", one);
}

void queries_and_memory(ncclComm_t comm) {
  int n = 0, r = -1, dev = 7, version = 0;
  NCCL_OK(ncclCommCount(comm, &n));
  NCCL_OK(ncclCommUserRank(comm, &r));
  NCCL_OK(ncclCommCuDevice(comm, &dev));
  NCCL_OK(ncclGetVersion(&version));
  CHECK(n == g_size && r == g_rank, "count %d rank %d", n, r);
  CHECK(dev == -1, "a comm on a machine without a GPU says CUDA device %d", dev);
  // A program built against 2.28 meets a newer library, as with NCCL 2.30 itself.
  CHECK(version >= NCCL_VERSION_CODE && version >= 23007, "version %d", version);
  void* buf = nullptr;
  NCCL_OK(ncclMemAlloc(&buf, 1 << 20));
  void* handle = nullptr;
  NCCL_OK(ncclCommRegister(comm, buf, 1 << 20, &handle));
  CHECK(handle != nullptr, "no registration handle");
  ncclWindow_t win = nullptr;
  NCCL_OK(ncclCommWindowRegister(comm, buf, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC));
  auto* x = static_cast<float*>(buf);
  for (int i = 0; i < (1 << 18); ++i) x[i] = static_cast<float>(g_rank + i % 3);
  NCCL_OK(ncclAllReduce(x, x, 1 << 18, ncclFloat32, ncclSum, comm, nullptr));
  CHECK(x[4] == static_cast<float>(g_size * (g_size - 1) / 2 + g_size * 1), "all_reduce on ncclMemAlloc memory got %g",
        x[4]);
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  NCCL_OK(ncclCommDeregister(comm, handle));
  NCCL_OK(ncclMemFree(buf));
}

void split(ncclComm_t comm) {
  // Colors: rank % 2, except the last rank of 3 or more, which joins none.
  const bool none = g_size >= 3 && g_rank == g_size - 1;
  const int color = none ? NCCL_SPLIT_NOCOLOR : g_rank % 2;
  ncclComm_t sub = reinterpret_cast<ncclComm_t>(&g_failures);  // must be overwritten
  NCCL_OK(ncclCommSplit(comm, color, -g_rank, &sub, nullptr));
  if (none) {
    CHECK(sub == nullptr, "NCCL_SPLIT_NOCOLOR gave a communicator");
    return;
  }
  int n = 0, r = -1, want_n = 0, want_r = 0;
  for (int q = 0; q < g_size; ++q)
    if (q % 2 == color && !(g_size >= 3 && q == g_size - 1)) ++want_n, want_r += q > g_rank;  // key -rank: reversed
  NCCL_OK(ncclCommCount(sub, &n));
  NCCL_OK(ncclCommUserRank(sub, &r));
  CHECK(n == want_n && r == want_r, "split comm: count %d rank %d, want %d and %d", n, r, want_n, want_r);
  int v = g_rank;
  NCCL_OK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclMax, sub, nullptr));
  int want_max = 0;
  for (int q = 0; q < g_size; ++q)
    if (q % 2 == color && !(g_size >= 3 && q == g_size - 1)) want_max = q;
  CHECK(v == want_max, "all_reduce on the split comm got %d, want %d", v, want_max);
  NCCL_OK(ncclCommDestroy(sub));
}

// Between processes: rank 0 is excluded (as if it had died); the others shrink past it and sum
// on the survivors' comm, ranks renumbered in order.
void shrink(ncclComm_t comm) {
  int excluded = 0;
  ncclComm_t survivors = nullptr;
  if (g_rank == 0) {  // an excluded rank that calls anyway is refused at once, on its own
    CHECK(ncclCommShrink(comm, &excluded, 1, &survivors, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument &&
              std::strstr(ncclGetLastError(nullptr), "own exclude list") != nullptr,
          "ncclCommShrink excluding the caller: '%s'", ncclGetLastError(nullptr));
    return;
  }
  NCCL_OK(ncclCommShrink(comm, &excluded, 1, &survivors, nullptr, NCCL_SHRINK_DEFAULT));
  int n = 0, r = -1;
  NCCL_OK(ncclCommCount(survivors, &n));
  NCCL_OK(ncclCommUserRank(survivors, &r));
  CHECK(n == g_size - 1 && r == g_rank - 1, "the survivors' comm: count %d rank %d", n, r);
  int v = g_rank;
  NCCL_OK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, survivors, nullptr));
  CHECK(v == g_size * (g_size - 1) / 2, "all_reduce on the survivors got %d", v);
  NCCL_OK(ncclCommDestroy(survivors));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  ncclUniqueId ids[4];
  if (g_rank == 0)
    for (auto& id : ids) NCCL_OK(ncclGetUniqueId(&id));
  MPI_Bcast(ids, sizeof ids, MPI_BYTE, 0, MPI_COMM_WORLD);

  // Two communicators created in one group (as nccl-tests does), with a config.
  ncclComm_t a = nullptr, b = nullptr, c = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.nvlinkCentricSched = 1;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclCommInitRankConfig(&a, g_size, ids[0], g_rank, &config));
  NCCL_OK(ncclCommInitRank(&b, g_size, ids[1], g_rank));
  NCCL_OK(ncclGroupEnd());
  // A non-blocking one: ncclInProgress, then ncclCommGetAsyncError until it is not.
  ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
  nb.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c, g_size, ids[2], g_rank, &nb);
  CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init returned %s", ncclGetErrorString(r));
  ncclResult_t state = ncclInProgress;
  for (int ms = 0; state == ncclInProgress && ms < 60000; ++ms) {
    NCCL_OK(ncclCommGetAsyncError(c, &state));
    if (state == ncclInProgress) usleep(1000);
  }
  CHECK(state == ncclSuccess, "non-blocking init ended with %s", ncclGetErrorString(state));
  // An older caller's smaller config (only up to `blocking`).
  ncclComm_t d = nullptr;
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = offsetof(ncclConfig_t, cgaClusterSize);
  old.version = NCCL_VERSION(2, 14, 3);
  std::memset(reinterpret_cast<char*>(&old) + old.size, 0x7f, sizeof old - old.size);  // garbage past its size
  NCCL_OK(ncclCommInitRankConfig(&d, g_size, ids[3], g_rank, &old));

  every_collective(a);
  grouped_p2p(b);
  errors(c);
  queries_and_memory(a);
  split(a);
  shrink(a);
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0 waits here while the others shrink past it

  // Collectives on two communicators in one group.
  int x = 1, y = 2;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, b, nullptr));
  NCCL_OK(ncclAllReduce(&y, &y, 1, ncclInt32, ncclSum, d, nullptr));
  NCCL_OK(ncclGroupEnd());
  CHECK(x == g_size && y == 2 * g_size, "two comms in a group got %d and %d", x, y);

  NCCL_OK(ncclCommFinalize(a));
  for (ncclComm_t comm : {a, b, c, d}) NCCL_OK(ncclCommDestroy(comm));
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0)
    std::printf(failures ? "FAILED: %d failures on %d ranks\n" : "ok: %d ranks\n", failures ? failures : g_size,
                g_size);
  MPI_Finalize();
  return failures ? 1 : 0;
}
