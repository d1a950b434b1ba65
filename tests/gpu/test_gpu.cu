// The CUDA device path on a real GPU (ctest label `gpu`): the reduction kernels against the
// host reducer, every collective on device memory with threads and with processes sharing one
// GPU (device memory and CUDA IPC; pinned host memory with DCOMM_CUDA_P2P_DISABLE=1), groups,
// CUDA graph capture, abort and deadline, bad arguments, one-sided windows on device memory. Without a device it prints why and
// exits 77, which ctest counts as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include <dcomm/bootstrap/local_launch.hpp>
#include <dcomm/dcomm.cuh>

#include "support/ranks.hpp"
#include "support/values.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {
// CUDA failures: on the test's own thread a doctest failure (which throws); on a rank's thread
// collected and reported with the rank's result, since an exception out of a std::thread
// would end the whole test binary.
thread_local std::vector<std::string>* t_cuda_failures = nullptr;
bool cuda_ok(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  const std::string what =
      detail::cat(expr, " (", file, ":", line, "): ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  if (t_cuda_failures) {
    t_cuda_failures->push_back(what);
    return false;
  }
  FAIL(what);
  return false;
}
#define CUDA_OK(expr) cuda_ok((expr), #expr, __FILE__, __LINE__)

// For the life of a rank thread's scope: CUDA failures are collected here.
struct CudaFailures {
  std::vector<std::string> list;
  CudaFailures() { t_cuda_failures = &list; }
  ~CudaFailures() { t_cuda_failures = nullptr; }
  CudaFailures(const CudaFailures&) = delete;
  CudaFailures& operator=(const CudaFailures&) = delete;
  std::string text() const {
    std::string out;
    for (const auto& f : list) out += f + "\n";
    return out;
  }
};

// Device memory seen as T. Ranks sharing a GPU allocate before any of them starts collectives
// (then a host barrier) and free after: cudaFree waits for the whole GPU, and an allocation may
// too, where other ranks' kernels may be waiting for this rank's next call.
//
// Copies are ordered on the stream the collectives use and waited for: a plain cudaMemcpy from
// pageable memory may return before the data reaches the device, and it is not ordered with a
// non-blocking stream, so the next kernel could read the old contents.
template <class T>
struct DeviceBuf {
  T* p = nullptr;
  bool owned = true;
  explicit DeviceBuf(size_t count) { CUDA_OK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T) + 64)); }
  explicit DeviceBuf(void* borrowed) : p(static_cast<T*>(borrowed)), owned(false) {}
  ~DeviceBuf() {
    if (owned) cudaFree(p);
  }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  void put(const std::vector<T>& v, cudaStream_t s, size_t at = 0) const {
    if (CUDA_OK(cudaMemcpyAsync(p + at, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s)))
      CUDA_OK(cudaStreamSynchronize(s));
  }
  std::vector<T> get(size_t count, cudaStream_t s, size_t at = 0) const {
    std::vector<T> v(count);
    if (CUDA_OK(cudaMemcpyAsync(v.data(), p + at, count * sizeof(T), cudaMemcpyDeviceToHost, s)))
      CUDA_OK(cudaStreamSynchronize(s));
    return v;
  }
};

// Every collective of one type on one rank, in and out of place, checked exactly. Returns the
// number of failed checks; failures go to `log`.
template <class T>
int device_collectives(DeviceCommunicator& d, DataType t, const std::vector<size_t>& counts, void* buf_a, void* buf_b,
                       cudaStream_t s, std::string& log) {
  const int n = d.size(), r = d.rank();
  const size_t un = static_cast<size_t>(n);
  int bad = 0;
  auto fail = [&](const std::string& what) {
    if (bad++ < 10) log += what + "\n";
  };
  DeviceBuf<T> a(buf_a), b(buf_b);  // each room for the largest count x ranks of 8-byte types
  auto call = [&](const std::string& what, Status st) {
    if (!st.ok()) fail(what + ": " + st.message());
    if (cudaStreamSynchronize(s) != cudaSuccess) fail(what + ": stream failed");
    return st.ok();
  };
  for (size_t count : counts)
    for (bool in_place : {false, true})
      for (int o = 0; o < kNumReduceOps; ++o) {
        const auto op = static_cast<ReduceOp>(o);
        const std::string tag = detail::cat(to_string(t), " ", to_string(op), " count ", count,
                                            in_place ? " in place" : "", " rank ", r, "/", n);
        std::vector<T> in(count * un);
        for (size_t i = 0; i < in.size(); ++i) in[i] = from_int<T>(input_value(t, op, r, i));
        // all_reduce
        a.put(in, s);
        if (call("all_reduce " + tag, d.all_reduce(a.p, in_place ? a.p : b.p, count, t, op, s))) {
          auto got = (in_place ? a : b).get(count, s);
          for (size_t i = 0; i < count; ++i)
            if (!same_value(got[i], expected_reduction<T>(t, op, n, i))) {
              fail(detail::cat("all_reduce ", tag, ": element ", i));
              break;
            }
        }
        // reduce_scatter
        a.put(in, s);
        T* rs_out = in_place ? a.p + static_cast<size_t>(r) * count : b.p;
        if (call("reduce_scatter " + tag, d.reduce_scatter(a.p, rs_out, count, t, op, s))) {
          auto got = (in_place ? a : b).get(count, s, in_place ? static_cast<size_t>(r) * count : 0);
          for (size_t i = 0; i < count; ++i)
            if (!same_value(got[i], expected_reduction<T>(t, op, n, static_cast<size_t>(r) * count + i))) {
              fail(detail::cat("reduce_scatter ", tag, ": element ", i));
              break;
            }
        }
        // reduce to a root that moves with the count
        const int root = static_cast<int>((count + static_cast<size_t>(o)) % un);
        a.put(in, s);
        if (call("reduce " + tag, d.reduce(a.p, in_place ? a.p : b.p, count, t, op, root, s)) && r == root) {
          auto got = (in_place ? a : b).get(count, s);
          for (size_t i = 0; i < count; ++i)
            if (!same_value(got[i], expected_reduction<T>(t, op, n, i))) {
              fail(detail::cat("reduce ", tag, " root ", root, ": element ", i));
              break;
            }
        }
        if (op != ReduceOp::kSum) continue;
        // all_gather
        std::vector<T> mine(count);
        for (size_t i = 0; i < count; ++i) mine[i] = from_int<T>(input_value(t, ReduceOp::kSum, r, i));
        a.put(mine, s);
        T* ag_in = a.p;
        if (in_place) {
          b.put(mine, s, static_cast<size_t>(r) * count);
          ag_in = b.p + static_cast<size_t>(r) * count;
        }
        if (call("all_gather " + tag, d.all_gather(ag_in, b.p, count, t, s))) {
          auto got = b.get(count * un, s);
          for (size_t i = 0; i < count * un; ++i)
            if (!same_value(got[i],
                            from_int<T>(input_value(t, ReduceOp::kSum, static_cast<int>(i / count), i % count)))) {
              fail(detail::cat("all_gather ", tag, ": element ", i));
              break;
            }
        }
        // broadcast
        a.put(in, s);
        if (call("broadcast " + tag, d.broadcast(a.p, in_place ? a.p : b.p, count, t, root, s))) {
          auto got = (in_place ? a : b).get(count, s);
          for (size_t i = 0; i < count; ++i)
            if (!same_value(got[i], from_int<T>(input_value(t, ReduceOp::kSum, root, i)))) {
              fail(detail::cat("broadcast ", tag, " root ", root, ": element ", i));
              break;
            }
        }
        // send/recv around the ring, as one group
        a.put(mine, s);
        d.group_start();
        Status st1 = d.send(a.p, count, t, (r + 1) % n, s);
        Status st2 = d.recv(b.p, count, t, (r + n - 1) % n, s);
        Status st3 = d.group_end();
        if (call("send/recv " + tag, st1.ok() ? (st2.ok() ? st3 : st2) : st1)) {
          auto got = b.get(count, s);
          for (size_t i = 0; i < count; ++i)
            if (!same_value(got[i], from_int<T>(input_value(t, ReduceOp::kSum, (r + n - 1) % n, i)))) {
              fail(detail::cat("send/recv ", tag, ": element ", i));
              break;
            }
        }
      }
  if (!call("barrier", d.barrier(s))) ++bad;
  return bad;
}

// The full matrix on one rank: every type. Counts: 0, 1, a prime, and one spanning several
// rounds of every channel's slots (the environment sets small slots). `quick`: two types and
// two counts, for processes, whose CUDA contexts take turns on a shared GPU (no MPS). Returns
// what failed ("" when nothing did).
std::string device_matrix(DeviceCommunicator& d, cudaStream_t s, bool quick = false) {
  const auto& cfg = d.config();
  const size_t big = static_cast<size_t>(cfg.slot_bytes) * static_cast<size_t>(cfg.channels) * 3 / 4 + 7;
  std::vector<size_t> counts = quick ? std::vector<size_t>{1, big} : std::vector<size_t>{0, 1, 13, big};
  DeviceBuf<uint64_t> a(big * static_cast<size_t>(d.size())), b(big * static_cast<size_t>(d.size()));
  if (!d.host().barrier().ok()) return "host barrier failed";
  std::string log;
  int bad = 0;
  for (int t = 0; t < kNumDataTypes; ++t) {
    const auto type = static_cast<DataType>(t);
    if (quick && type != DataType::kFloat32 && type != DataType::kBfloat16) continue;
    bad += dispatch_type(type, [&]<class T>() { return device_collectives<T>(d, type, counts, a.p, b.p, s, log); });
  }
  return bad ? detail::cat(bad, " failures\n", log) : std::string();
}

// The device communicator of one rank on GPU 0 and a stream; f returns what failed ("" when
// nothing did), or the set-up's error.
template <class F>
std::string with_device(Communicator& c, F f, std::optional<DeviceConfig> cfg = std::nullopt) {
  CudaFailures cuda;
  auto d = cfg ? DeviceCommunicator::create(c, 0, *cfg) : DeviceCommunicator::create(c, 0);
  if (!d.ok()) return d.status().message();
  cudaStream_t s;
  if (!CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) return cuda.text();
  std::string failed = f(**d, s, c.rank());
  cudaStreamDestroy(s);
  return failed + cuda.text();
}

// n threads as ranks, each with_device(f).
template <class F>
void on_device_ranks(int n, F f) {
  auto comms = Communicator::create_local(n, test_config());
  REQUIRE(comms.ok());
  std::vector<std::string> failed(static_cast<size_t>(n));
  on_ranks(*comms, [&](Communicator& c) { failed[static_cast<size_t>(c.rank())] = with_device(c, f); });
  for (int r = 0; r < n; ++r)
    CHECK_MESSAGE(failed[static_cast<size_t>(r)].empty(), "rank ", r, ": ", failed[static_cast<size_t>(r)]);
}

void run_threads(int n) {
  on_device_ranks(n, [](DeviceCommunicator& d, cudaStream_t s, int) { return device_matrix(d, s); });
}

// Small FIFOs: every test count spans several slots of every channel.
const std::vector<std::string> kSmallSlots = {"DCOMM_CUDA_SLOT_BYTES=4096", "DCOMM_CUDA_CHANNELS=3",
                                              "DCOMM_CUDA_SLOTS=2"};
void small_slots() {
  for (const auto& kv : kSmallSlots) {
    const size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
}
}  // namespace

TEST_CASE("reduction kernels: the host reducer's bits, every type and op, any alignment, fused second output") {
  // Offsets 0, 1 and 3 (elements) on all four pointers alike: the head is done element by
  // element, the rest in packs. "mixed": b at 0 and the others at 1, misaligned differently,
  // all element by element. Mismatches are counted, one assertion per case.
  std::mt19937 rng(23);
  cudaStream_t s = nullptr;
  struct Offsets {
    const char* name;
    size_t others, b;
  };
  const Offsets offsets[] = {{"0", 0, 0}, {"1", 1, 1}, {"3", 3, 3}, {"mixed", 1, 0}};
  for (int t = 0; t < kNumDataTypes; ++t)
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const Reducer ref = *make_host_reducer(type, op, 3, false);
      dispatch_type(type, [&]<class T>() {
        for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{4099}, size_t{(1 << 20) + 3}})
          for (const Offsets& off : offsets) {
            const size_t pad = 8, oa = off.others, ob = off.b;
            std::vector<T> a(n + pad), b(n + pad), want(n + pad);
            std::vector<uint8_t> raw((n + pad) * sizeof(T));
            for (auto& x : raw) x = static_cast<uint8_t>(rng());
            std::memcpy(static_cast<void*>(a.data()), raw.data(), raw.size());
            for (auto& x : raw) x = static_cast<uint8_t>(rng());
            std::memcpy(static_cast<void*>(b.data()), raw.data(), raw.size());
            ref.reduce(want.data(), a.data() + oa, b.data() + ob, n);
            ref.finalize(want.data(), n);
            DeviceBuf<T> da(n + pad), db(n + pad), dd(n + pad), dd2(n + pad);
            da.put(a, s);
            db.put(b, s);
            REQUIRE(reduce_on_device(dd.p + oa, dd2.p + oa, da.p + oa, db.p + ob, n, type, op, 3, s).ok());
            CUDA_OK(cudaStreamSynchronize(s));
            const std::vector<T> got = dd.get(n, s, oa), got2 = dd2.get(n, s, oa);
            size_t wrong = 0, first = n;
            for (size_t i = 0; i < n; ++i)
              if (!same_value(got[i], want[i]) || !same_value(got2[i], want[i])) {
                first = std::min(first, i);
                ++wrong;
              }
            CHECK_MESSAGE(wrong == 0, to_string(type), " ", to_string(op), " n ", n, " offsets ", off.name, ": ", wrong,
                          " wrong, the first at ", first);
          }
        return 0;
      });
    }
}

TEST_CASE("collectives on device memory: threads as ranks sharing one GPU, every type, op and collective") {
  small_slots();
  for (int n : {1, 2, 3, 4}) {
    CAPTURE(n);
    run_threads(n);
  }
}

TEST_CASE("collectives through pinned host memory (DCOMM_CUDA_P2P_DISABLE=1)") {
  small_slots();
  setenv("DCOMM_CUDA_P2P_DISABLE", "1", 1);
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_threads(n);
  }
  unsetenv("DCOMM_CUDA_P2P_DISABLE");
}

TEST_CASE("channels are bounded by what the GPU holds at once: 64 asked, 4 ranks, 512 threads a block") {
  // Every block of every rank's ring must be resident together; 64 x 4 blocks of 512 threads
  // (one a multiprocessor: the kernels use up to 128 registers a thread) are not, and without
  // the bound the rings would wait on each other until the deadline.
  DeviceConfig cfg = *DeviceConfig::from_env();
  cfg.channels = 64;
  cfg.threads = 512;
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t count = 8u << 20;
  auto comms = Communicator::create_local(4, test_config());
  REQUIRE(comms.ok());
  std::vector<std::string> failed(4);
  std::vector<int> channels(4, 0);
  on_ranks(*comms, [&](Communicator& c) {
    failed[static_cast<size_t>(c.rank())] = with_device(
        c,
        [&](DeviceCommunicator& d, cudaStream_t s, int r) -> std::string {
          channels[static_cast<size_t>(r)] = d.config().channels;
          DeviceBuf<float> a(count);
          a.put(std::vector<float>(count, static_cast<float>(r + 1)), s);
          if (!d.host().barrier().ok()) return "host barrier failed";
          Status st = d.all_reduce(a.p, a.p, count, DataType::kFloat32, ReduceOp::kSum, s);
          if (!st.ok()) return st.message();
          if (cudaStreamSynchronize(s) != cudaSuccess || !d.error().ok())
            return "the all_reduce failed: " + d.error().message();
          auto got = a.get(count, s);
          for (size_t i = 0; i < count; i += 4099)
            if (got[i] != 10.0f) return detail::cat("element ", i, " is ", got[i]);
          return "";
        },
        cfg);
  });
  for (int r = 0; r < 4; ++r) {
    CHECK_MESSAGE(failed[static_cast<size_t>(r)].empty(), "rank ", r, ": ", failed[static_cast<size_t>(r)]);
    CHECK(channels[static_cast<size_t>(r)] == channels[0]);
  }
  MESSAGE("channels for 4 ranks at 512 threads on ", sms, " multiprocessors: ", channels[0]);
  CHECK(channels[0] * 4 <= sms - spare_sms(sms));
}

TEST_CASE("a pair where one rank disables peer access talks through host memory on both ends") {
  small_slots();
  auto comms = Communicator::create_local(2, test_config());
  REQUIRE(comms.ok());
  std::vector<std::string> failed(2), paths(2);
  on_ranks(*comms, [&](Communicator& c) {
    DeviceConfig cfg = *DeviceConfig::from_env();
    cfg.p2p_disable = c.rank() == 1;  // only rank 1 asks for host memory
    failed[static_cast<size_t>(c.rank())] = with_device(
        c,
        [&](DeviceCommunicator& d, cudaStream_t s, int r) -> std::string {
          paths[static_cast<size_t>(r)] = d.path_to(1 - r);
          return device_matrix(d, s, true);
        },
        cfg);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK_MESSAGE(failed[static_cast<size_t>(r)].empty(), "rank ", r, ": ", failed[static_cast<size_t>(r)]);
    CHECK(paths[static_cast<size_t>(r)] == "host");
  }
}

TEST_CASE("a group: all-to-all as sends and receives to every rank, itself included, 3 and 6 ranks on one GPU") {
  // 6 ranks: 12 lanes each, every rank's blocks resident together (comm/device_plan.hpp).
  small_slots();
  const size_t per = 1000;
  for (int n : {3, 6}) {
    CAPTURE(n);
    on_device_ranks(n, [&](DeviceCommunicator& d, cudaStream_t s, int r) -> std::string {
      std::vector<int32_t> in(per * n);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(r * 100000 + static_cast<int>(i));
      DeviceBuf<int32_t> a(per * n), b(per * n);
      a.put(in, s);
      if (!d.host().barrier().ok()) return "host barrier failed";
      d.group_start();
      for (int p = 0; p < n; ++p) {
        d.send(a.p + static_cast<size_t>(p) * per, per, DataType::kInt32, p, s).ignore();
        d.recv(b.p + static_cast<size_t>(p) * per, per, DataType::kInt32, p, s).ignore();
      }
      bool good = d.group_end().ok() && cudaStreamSynchronize(s) == cudaSuccess;
      auto out = b.get(per * n, s);
      for (int p = 0; p < n && good; ++p)
        for (size_t i = 0; i < per; ++i)
          good = good && out[static_cast<size_t>(p) * per + i] ==
                             static_cast<int32_t>(p * 100000 + static_cast<int>(static_cast<size_t>(r) * per + i));
      return good ? "" : "wrong data";
    });
  }
}

// Calls alternating between two streams, nothing waited for in between: each launch is
// ordered after the communicator's previous one, so they never share its FIFOs at once.
std::string two_streams(DeviceCommunicator& d, cudaStream_t s1, int r, int calls, size_t count) {
  cudaStream_t s2;
  if (cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreate failed";
  std::vector<std::unique_ptr<DeviceBuf<float>>> bufs;
  for (int k = 0; k < calls; ++k) {
    bufs.push_back(std::make_unique<DeviceBuf<float>>(count));
    bufs.back()->put(std::vector<float>(count, static_cast<float>(r + 1 + k)), s1);
  }
  std::string failed;
  if (!d.host().barrier().ok()) failed = "host barrier failed";
  for (int k = 0; k < calls && failed.empty(); ++k) {
    Status st = d.all_reduce(bufs[static_cast<size_t>(k)]->p, bufs[static_cast<size_t>(k)]->p, count,
                             DataType::kFloat32, ReduceOp::kSum, k % 2 ? s2 : s1);
    if (!st.ok()) failed = st.message();
  }
  if (cudaStreamSynchronize(s1) != cudaSuccess || cudaStreamSynchronize(s2) != cudaSuccess) failed += " stream failed";
  if (!d.error().ok()) failed += " " + d.error().message();
  const int n = d.size();
  for (int k = 0; k < calls && failed.empty(); ++k) {
    auto got = bufs[static_cast<size_t>(k)]->get(count, s1);
    const float want = static_cast<float>(n * (n + 1) / 2 + n * k);
    for (size_t i = 0; i < count; i += 997)
      if (got[i] != want) {
        failed = detail::cat("call ", k, " (stream ", k % 2 + 1, ") element ", i, ": ", got[i], ", want ", want);
        break;
      }
  }
  cudaStreamDestroy(s2);
  return failed;
}

TEST_CASE("one communicator used from two streams: its launches are ordered, results exact") {
  small_slots();
  on_device_ranks(2, [](DeviceCommunicator& d, cudaStream_t s, int r) { return two_streams(d, s, r, 16, 100003); });
}

TEST_CASE("an all_reduce captured into a CUDA graph gives fresh results on every replay") {
  small_slots();
  on_device_ranks(2, [&](DeviceCommunicator& d, cudaStream_t s, int r) -> std::string {
    const size_t count = 10007;
    DeviceBuf<float> a(count), b(count);
    if (!d.host().barrier().ok()) return "host barrier failed";
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    Status st = d.all_reduce(a.p, b.p, count, DataType::kFloat32, ReduceOp::kSum, s);
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess || !st.ok()) return "capture failed: " + st.message();
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return "cudaGraphInstantiate failed";
    bool good = true;
    for (int replay = 0; replay < 3; ++replay) {
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * (replay + 1)) + static_cast<float>(i % 7);
      a.put(in, s);
      cudaGraphLaunch(exec, s);
      cudaStreamSynchronize(s);
      auto got = b.get(count, s);
      for (size_t i = 0; i < count; ++i)
        good = good && got[i] == static_cast<float>(3 * (replay + 1)) + 2.0f * static_cast<float>(i % 7);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return good ? "" : "wrong data";
  });
}

// The revoke comes from the other rank's host communicator: its fan-out aborts rank 0's, whose
// watchdog raises the kernels' abort flag.
TEST_CASE(
    "a kernel waiting for a rank that never comes ends on abort(), on another rank's revoke() and on the deadline") {
  small_slots();
  for (const std::string how : {"abort", "revoke", "deadline"}) {
    CAPTURE(how);
    const bool deadline = how == "deadline";
    auto comms = Communicator::create_local(
        2, test_config(TransportChoice::kAuto, deadline ? std::chrono::milliseconds(500) : std::chrono::seconds(60)));
    REQUIRE(comms.ok());
    std::vector<std::unique_ptr<DeviceCommunicator>> devs(2);
    on_ranks(*comms, [&](Communicator& c) {
      cudaSetDevice(0);
      auto d = DeviceCommunicator::create(c, 0);
      if (d.ok()) devs[static_cast<size_t>(c.rank())] = std::move(*d);
    });
    REQUIRE(devs[0]);
    REQUIRE(devs[1]);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    DeviceBuf<float> a(1 << 20);
    REQUIRE(devs[0]->all_reduce(a.p, a.p, 1 << 20, DataType::kFloat32, ReduceOp::kSum, s).ok());  // rank 1 never calls
    if (!deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (how == "abort") devs[0]->abort("the test gives up");
      else (*comms)[1]->revoke();
    }
    CUDA_OK(cudaStreamSynchronize(s));  // returns: the kernel gave up (else ctest's timeout ends the test)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the watchdog reads the kernel's report
    Status e = devs[0]->error();
    CHECK_FALSE(e.ok());
    if (how == "revoke") CHECK_MESSAGE((*comms)[0]->aborted(), "rank 0's host communicator after rank 1's revoke");
    if (deadline) {
      CHECK_MESSAGE(e.message().find("timed out") != std::string::npos, e.message());
      CHECK_MESSAGE(e.message().find("rank 1") != std::string::npos, e.message());
    }
    // Later calls fail at once, on both ranks (the host communicator was aborted).
    CHECK_FALSE(devs[0]->all_reduce(a.p, a.p, 16, DataType::kFloat32, ReduceOp::kSum, s).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK_FALSE(devs[1]->error().ok());
    cudaStreamDestroy(s);
    devs.clear();
  }
}

TEST_CASE("bad arguments are refused before anything is enqueued, naming the call, rank and argument") {
  auto comms = Communicator::create_local(1, test_config());
  REQUIRE(comms.ok());
  cudaSetDevice(0);
  auto d = DeviceCommunicator::create(*(*comms)[0], 0);
  REQUIRE_MESSAGE(d.ok(), d.status().message());
  std::vector<float> host(16);
  Status s = (*d)->all_reduce(host.data(), host.data(), 16, DataType::kFloat32, ReduceOp::kSum, nullptr);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_MESSAGE(s.message().find("all_reduce on rank 0") != std::string::npos, s.message());
  CHECK_MESSAGE(s.message().find("not CUDA device memory") != std::string::npos, s.message());
  DeviceBuf<float> a(16);
  s = (*d)->broadcast(a.p, a.p, 16, DataType::kFloat32, 5, nullptr);
  CHECK_MESSAGE(s.message().find("root 5 is out of range") != std::string::npos, s.message());
  s = (*d)->all_reduce(a.p, a.p, 16, static_cast<DataType>(99), ReduceOp::kSum, nullptr);
  CHECK_MESSAGE(s.message().find("unknown data type") != std::string::npos, s.message());
  CHECK((*d)->group_end().code() == ErrorCode::kInvalidArgument);
}

// Processes on one GPU take turns (no MPS): each hand-over of a FIFO slot may wait a time
// slice, so these run with the default (large) slots, few of them per call, and say how long
// each took.
void run_processes(const char* mode, int n, std::vector<std::string> env, std::chrono::seconds limit) {
  env.push_back("DCOMM_TIMEOUT_MS=" + std::to_string(std::chrono::milliseconds(limit).count() * 3 / 4));
  const auto start = std::chrono::steady_clock::now();
  auto procs = spawn_local_ranks({"/proc/self/exe", mode}, n, env);
  REQUIRE(procs.ok());
  Status s = wait_local_ranks(*procs, limit);
  MESSAGE(mode, " with ", n, " processes: ",
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count(),
          " ms");
  CHECK_MESSAGE(s.ok(), s.message());
  for (size_t r = 0; r < procs->exit_codes.size(); ++r) CHECK_MESSAGE(procs->exit_codes[r] == 0, "rank ", r);
}

// A communicator spanning "hosts" (DCOMM_TEST_RANKS_PER_HOST=1) stages every call through
// pinned memory and the host communicator; two streams' calls must not share a buffer.
TEST_CASE("the staged path (ranks on other hosts) from two streams, processes") {
  run_processes("--gpu-staged-worker", 2, {"DCOMM_TEST_RANKS_PER_HOST=1"}, std::chrono::seconds(25));
}

// One-sided windows on device memory around the ring: each rank puts into its right
// neighbour's window (a part at an offset into a larger cudaMalloc allocation, so the shared
// handle is the allocation's and the offset is carried) with a signal, waits on its stream for
// its left neighbour's, and checks the data; its pointer to the right neighbour's window reads
// what it put there. Threads or processes (CUDA IPC) on one GPU. "" when all is well.
std::string device_one_sided_ring(Communicator& c) {
  cudaSetDevice(0);
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreate failed";
  auto o = DeviceOneSided::create(c, 0, 2);
  if (!o.ok()) return o.status().message();
  const size_t n = 1 << 18;  // floats a round
  std::vector<std::string> bad;
  {
    DeviceBuf<float> block(4 * n + 1024), mine(n);
    float* window = block.p + 256;  // 1 KiB into its allocation
    auto id = (*o)->register_window(window, 3 * n * sizeof(float));
    if (!id.ok()) return id.status().message();
    const int right = (c.rank() + 1) % c.size(), left = (c.rank() + c.size() - 1) % c.size();
    for (int round = 0; round < 3 && bad.empty(); ++round) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i)
        v[i] = static_cast<float>(c.rank() * 1000 + round * 10) + static_cast<float>(i % 7);
      mine.put(v, s);
      Status st =
          (*o)->put(mine.p, n * sizeof(float), right, *id, static_cast<size_t>(round) * n * sizeof(float), 4, 1, s);
      if (st.ok()) st = (*o)->wait({{1, left, 4, 1}}, s);
      if (!st.ok()) return detail::cat("round ", round, ": ", st.message());
      DeviceBuf<float> view(window);
      auto got = view.get(n, s, static_cast<size_t>(round) * n);
      for (size_t i = 0; i < n && bad.empty(); i += 997)
        if (got[i] != static_cast<float>(left * 1000 + round * 10) + static_cast<float>(i % 7))
          bad.push_back(detail::cat("round ", round, ": element ", i, " is ", got[i]));
      // What this rank put, read back through its pointer to the right neighbour's window.
      auto* there = static_cast<float*>((*o)->peer_pointer(right, *id, static_cast<size_t>(round) * n * sizeof(float)));
      float first = -1;
      if (!there) bad.push_back("no pointer to the right neighbour's window");
      else if (cudaMemcpy(&first, there, sizeof first, cudaMemcpyDefault) != cudaSuccess ||
               first != static_cast<float>(c.rank() * 1000 + round * 10))
        bad.push_back(detail::cat("round ", round, ": the peer pointer reads ", first));
      c.barrier().ignore();  // every rank has read before the next round's puts land
    }
    if ((*o)->peer_pointer(right, *id, 3 * n * sizeof(float))) bad.push_back("a peer pointer past the window");
    if ((*o)->put(mine.p, 8, right, *id, 3 * n * sizeof(float) - 4, -1, 0, s).ok())
      bad.push_back("a put past the window");
    cudaStreamSynchronize(s);
    c.barrier().ignore();
  }
  o->reset();
  cudaStreamDestroy(s);
  return bad.empty() ? "" : bad.front();
}

TEST_CASE("suspend frees the FIFO arenas (GPU memory measured), calls in between are refused, resume works again") {
  for (const auto& kv : kSmallSlots) unsetenv(kv.substr(0, kv.find('=')).c_str());  // arenas of the default size
  on_device_ranks(2, [](DeviceCommunicator& d, cudaStream_t s, int r) -> std::string {
    const size_t count = 1 << 20;
    DeviceBuf<float> a(count), b(count);
    a.put(std::vector<float>(count, static_cast<float>(r + 1)), s);
    auto all_reduced = [&](float want) {
      Status st = d.all_reduce(a.p, b.p, count, DataType::kFloat32, ReduceOp::kSum, s);
      if (!st.ok()) return "all_reduce: " + st.message();
      const auto got = b.get(count, s);
      return std::all_of(got.begin(), got.end(), [&](float x) { return x == want; })
                 ? std::string()
                 : detail::cat("wrong data ", got[0]);
    };
    if (std::string e = all_reduced(3.f); !e.empty()) return "before: " + e;
    const uint64_t held = d.arena_bytes();
    uint64_t both = 0;
    if (held == 0 || !d.host().all_reduce(&held, &both, 1, DataType::kUint64, ReduceOp::kSum).ok())
      return detail::cat("arena bytes ", held);
    size_t free_before = 0, free_after = 0, total = 0;
    if (!d.host().barrier().ok() || (r == 0 && !CUDA_OK(cudaMemGetInfo(&free_before, &total)))) return "before";
    // Launched and not waited for: suspend waits for this communicator's launches itself.
    if (!d.all_reduce(a.p, b.p, count, DataType::kFloat32, ReduceOp::kSum, s).ok()) return "the launch before";
    if (Status st = d.suspend(); !st.ok()) return "suspend: " + st.message();
    if (!d.host().barrier().ok() || (r == 0 && !CUDA_OK(cudaMemGetInfo(&free_after, &total)))) return "after";
    const long long freed = static_cast<long long>(free_after) - static_cast<long long>(free_before);
    if (r == 0) {
      std::printf("suspend: %llu bytes of arenas on 2 ranks, %lld bytes of GPU memory freed\n",
                  static_cast<unsigned long long>(both), freed);
      if (freed < static_cast<long long>(both * 9 / 10))
        return detail::cat("suspend freed ", freed, " bytes of ", both);
    }
    if (d.arena_bytes() != 0) return detail::cat("arena bytes while suspended: ", d.arena_bytes());
    Status refused = d.all_reduce(a.p, b.p, count, DataType::kFloat32, ReduceOp::kSum, s);
    if (refused.code() != ErrorCode::kUnsupported || refused.message().find("suspended") == std::string::npos)
      return "a call while suspended: " + refused.message();
    if (d.suspend().ok()) return "a second suspend was accepted";
    if (Status st = d.resume(); !st.ok()) return "resume: " + st.message();
    if (d.arena_bytes() != held) return detail::cat("arena bytes after resume: ", d.arena_bytes(), " of ", held);
    a.put(std::vector<float>(count, static_cast<float>(2 * r + 5)), s);
    if (std::string e = all_reduced(12.f); !e.empty()) return "after resume: " + e;
    if (d.resume().ok()) return "a resume of a communicator not suspended was accepted";
    return "";
  });
}

TEST_CASE("one-sided windows on device memory: put, signal, wait and peer pointers, threads sharing one GPU") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    auto comms = Communicator::create_local(n, test_config());
    REQUIRE(comms.ok());
    std::vector<std::string> failed(static_cast<size_t>(n));
    on_ranks(*comms, [&](Communicator& c) { failed[static_cast<size_t>(c.rank())] = device_one_sided_ring(c); });
    for (int r = 0; r < n; ++r)
      CHECK_MESSAGE(failed[static_cast<size_t>(r)].empty(), "rank ", r, ": ", failed[static_cast<size_t>(r)]);
  }
}

// The first H200 run: a put (then cudaMemcpyAsync) issued while the peer's wait kernel was
// already spinning on the same GPU waited for that wait's deadline (CUDA does not run a copy
// between two addresses of one GPU beside other streams' work). Rank 1's wait is enqueued
// and spinning before rank 0 puts; it must end with the data (before, it ended at the deadline).
TEST_CASE("one-sided windows on device memory: a put lands while the peer's wait already spins on the same GPU") {
  auto comms = Communicator::create_local(2, test_config());
  REQUIRE(comms.ok());
  std::vector<std::string> failed(2);
  on_ranks(*comms, [&](Communicator& c) {
    CudaFailures cuda;
    cudaSetDevice(0);
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto o = DeviceOneSided::create(c, 0);
    std::string& why = failed[static_cast<size_t>(c.rank())];
    if (!o.ok()) return void(why = o.status().message());
    const size_t n = 1 << 20;
    {
      DeviceBuf<float> window(n), src(n);
      src.put(std::vector<float>(n, 7.f), s);
      auto id = (*o)->register_window(window.p, n * sizeof(float));
      if (!id.ok()) return void(why = id.status().message());
      if (c.rank() == 1) {
        Status st = (*o)->wait({{3, 0, 2, 0}}, s);
        c.barrier().ignore();  // the wait is enqueued (and running) before rank 0 puts
        CUDA_OK(cudaStreamSynchronize(s));
        if (!st.ok() || !(*o)->error().ok()) why = "wait: " + st.message() + (*o)->error().message();
        const auto got = window.get(n, s);
        if (why.empty() && (got[0] != 7.f || got[n - 1] != 7.f)) why = detail::cat("window holds ", got[0]);
      } else {
        c.barrier().ignore();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        for (int i = 0; i < 3 && why.empty(); ++i)
          if (Status st = (*o)->put(src.p, n * sizeof(float), 1, *id, 0, 2, 0, s); !st.ok()) why = st.message();
        CUDA_OK(cudaStreamSynchronize(s));
      }
      c.barrier().ignore();
    }
    o->reset();
    cudaStreamDestroy(s);
    why += cuda.text();
  });
  for (int r = 0; r < 2; ++r)
    CHECK_MESSAGE(failed[static_cast<size_t>(r)].empty(), "rank ", r, ": ", failed[static_cast<size_t>(r)]);
}

TEST_CASE("one-sided windows on device memory: a wait for a signal that never comes ends at the deadline, naming it") {
  auto comms = Communicator::create_local(2, test_config(TransportChoice::kAuto, std::chrono::milliseconds(300)));
  REQUIRE(comms.ok());
  std::vector<std::string> messages(2);
  on_ranks(*comms, [&](Communicator& c) {
    cudaSetDevice(0);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    auto o = DeviceOneSided::create(c, 0);
    if (!o.ok()) return void(messages[static_cast<size_t>(c.rank())] = "create: " + o.status().message());
    if (c.rank() == 0) {
      Status st = (*o)->wait({{1, 1, 7, 0}}, s);  // rank 1 never signals
      cudaStreamSynchronize(s);                   // returns: the kernel gave up
      messages[0] = st.ok() ? (*o)->error().message() : "enqueue: " + st.message();
    }
    c.barrier().ignore();
    o->reset();
    cudaStreamDestroy(s);
  });
  CHECK_MESSAGE(messages[0].find("rank 1") != std::string::npos, messages[0]);
  CHECK_MESSAGE(messages[0].find("index 7") != std::string::npos, messages[0]);
  CHECK_MESSAGE(messages[1].empty(), messages[1]);
}

TEST_CASE("one-sided windows on device memory: processes sharing one GPU through CUDA IPC") {
  run_processes("--gpu-one-sided-worker", 2, {}, std::chrono::seconds(20));
}

// Last: the slowest case. Processes take turns on the GPU, so every call costs time slices:
// two types (the threads cases cover them all), and on the first H200 run 2 processes took
// 22 s with four types.
TEST_CASE("collectives on device memory: processes sharing one GPU through CUDA IPC") {
  for (int n : {2, 3}) {
    CAPTURE(n);
    run_processes("--gpu-worker", n, {}, std::chrono::seconds(40));
  }
}

int main(int argc, char** argv) {
  detail::raise_device_connections();  // before the first CUDA call: thread ranks each use a stream
  // Listing needs no device (scripts/gpu-check.sh lists the cases to run each on its own,
  // and checks that the binary starts at all).
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--list-test-cases", 0) == 0 || std::string(argv[i]) == "-ltc")
      return doctest::Context(argc, argv).run();
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s); the GPU tests need one\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  if (argc > 1 && std::string(argv[1]) == "--gpu-worker") {  // one rank of the processes test
    auto c = Communicator::from_env();
    if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().message().c_str()), 2;
    std::string failed =
        with_device(**c, [](DeviceCommunicator& d, cudaStream_t s, int) { return device_matrix(d, s, true); });
    if (!failed.empty()) std::fprintf(stderr, "rank %d: %s\n", (*c)->rank(), failed.c_str());
    return failed.empty() ? 0 : 1;
  }
  if (argc > 1 && std::string(argv[1]) == "--gpu-one-sided-worker") {  // one rank of the one-sided test
    auto c = Communicator::from_env();
    if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().message().c_str()), 2;
    std::string failed = device_one_sided_ring(**c);
    if (!failed.empty()) std::fprintf(stderr, "rank %d: %s\n", (*c)->rank(), failed.c_str());
    return failed.empty() ? 0 : 1;
  }
  if (argc > 1 && std::string(argv[1]) == "--gpu-staged-worker") {  // one rank of the staged test
    auto c = Communicator::from_env();
    if (!c.ok()) return std::fprintf(stderr, "%s\n", c.status().message().c_str()), 2;
    std::string failed = with_device(**c, [](DeviceCommunicator& d, cudaStream_t s, int r) {
      if (std::string(d.path_to(1 - r)) != "staged") return std::string("the pair is not staged: ") + d.path_to(1 - r);
      return two_streams(d, s, r, 8, 1 << 20);
    });
    if (!failed.empty()) std::fprintf(stderr, "rank %d: %s\n", (*c)->rank(), failed.c_str());
    return failed.empty() ? 0 : 1;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
