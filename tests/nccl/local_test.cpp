// dcomm's libnccl.so.2 (built against the toolkit's nccl.h) without MPI: ncclCommInitAll with a
// group over its communicators from one thread, and abort: a peer killed mid-job (the
// survivor's call fails, ncclCommGetAsyncError reports it, ncclGetLastError names the rank,
// and ncclCommAbort returns), ncclCommAbort from another thread ending a call that waits on
// a peer, and ncclCommAbort inside a group. Ranks are forked processes; rank 0 makes the id.
// `device` (the GPU check; exit 77 without a GPU): 2 ranks on GPU 0 as threads of this process
// (ncclCommInitAll), every collective on device memory from one thread in groups, PreMulSum with
// a device scalar, and an all_reduce captured in a CUDA graph and replayed.
// `env` (run by ctest with NCCL variables set): each mapped onto dcomm's when the library
// loaded, dcomm's own kept where set, and the variable without an equivalent named once.
//   nccl_local_test all|initall|killed|abort_wait|abort_group|device|env
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl_check.hpp"

namespace {

void initall() {
  const int n = 3;
  ncclComm_t comms[n];
  CHECK(ncclCommInitAll(comms, n, nullptr) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(nullptr));
  std::vector<std::vector<float>> data(n, std::vector<float>(1000));
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 1000; ++i) data[r][i] = static_cast<float>(r * i);
  CHECK(ncclGroupStart() == ncclSuccess, "group start");
  for (int r = 0; r < n; ++r)
    CHECK(ncclAllReduce(data[r].data(), data[r].data(), 1000, ncclFloat32, ncclSum, comms[r], nullptr) == ncclSuccess,
          "enqueue");
  CHECK(ncclGroupEnd() == ncclSuccess, "ncclGroupEnd over 3 comms: %s", ncclGetLastError(nullptr));
  for (int r = 0; r < n; ++r) {
    CHECK(data[r][10] == 30.f, "InitAll rank %d got %g", r, data[r][10]);
    int rank = -1;
    ncclCommUserRank(comms[r], &rank);
    CHECK(rank == r, "comm %d says rank %d", r, rank);
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess, "destroy");
  }
}

// Forks `ranks` processes running body(rank, comm) on one communicator; the result is
// whether every child exited 0 (children killed on purpose are in `killed`).
bool forked(int ranks, const std::function<int(int, ncclComm_t)>& body, std::vector<int> killed = {}) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      ncclUniqueId id;
      if (r == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
        for (int k = 1; k < ranks; ++k)
          if (write(fds[1], &id, sizeof id) != sizeof id) _exit(3);
      } else if (read(fds[0], &id, sizeof id) != sizeof id) {
        _exit(3);
      }
      alarm(60);  // a hang is a failure, not a stuck CI
      ncclComm_t comm = nullptr;
      if (ncclCommInitRank(&comm, ranks, id, r) != ncclSuccess) {
        std::printf("rank %d: init failed: %s\n", r, ncclGetLastError(nullptr));
        _exit(4);
      }
      int rc = body(r, comm);
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  bool ok = true;
  for (int r = 0; r < ranks; ++r) {
    int status = 0;
    waitpid(pids[static_cast<size_t>(r)], &status, 0);
    const bool meant = std::find(killed.begin(), killed.end(), r) != killed.end();
    if (!meant && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::printf("FAIL: rank %d ended with status %d\n", r, status);
      ok = false;
    }
  }
  close(fds[0]);
  close(fds[1]);
  return ok;
}

// A peer killed after the first call: the survivor's next call fails, the async error is set,
// the last error names the dead rank, and ncclCommAbort returns.
void killed() {
  bool ok = forked(2,
                   [](int rank, ncclComm_t comm) {
                     float x = 1;
                     if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess) return 5;
                     if (rank == 1) raise(SIGKILL);
                     auto t0 = std::chrono::steady_clock::now();
                     std::vector<float> big(1 << 20, 1.f);
                     ncclResult_t r = ncclSuccess;
                     for (int i = 0; i < 100 && r == ncclSuccess; ++i)
                       r = ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat32, ncclSum, comm, nullptr);
                     const std::string why = ncclGetLastError(comm);
                     std::printf("rank 0: call failed after %.2f s: %s: %s\n", seconds_since(t0), ncclGetErrorString(r),
                                 why.c_str());
                     ncclResult_t async = ncclSuccess;
                     ncclCommGetAsyncError(comm, &async);
                     int bad = 0;
                     if (r == ncclSuccess) std::printf("FAIL: calls with a dead peer succeeded\n"), ++bad;
                     if (async == ncclSuccess || async == ncclInProgress)
                       std::printf("FAIL: async error is %d\n", async), ++bad;
                     if (why.find("rank 1") == std::string::npos)
                       std::printf("FAIL: the error does not name rank 1\n"), ++bad;
                     auto t1 = std::chrono::steady_clock::now();
                     if (ncclCommAbort(comm) != ncclSuccess) std::printf("FAIL: ncclCommAbort failed\n"), ++bad;
                     std::printf("rank 0: ncclCommAbort returned in %.3f s\n", seconds_since(t1));
                     return bad;
                   },
                   {1});
  CHECK(ok, "killed-peer run");
}

// Rank 1 is late; rank 0's call waits on it until another thread of rank 0 aborts the comm.
void abort_wait() {
  bool ok = forked(2, [](int rank, ncclComm_t comm) {
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      float x = 1;  // the abort reached this rank: its call fails fast
      ncclResult_t r = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
      ncclCommAbort(comm);
      return r == ncclSuccess ? 6 : 0;
    }
    ncclResult_t r = ncclSuccess;
    double waited = 0;
    std::thread caller([&] {
      auto t0 = std::chrono::steady_clock::now();
      float x = 1;
      r = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
      waited = seconds_since(t0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto t1 = std::chrono::steady_clock::now();
    ncclResult_t a = ncclCommAbort(comm);
    const double abort_s = seconds_since(t1);
    caller.join();
    std::printf("rank 0: the waiting call returned %s after %.2f s; ncclCommAbort took %.3f s\n", ncclGetErrorString(r),
                waited, abort_s);
    return a == ncclSuccess && r != ncclSuccess && waited < 2.5 ? 0 : 7;
  });
  CHECK(ok, "abort ending a waiting call");
}

// ncclCommAbort inside a group (torch wraps its aborts so): the group's calls on that comm
// are dropped and the group ends cleanly. One call first, so that both ranks are past init (a
// rank may return from init first, and its abort would fail the other's init, rightly). Its
// result does not matter: the peer's abort may end it, but the peer was past that call then.
void abort_group() {
  bool ok = forked(2, [](int, ncclComm_t comm) {
    float x = 1;
    (void)ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
    if (ncclGroupStart() != ncclSuccess) return 8;
    ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr);
    if (ncclCommAbort(comm) != ncclSuccess) return 9;
    return ncclGroupEnd() == ncclSuccess ? 0 : 10;
  });
  CHECK(ok, "abort inside a group");
}

// ---- the NCCL environment ---------------------------------------------------------------------

void env() {
  auto is = [](const char* name, const char* want) {
    const char* got = std::getenv(name);
    CHECK(got && std::strcmp(got, want) == 0, "%s is '%s', want '%s'", name, got ? got : "(unset)", want);
  };
  is("DCOMM_DEBUG", "INFO");                                  // NCCL_DEBUG=INFO
  is("DCOMM_ALGO", "all_reduce:double_tree;broadcast:ring");  // NCCL_ALGO=allreduce:Tree;broadcast:Ring
  is("DCOMM_SOCKET_IFNAME", "lo");  // DCOMM_SOCKET_IFNAME=lo wins over NCCL_SOCKET_IFNAME=eth9
  is("DCOMM_IB_HCA", "mlx5_0:1");   // NCCL_IB_HCA==mlx5_0:1,mlx5_1
  CHECK(std::getenv("DCOMM_CUDA_P2P_DISABLE") == nullptr,
        "NCCL_P2P_DISABLE was not set, yet DCOMM_CUDA_P2P_DISABLE is");
  // The log (NCCL_DEBUG_FILE, mapped to DCOMM_DEBUG_FILE) names NCCL_NO_SUCH_KNOB once.
  const char* pattern = std::getenv("DCOMM_DEBUG_FILE");
  CHECK(pattern != nullptr, "NCCL_DEBUG_FILE was not mapped");
  if (!pattern) return;
  std::string path = pattern;  // ".../nccl_env.%p.log": this process's own log
  if (size_t at = path.find("%p"); at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  const char* file = path.c_str();
  int version = 0;
  ncclGetVersion(&version);  // the library is loaded and its log written by now
  FILE* f = std::fopen(file, "r");
  CHECK(f != nullptr, "no log at %s", file);
  if (!f) return;
  char line[1024];
  int named = 0, wins = 0;
  while (std::fgets(line, sizeof line, f)) {
    named += std::strstr(line, "NCCL_NO_SUCH_KNOB has no dcomm equivalent") != nullptr;
    wins += std::strstr(line, "NCCL_SOCKET_IFNAME is set but DCOMM_SOCKET_IFNAME wins") != nullptr;
  }
  std::fclose(f);
  std::remove(file);
  CHECK(named == 1, "NCCL_NO_SUCH_KNOB named %d times in %s", named, file);
  CHECK(wins == 1, "the DCOMM_SOCKET_IFNAME precedence was logged %d times", wins);
}

// ---- device memory (the GPU check) -------------------------------------------------------------

#define CUDA_CHECK(call) CHECK((call) == cudaSuccess, "%s: %s", #call, cudaGetErrorString(cudaGetLastError()))
#define NCCL_CHECK(call) CHECK((call) == ncclSuccess, "%s: %s", #call, ncclGetLastError(nullptr))

int device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: the device-memory test is skipped\n");
    return 77;
  }
  const int P = 2;
  const size_t count = (16 << 20) / sizeof(float) + 3;  // 16 MiB and a ragged tail
  int devs[P] = {0, 0};
  ncclComm_t comms[P];
  NCCL_CHECK(ncclCommInitAll(comms, P, devs));
  cudaStream_t streams[P];
  float* send[P];
  float* recv[P];
  float* scalar[P];
  for (int r = 0; r < P; ++r) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&send[r], count * P * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&recv[r], count * P * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&scalar[r], sizeof(float)));
    std::vector<float> h(count * P);
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<float>(r + 1 + static_cast<int>(i % 5));
    CUDA_CHECK(cudaMemcpy(send[r], h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    const float three = 3.f;
    CUDA_CHECK(cudaMemcpy(scalar[r], &three, sizeof three, cudaMemcpyHostToDevice));
  }
  auto input = [&](int r, size_t i) { return static_cast<float>(r + 1 + static_cast<int>(i % 5)); };
  auto fetch = [&](int r, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaStreamSynchronize(streams[r]));
    CUDA_CHECK(cudaMemcpy(h.data(), recv[r], n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
  };
  auto grouped = [&](const std::function<ncclResult_t(int)>& call) {
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < P; ++r) NCCL_CHECK(call(r));
    NCCL_CHECK(ncclGroupEnd());
  };
  // all_reduce sum, max, avg and PreMulSum (device scalar 3)
  const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclAvg};
  for (ncclRedOp_t op : ops) {
    grouped([&](int r) { return ncclAllReduce(send[r], recv[r], count, ncclFloat32, op, comms[r], streams[r]); });
    for (int r = 0; r < P; ++r) {
      auto h = fetch(r, count);
      for (size_t i : {size_t{0}, size_t{7}, count - 1}) {
        const float a = input(0, i), b = input(1, i);
        const float want = op == ncclSum ? a + b : op == ncclMax ? std::max(a, b) : (a + b) / 2;
        CHECK(h[i] == want, "device all_reduce op %d rank %d element %zu: %g, want %g", op, r, i, h[i], want);
      }
    }
  }
  ncclRedOp_t premul[P];
  for (int r = 0; r < P; ++r)
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&premul[r], scalar[r], ncclFloat32, ncclScalarDevice, comms[r]));
  grouped([&](int r) { return ncclAllReduce(send[r], recv[r], count, ncclFloat32, premul[r], comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count);
    CHECK(h[9] == 3 * (input(0, 9) + input(1, 9)), "device PreMulSum rank %d: %g", r, h[9]);
    NCCL_CHECK(ncclRedOpDestroy(premul[r], comms[r]));
  }
  // One group per rank holding an in-place all-to-all and two PreMulSum all_reduces: each
  // call's scratch (the all-to-all's copy, the scaled inputs) must outlive the group's kernels,
  // which start at ncclGroupEnd; freed before, the second scaled input lands in the first's.
  float* ata[P];
  for (int r = 0; r < P; ++r) {
    CUDA_CHECK(cudaMalloc(&ata[r], count * P * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(ata[r], send[r], count * P * sizeof(float), cudaMemcpyDeviceToDevice));
    NCCL_CHECK(ncclRedOpCreatePreMulSum(&premul[r], scalar[r], ncclFloat32, ncclScalarDevice, comms[r]));
  }
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < P; ++r) {
    NCCL_CHECK(ncclAlltoAll(ata[r], ata[r], count, ncclFloat32, comms[r], streams[r]));
    NCCL_CHECK(ncclAllReduce(send[r], recv[r], count, ncclFloat32, premul[r], comms[r], streams[r]));
    NCCL_CHECK(ncclAllReduce(send[r] + count, recv[r] + count, count, ncclFloat32, premul[r], comms[r], streams[r]));
  }
  NCCL_CHECK(ncclGroupEnd());
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count * P);
    for (size_t i : {size_t{9}, count + 9, count - 1, 2 * count - 1})
      CHECK(h[i] == 3 * (input(0, i) + input(1, i)), "grouped PreMulSum rank %d element %zu: %g", r, i, h[i]);
    std::vector<float> a(count * P);
    CUDA_CHECK(cudaMemcpy(a.data(), ata[r], a.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int from = 0; from < P; ++from)
      for (size_t i : {size_t{1}, count - 1}) {
        const float want = input(from, static_cast<size_t>(r) * count + i);
        CHECK(a[static_cast<size_t>(from) * count + i] == want,
              "grouped in-place all-to-all rank %d from %d: %g, want %g", r, from,
              a[static_cast<size_t>(from) * count + i], want);
      }
    NCCL_CHECK(ncclRedOpDestroy(premul[r], comms[r]));
    CUDA_CHECK(cudaFree(ata[r]));
  }
  // all_gather, reduce_scatter, broadcast from 1, all-to-all
  grouped([&](int r) { return ncclAllGather(send[r], recv[r], count, ncclFloat32, comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count * P);
    CHECK(h[count + 4] == input(1, 4) && h[4] == input(0, 4), "device all_gather rank %d", r);
  }
  grouped(
      [&](int r) { return ncclReduceScatter(send[r], recv[r], count, ncclFloat32, ncclSum, comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count);
    const size_t i = static_cast<size_t>(r) * count + 2;
    CHECK(h[2] == input(0, i) + input(1, i), "device reduce_scatter rank %d: %g", r, h[2]);
  }
  grouped([&](int r) { return ncclBroadcast(send[r], recv[r], count, ncclFloat32, 1, comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) CHECK(fetch(r, count)[11] == input(1, 11), "device broadcast rank %d", r);
  grouped([&](int r) { return ncclAlltoAll(send[r], recv[r], count, ncclFloat32, comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count * P);
    CHECK(h[count + 1] == input(1, static_cast<size_t>(r) * count + 1), "device all-to-all rank %d", r);
  }
  // An all_reduce captured in a graph on each stream, replayed twice (in place: doubles, then 4x).
  for (int r = 0; r < P; ++r)
    CUDA_CHECK(cudaMemcpyAsync(recv[r], send[r], count * sizeof(float), cudaMemcpyDeviceToDevice, streams[r]));
  for (int r = 0; r < P; ++r) CUDA_CHECK(cudaStreamSynchronize(streams[r]));
  cudaGraph_t graphs[P];
  cudaGraphExec_t execs[P];
  for (int r = 0; r < P; ++r) CUDA_CHECK(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeRelaxed));
  grouped([&](int r) { return ncclAllReduce(recv[r], recv[r], count, ncclFloat32, ncclSum, comms[r], streams[r]); });
  for (int r = 0; r < P; ++r) {
    CUDA_CHECK(cudaStreamEndCapture(streams[r], &graphs[r]));
    CUDA_CHECK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
  }
  for (int rep = 0; rep < 2; ++rep)
    for (int r = 0; r < P; ++r) CUDA_CHECK(cudaGraphLaunch(execs[r], streams[r]));
  for (int r = 0; r < P; ++r) {
    auto h = fetch(r, count);
    const float once = input(0, 3) + input(1, 3);
    CHECK(h[3] == 2 * once, "graph replays rank %d: %g, want %g", r, h[3], 2 * once);
  }
  for (int r = 0; r < P; ++r) {
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comms[r], &async));
    CHECK(async == ncclSuccess, "async error %d", async);
  }
  for (int r = 0; r < P; ++r) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
  }
  for (int r = 0; r < P; ++r) NCCL_CHECK(ncclCommDestroy(comms[r]));  // NCCL's idiom: one thread, in turn
  std::printf(failures ? "device: FAILED\n" : "device: ok (2 ranks on GPU 0, 16 MiB)\n");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "all";
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (what == "all") {  // each in a fresh process: a fork must not inherit another test's threads
    for (const char* t : {"initall", "killed", "abort_wait", "abort_group"}) {
      const std::string cmd = std::string(argv[0]) + " " + t;
      std::printf("== %s\n", t);
      CHECK(std::system(cmd.c_str()) == 0, "%s failed", t);
    }
  }
  if (what == "initall") initall();
  if (what == "killed") killed();
  if (what == "abort_wait") abort_wait();
  if (what == "abort_group") abort_group();
  if (what == "device") return device();
  if (what == "env") env();
  std::printf(failures ? "FAILED: %d\n" : "ok\n", failures);
  return failures ? 1 : 0;
}
