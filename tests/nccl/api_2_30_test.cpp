// What NCCL 2.30 adds, through dcomm's libnccl.so.2, built against dcomm's own nccl.h (checked
// fact by fact against 2.30.7's by nccl_abi): the version; configs of both sizes (a 2.28
// program's 80 bytes and 2.30's 96); the ncclParam* functions over dcomm's settings and the
// NCCL variables it honours; windows (the user pointer, this rank's device-API pointer, a
// peer's refused by name); ncclCommQueryProperties written only as far as its size says; the
// device API's teams; memory statistics; suspend and resume (blocking on two ranks, and
// non-blocking); a non-blocking call failing in the background; shrink, revoke and grow. `device`: windows on device memory (GPU check).
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../nccl/include/nccl.h"
#include "nccl_check.hpp"

// The device API's host functions (nccl_device/core.h), as NCCL 2.30 declares them.
struct Team {
  int nRanks, rank, stride;
};
struct Properties {
  size_t size;
  unsigned int magic, version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType, nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
};
extern "C" {
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, Properties* props);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr);
Team ncclTeamWorld(ncclComm_t comm);
Team ncclTeamLsa(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, Team team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, Team team, int rank);
}

namespace {

bool says(const char* what) { return std::strstr(ncclGetLastError(nullptr), what) != nullptr; }

// One rank alone, with `config` (NULL: none).
ncclComm_t single(ncclConfig_t* config) {
  ncclUniqueId id;
  CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(nullptr));
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, config);
  if (r == ncclInProgress) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess, "async error");
    r = state;
  }
  CHECK(r == ncclSuccess, "ncclCommInitRankConfig: %s", ncclGetLastError(nullptr));
  return comm;
}

void version_and_configs() {
  int v = 0;
  CHECK(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE && v == 23007, "ncclGetVersion gave %d", v);
  CHECK(std::strcmp(ncclGetErrorString(ncclTimeout), "unknown result code") != 0, "ncclTimeout has no string");
  ncclConfig_t now = NCCL_CONFIG_INITIALIZER;
  now.blocking = 0;
  now.numRmaCtx = 2;
  CHECK(sizeof now == 96, "a 2.30 config is %zu bytes", sizeof now);
  ncclComm_t a = single(&now);
  // A program built against 2.28 passes 80 bytes and version 22809; the fields past them are
  // never read (here: garbage).
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = 80;
  old.version = 22809;
  old.blocking = 1;
  old.graphUsageMode = old.numRmaCtx = old.maxP2pPeers = old.graphStreamOrdering = 0x5a5a5a5a;
  ncclComm_t b = single(&old);
  int n = 0;
  CHECK(a && ncclCommCount(a, &n) == ncclSuccess && n == 1, "2.30 config: count %d", n);
  CHECK(b && ncclCommCount(b, &n) == ncclSuccess && n == 1, "2.28 config: count %d", n);
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t c = nullptr;
  CHECK(ncclCommInitRankConfig(&c, 1, id, 0, &bad) == ncclInvalidArgument && says("NCCL_CONFIG_INITIALIZER"),
        "a config without the magic: %s", ncclGetLastError(nullptr));
  // A non-blocking comm suspends and resumes in the background.
  for (ncclResult_t (*step)(ncclComm_t) : {+[](ncclComm_t x) { return ncclCommSuspend(x, NCCL_SUSPEND_MEM); },
                                           +[](ncclComm_t x) { return ncclCommResume(x); }}) {
    ncclResult_t r = step(a), state = ncclInProgress;
    CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking suspend/resume: %d", static_cast<int>(r));
    while (state == ncclInProgress) ncclCommGetAsyncError(a, &state);
    CHECK(state == ncclSuccess, "non-blocking suspend/resume ended with %d", static_cast<int>(state));
  }
  uint64_t suspended = 1;
  CHECK(ncclCommMemStats(a, ncclStatGpuMemSuspended, &suspended) == ncclSuccess && suspended == 0, "resumed");
  ncclCommDestroy(a);
  ncclCommDestroy(b);
}

void params() {
  setenv("DCOMM_SLOTS", "12", 1);
  setenv("NCCL_IB_HCA", "=mlx5_3:1", 1);
  setenv("DCOMM_SOCKET_IFNAME", "lo", 1);
  unsetenv("NCCL_SOCKET_IFNAME");
  ncclParamHandle_t slots = nullptr, timeout = nullptr, spin = nullptr, hca = nullptr, again = nullptr;
  CHECK(ncclParamBind(&slots, "DCOMM_SLOTS") == ncclSuccess && slots, "bind DCOMM_SLOTS: %s",
        ncclGetLastError(nullptr));
  CHECK(ncclParamBind(&again, "DCOMM_SLOTS") == ncclSuccess && again == slots, "a key binds to one handle");
  int32_t i32 = 0;
  uint64_t u64 = 0;
  CHECK(ncclParamGetI32(slots, &i32) == ncclSuccess && i32 == 12, "DCOMM_SLOTS read %d, set 12", i32);
  CHECK(ncclParamGetU64(slots, &u64) == ncclSuccess && u64 == 12, "DCOMM_SLOTS as u64: %llu",
        static_cast<unsigned long long>(u64));
  setenv("DCOMM_SLOTS", "9", 1);  // read when asked, not when bound
  CHECK(ncclParamGetI32(slots, &i32) == ncclSuccess && i32 == 9, "DCOMM_SLOTS read %d after setting 9", i32);
  unsetenv("DCOMM_SLOTS");
  CHECK(ncclParamGetI32(slots, &i32) == ncclSuccess && i32 == 8, "DCOMM_SLOTS' default read as %d", i32);
  CHECK(ncclParamBind(&timeout, "DCOMM_TIMEOUT_MS") == ncclSuccess, "bind DCOMM_TIMEOUT_MS");
  int8_t i8 = 0;
  CHECK(ncclParamGetI8(timeout, &i8) == ncclInvalidArgument && says("DCOMM_TIMEOUT_MS") && says("8 bits"),
        "60000 into int8: %s", ncclGetLastError(nullptr));
  CHECK(ncclParamBind(&spin, "DCOMM_SPIN") == ncclSuccess, "bind DCOMM_SPIN");
  uint8_t u8 = 0;
  CHECK(ncclParamGetU8(spin, &u8) == ncclInvalidArgument, "-1 read as unsigned");
  CHECK(ncclParamBind(&hca, "NCCL_IB_HCA") == ncclSuccess, "bind NCCL_IB_HCA");
  const char* s = nullptr;
  CHECK(ncclParamGetStr(hca, &s) == ncclSuccess && s && std::string(s) == "=mlx5_3:1", "NCCL_IB_HCA read '%s'",
        s ? s : "(null)");
  int len = 0;
  CHECK(ncclParamGetParameter("NCCL_SOCKET_IFNAME", &s, &len) == ncclSuccess && std::string(s) == "lo" && len == 2,
        "unset NCCL_SOCKET_IFNAME reads its dcomm equivalent: '%s'", s ? s : "(null)");
  char raw[4] = {};
  CHECK(ncclParamGet(hca, raw, 4, &len) == ncclInvalidArgument && says("maxLen"), "9 bytes into 4");
  char big[32] = {};
  CHECK(ncclParamGet(hca, big, 32, &len) == ncclSuccess && len == 9 && std::memcmp(big, "=mlx5_3:1", 9) == 0,
        "raw NCCL_IB_HCA: %d bytes", len);
  ncclParamHandle_t none = nullptr;
  CHECK(ncclParamBind(&none, "NCCL_NO_SUCH_PARAM") == ncclInvalidArgument && says("NCCL_NO_SUCH_PARAM"),
        "an unknown key: %s", ncclGetLastError(nullptr));
  const char** keys = nullptr;
  int n = 0;
  CHECK(ncclParamGetAllParameterKeys(&keys, &n) == ncclSuccess && n > 20, "%d keys", n);
  bool algo = false, cma = false;
  for (int i = 0; i < n; ++i) {
    algo = algo || std::string(keys[i]) == "NCCL_ALGO";
    cma = cma || std::string(keys[i]) == "DCOMM_CMA_BYTES";
  }
  CHECK(algo && cma, "NCCL_ALGO and DCOMM_CMA_BYTES among the keys");
  ncclParamDumpAll();
}

void windows_and_device_api() {
  ncclComm_t comms[2];
  CHECK(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(nullptr));
  std::vector<float> data[2] = {std::vector<float>(1024, 1.f), std::vector<float>(1024, 2.f)};
  ncclGroupStart();
  for (int r = 0; r < 2; ++r)
    ncclAllReduce(data[r].data(), data[r].data(), 1024, ncclFloat32, ncclSum, comms[r], nullptr);
  CHECK(ncclGroupEnd() == ncclSuccess && data[0][7] == 3.f && data[1][7] == 3.f, "all_reduce: %s",
        ncclGetLastError(nullptr));
  for (int r = 0; r < 2; ++r) {
    ncclComm_t c = comms[r];
    Properties props{};
    props.size = sizeof props;
    props.magic = NCCL_API_MAGIC;
    props.version = NCCL_VERSION_CODE;
    props.hostRmaSupport = false;
    CHECK(ncclCommQueryProperties(c, &props) == ncclSuccess && props.rank == r && props.nRanks == 2 &&
              !props.deviceApiSupport && props.hostRmaSupport && props.nLsaTeams == 0,
          "rank %d: properties rank %d of %d", r, props.rank, props.nRanks);
    Properties shorter{};  // a caller whose struct ends after nRanks: nothing past it is written
    shorter.size = offsetof(Properties, cudaDev);
    shorter.magic = NCCL_API_MAGIC;
    shorter.cudaDev = 12345;
    CHECK(ncclCommQueryProperties(c, &shorter) == ncclSuccess && shorter.nRanks == 2 && shorter.cudaDev == 12345,
          "a shorter properties struct: cudaDev %d", shorter.cudaDev);

    Team world = ncclTeamWorld(c), lsa = ncclTeamLsa(c);
    CHECK(world.nRanks == 2 && world.rank == r && world.stride == 1, "world team {%d, %d, %d}", world.nRanks,
          world.rank, world.stride);
    CHECK(lsa.nRanks == 1 && lsa.rank == 0, "the LSA team is this rank: {%d, %d}", lsa.nRanks, lsa.rank);
    CHECK(ncclTeamRankToWorld(c, world, 1 - r) == 1 - r && ncclTeamRankToWorld(c, world, 2) == -1, "world ranks");
    CHECK(ncclTeamRankToLsa(c, world, r) == 0 && ncclTeamRankToLsa(c, world, 1 - r) == -1, "LSA ranks");

    uint64_t total = 0, persist = 0, suspendable = 0, suspended = 1;
    CHECK(ncclCommMemStats(c, ncclStatGpuMemTotal, &total) == ncclSuccess && total > 0, "held %llu bytes",
          static_cast<unsigned long long>(total));
    ncclCommMemStats(c, ncclStatGpuMemPersist, &persist);
    ncclCommMemStats(c, ncclStatGpuMemSuspend, &suspendable);
    ncclCommMemStats(c, ncclStatGpuMemSuspended, &suspended);
    CHECK(suspendable > 0 && persist + suspendable == total && suspended == 0,
          "stats: total %llu persist %llu suspendable %llu", static_cast<unsigned long long>(total),
          static_cast<unsigned long long>(persist), static_cast<unsigned long long>(suspendable));
    CHECK(ncclCommMemStats(c, static_cast<ncclCommMemStat_t>(9), &total) == ncclInvalidArgument, "an unknown stat");
  }
  // Suspend and resume, collective: one thread a rank.
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      ncclComm_t c = comms[r];
      CHECK(ncclCommSuspend(c, NCCL_SUSPEND_MEM) == ncclSuccess, "suspend: %s", ncclGetLastError(c));
      uint64_t suspendable = 1, suspended = 0;
      ncclCommMemStats(c, ncclStatGpuMemSuspend, &suspendable);
      ncclCommMemStats(c, ncclStatGpuMemSuspended, &suspended);
      CHECK(suspendable == 0 && suspended == 1, "suspended: %llu bytes still suspendable",
            static_cast<unsigned long long>(suspendable));
      CHECK(ncclAllReduce(data[r].data(), data[r].data(), 4, ncclFloat32, ncclSum, c, nullptr) == ncclInvalidUsage &&
                says("suspended"),
            "a call while suspended: %s", ncclGetLastError(nullptr));
      CHECK(ncclCommSuspend(c, NCCL_SUSPEND_MEM) == ncclInvalidUsage, "suspended twice");
      CHECK(ncclCommResume(c) == ncclSuccess, "resume: %s", ncclGetLastError(c));
      CHECK(ncclCommResume(c) == ncclInvalidUsage, "resumed twice");
      ncclCommMemStats(c, ncclStatGpuMemSuspend, &suspendable);
      CHECK(suspendable > 0, "nothing back after resume");
      CHECK(ncclAllReduce(data[r].data(), data[r].data(), 1024, ncclFloat32, ncclSum, c, nullptr) == ncclSuccess &&
                data[r][5] == 6.f,
            "all_reduce after resume: %g", data[r][5]);
    });
  for (auto& t : ranks) t.join();
  // What dcomm does not back yet says so, by name.
  CHECK(
      ncclPutSignal(data[0].data(), 4, ncclFloat32, 1, nullptr, 0, 0, 0, 0, comms[0], nullptr) == ncclInvalidArgument &&
          says("window"),
      "put into no window: %s", ncclGetLastError(nullptr));
  // One-sided: each rank puts 256 floats into the other's window at offset 1 KiB with signal 2,
  // signals index 5 twice more, and waits for both from its peer.
  std::vector<std::thread> pair;
  for (int r = 0; r < 2; ++r)
    pair.emplace_back([&, r] {
      ncclComm_t c = comms[r];
      std::vector<float> window(1024, 0.f), src(256, static_cast<float>(10 + r));
      ncclWindow_t own = nullptr;
      CHECK(ncclCommWindowRegister(c, data[r].data(), 4096, &own, NCCL_WIN_STRICT_ORDERING) == ncclSuccess,
            "register: %s", ncclGetLastError(nullptr));
      void* p = nullptr;
      CHECK(ncclWinGetUserPtr(c, own, &p) == ncclSuccess && p == data[r].data(), "rank %d: user pointer", r);
      CHECK(
          ncclGetPeerDevicePointer(own, 16, r, &p) == ncclSuccess && p == reinterpret_cast<char*>(data[r].data()) + 16,
          "rank %d: its own window's pointer", r);
      CHECK(ncclGetLsaDevicePointer(own, 0, 0, &p) == ncclSuccess && p == data[r].data(), "rank %d: LSA rank 0", r);
      CHECK(ncclGetPeerDevicePointer(own, 0, 1 - r, &p) == ncclInvalidUsage && p == nullptr && says("not mapped"),
            "rank %d: a peer's pointer: %s", r, ncclGetLastError(nullptr));
      CHECK(ncclGetPeerDevicePointer(own, 4097, r, &p) == ncclInvalidArgument && says("past the window"),
            "an offset past the window");
      CHECK(ncclCommWindowRegister(c, data[r].data(), 64, &own, 0x80) == ncclInvalidArgument, "unknown window flags");
      CHECK(ncclCommWindowDeregister(c, own) == ncclSuccess, "deregister");

      ncclWindow_t win = nullptr;
      CHECK(ncclCommWindowRegister(c, window.data(), window.size() * sizeof(float), &win, 0) == ncclSuccess,
            "register: %s", ncclGetLastError(c));
      CHECK(ncclPutSignal(src.data(), 256, ncclFloat32, 1 - r, win, 1024, 2, 0, 0, c, nullptr) == ncclSuccess,
            "put: %s", ncclGetLastError(nullptr));
      CHECK(ncclSignal(1 - r, 5, 0, 0, c, nullptr) == ncclSuccess &&
                ncclSignal(1 - r, 5, 0, 0, c, nullptr) == ncclSuccess,
            "signal: %s", ncclGetLastError(nullptr));
      ncclWaitSignalDesc_t want[2] = {{1, 1 - r, 2, 0}, {2, 1 - r, 5, 0}};
      CHECK(ncclWaitSignal(2, want, c, nullptr) == ncclSuccess, "wait: %s", ncclGetLastError(nullptr));
      CHECK(window[255] == 0.f && window[256] == static_cast<float>(11 - r) &&
                window[511] == static_cast<float>(11 - r) && window[512] == 0.f,
            "rank %d's window after the put: %g %g %g %g", r, window[255], window[256], window[511], window[512]);
      CHECK(ncclPutSignal(src.data(), 256, ncclFloat32, 1 - r, win, 3073, 2, 0, 0, c, nullptr) == ncclInvalidArgument &&
                says("past rank"),
            "a put past the window: %s", ncclGetLastError(nullptr));
      CHECK(ncclSignal(1 - r, 0, 1, 0, c, nullptr) == ncclInvalidArgument && says("contexts"), "context 1 of 1");
      CHECK(ncclSignal(1 - r, 0, 0, 4, c, nullptr) == ncclInvalidArgument && says("reserved"), "flags");
      ncclGroupStart();  // both ranks have read their windows before either goes
      int token = 1;
      ncclAllReduce(&token, &token, 1, ncclInt32, ncclSum, c, nullptr);
      ncclGroupEnd();
      CHECK(ncclCommWindowDeregister(c, win) == ncclSuccess, "deregister");
    });
  for (auto& t : pair) t.join();
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}

// Runs body(i) on a thread each, i < n.
template <class F>
void on_threads(int n, F body) {
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { body(i); });
  for (auto& t : threads) t.join();
}

// Every member sends (its rank in `c` + 1) * base: the sum is exact.
void check_sum(ncclComm_t c, int n, float base, const char* what) {
  int rank = -1, count = 0;
  ncclCommUserRank(c, &rank);
  ncclCommCount(c, &count);
  std::vector<float> x(1000, static_cast<float>(rank + 1) * base);
  CHECK(count == n && ncclAllReduce(x.data(), x.data(), x.size(), ncclFloat32, ncclSum, c, nullptr) == ncclSuccess,
        "%s: all_reduce: %s", what, ncclGetLastError(c));
  CHECK(x[999] == base * static_cast<float>(n * (n + 1) / 2), "%s: rank %d got %g", what, rank, x[999]);
}

// Shrink, revoke and grow on host memory, ranks as threads: 4 ranks shrink past rank 3 (which
// never calls again, as if dead) in default mode; the 3 revoke, and shrink past their rank 0 in
// abort mode; the 2 grow back to 3 through ncclCommGetUniqueId, a new rank joining with
// ncclCommGrow(NULL, ...). Every step's communicator sums exactly; bad flags are refused.
void shrink_revoke_grow() {
  ncclComm_t four[4], three[3] = {}, two[2] = {}, grown[3] = {};
  CHECK(ncclCommInitAll(four, 4, nullptr) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(nullptr));
  int dead = 3;
  ncclComm_t none = four[0];
  CHECK(ncclCommShrink(four[0], &dead, 1, &none, nullptr, 2) == ncclInvalidArgument && none == nullptr &&
            says("shrinkFlags 2"),
        "unknown shrink flags: %s", ncclGetLastError(nullptr));
  CHECK(ncclCommRevoke(four[0], 1) == ncclInvalidArgument && says("NCCL_REVOKE_DEFAULT"), "revoke flags");
  on_threads(3, [&](int r) {
    CHECK(ncclCommShrink(four[r], &dead, 1, &three[r], nullptr, NCCL_SHRINK_DEFAULT) == ncclSuccess,
          "rank %d: shrink: %s", r, ncclGetLastError(nullptr));
    check_sum(three[r], 3, 1.f, "after the shrink past rank 3");
  });
  CHECK(ncclCommRevoke(three[1], NCCL_REVOKE_DEFAULT) == ncclSuccess, "revoke: %s", ncclGetLastError(nullptr));
  ncclResult_t state = ncclInProgress;
  CHECK(ncclCommGetAsyncError(three[1], &state) == ncclSuccess && state == ncclSuccess, "revoked, quiescent: %d",
        static_cast<int>(state));
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, three[2], nullptr) != ncclSuccess && says("revoked"),
        "a call on a revoked comm: %s", ncclGetLastError(nullptr));
  int first = 0;
  on_threads(2, [&](int i) {
    CHECK(ncclCommShrink(three[i + 1], &first, 1, &two[i], nullptr, NCCL_SHRINK_ABORT) == ncclSuccess,
          "rank %d: shrink (abort): %s", i + 1, ncclGetLastError(nullptr));
    check_sum(two[i], 2, 2.f, "after the shrink past rank 0");
  });
  ncclUniqueId id;
  CHECK(ncclCommGetUniqueId(two[1], &id) == ncclSuccess, "ncclCommGetUniqueId: %s", ncclGetLastError(nullptr));
  on_threads(3, [&](int r) {
    ncclResult_t got = r < 2 ? ncclCommGrow(two[r], 3, r == 1 ? &id : nullptr, -1, &grown[r], nullptr)
                             : ncclCommGrow(nullptr, 3, &id, 2, &grown[r], nullptr);
    CHECK(got == ncclSuccess, "rank %d: grow: %s", r, ncclGetLastError(nullptr));
    if (got == ncclSuccess) check_sum(grown[r], 3, 3.f, "after the grow");
  });
  for (ncclComm_t c : grown) ncclCommDestroy(c);
  for (ncclComm_t c : two) ncclCommDestroy(c);
  for (ncclComm_t c : three) ncclCommDestroy(c);
  for (ncclComm_t c : four) ncclCommDestroy(c);
}

}  // namespace

// A non-blocking comm's call that fails in the background (a wait for a signal that never
// comes, under a 200 ms deadline): ncclCommGetAsyncError gives its result, and a later call
// says the comm failed in a background call, with that call's reason.
void background_failure() {
  setenv("DCOMM_TIMEOUT_MS", "200", 1);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t c = single(&config);
  unsetenv("DCOMM_TIMEOUT_MS");
  ncclResult_t state = ncclInProgress;
  while (c && state == ncclInProgress) ncclCommGetAsyncError(c, &state);
  std::vector<float> window(64);
  ncclWindow_t win = nullptr;
  CHECK(c && ncclCommWindowRegister(c, window.data(), 256, &win, 0) == ncclSuccess, "register: %s",
        ncclGetLastError(c));
  ncclWaitSignalDesc_t never = {1, 0, 9, 0};
  const ncclResult_t r = ncclWaitSignal(1, &never, c, nullptr);
  CHECK(r == ncclInProgress, "a non-blocking wait: %d", static_cast<int>(r));
  state = ncclInProgress;
  while (state == ncclInProgress) ncclCommGetAsyncError(c, &state);
  CHECK(state == ncclRemoteError, "the wait ended with %d", static_cast<int>(state));  // dcomm's timeouts
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, c, nullptr) != ncclSuccess &&
            says("failed in a background call") && says("ncclWaitSignal") && says("0 of 1 signals"),
        "a call after it: %s", ncclGetLastError(nullptr));
  ncclCommDestroy(c);
}

// `device` (the GPU check; exit 77 without a GPU): windows on device memory, 2 ranks on GPU 0
// as threads (registration is collective): ncclPutSignal into the right neighbour's window at
// an offset, ncclWaitSignal on the stream, the data checked; ncclGetPeerDevicePointer reads
// what this rank put there; a put past the window is refused; then suspend and resume.
int device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device: the device-window test is skipped\n");
    return 77;
  }
  ncclComm_t comms[2];
  int devs[2] = {0, 0};
  CHECK(ncclCommInitAll(comms, 2, devs) == ncclSuccess, "ncclCommInitAll: %s", ncclGetLastError(nullptr));
  const size_t count = (4 << 20) / sizeof(float);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      cudaSetDevice(0);
      ncclComm_t c = comms[r];
      cudaStream_t s;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      float *window = nullptr, *src = nullptr;
      cudaMalloc(&window, 2 * count * sizeof(float));
      cudaMalloc(&src, count * sizeof(float));
      std::vector<float> h(count, static_cast<float>(r + 5));
      cudaMemcpy(src, h.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemset(window, 0, 2 * count * sizeof(float));
      ncclWindow_t win = nullptr;
      CHECK(ncclCommWindowRegister(c, window, 2 * count * sizeof(float), &win, 0) == ncclSuccess, "device register: %s",
            ncclGetLastError(nullptr));
      const int peer = 1 - r;
      CHECK(ncclPutSignal(src, count, ncclFloat32, peer, win, count * sizeof(float), 3, 0, 0, c, s) == ncclSuccess,
            "device put: %s", ncclGetLastError(nullptr));
      ncclWaitSignalDesc_t want = {1, peer, 3, 0};
      CHECK(ncclWaitSignal(1, &want, c, s) == ncclSuccess, "device wait: %s", ncclGetLastError(nullptr));
      std::vector<float> got(2 * count, -1.f);
      cudaMemcpyAsync(got.data(), window, got.size() * sizeof(float), cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      CHECK(got[count - 1] == 0.f && got[count] == static_cast<float>(peer + 5) &&
                got[2 * count - 1] == static_cast<float>(peer + 5),
            "device window rank %d: %g %g %g", r, got[count - 1], got[count], got[2 * count - 1]);
      void* there = nullptr;
      float first = -1.f;
      CHECK(ncclGetPeerDevicePointer(win, count * sizeof(float), peer, &there) == ncclSuccess && there,
            "peer device pointer: %s", ncclGetLastError(nullptr));
      if (there) cudaMemcpy(&first, there, sizeof first, cudaMemcpyDefault);
      CHECK(first == static_cast<float>(r + 5), "the peer pointer reads %g on rank %d", first, r);
      CHECK(ncclPutSignal(src, 2, ncclFloat32, peer, win, 2 * count * sizeof(float) - 4, -1, 0, 0, c, s) ==
                    ncclInvalidArgument &&
                says("past rank"),
            "a device put past the window: %s", ncclGetLastError(nullptr));
      ncclResult_t async = ncclSuccess;
      CHECK(ncclCommGetAsyncError(c, &async) == ncclSuccess && async == ncclSuccess, "async error %d", async);
      cudaStreamSynchronize(s);
      CHECK(ncclCommWindowDeregister(c, win) == ncclSuccess, "device deregister");
      // Suspend releases the device communicator's arenas too (GPU memory): the stat counts
      // them, calls in between are refused, and the comm works again after resume.
      uint64_t suspendable = 0, after = 1, suspended = 0;
      CHECK(ncclCommMemStats(c, ncclStatGpuMemSuspend, &suspendable) == ncclSuccess && suspendable >= (1u << 20),
            "rank %d: %llu bytes suspendable", r, static_cast<unsigned long long>(suspendable));
      CHECK(ncclCommSuspend(c, NCCL_SUSPEND_MEM) == ncclSuccess, "suspend: %s", ncclGetLastError(nullptr));
      CHECK(ncclCommMemStats(c, ncclStatGpuMemSuspend, &after) == ncclSuccess && after == 0 &&
                ncclCommMemStats(c, ncclStatGpuMemSuspended, &suspended) == ncclSuccess && suspended == 1,
            "rank %d after suspend: %llu bytes, suspended %llu", r, static_cast<unsigned long long>(after),
            static_cast<unsigned long long>(suspended));
      CHECK(ncclAllReduce(src, src, count, ncclFloat32, ncclSum, c, s) == ncclInvalidUsage && says("suspended"),
            "a call while suspended: %s", ncclGetLastError(nullptr));
      CHECK(ncclCommResume(c) == ncclSuccess, "resume: %s", ncclGetLastError(nullptr));
      CHECK(ncclAllReduce(src, src, count, ncclFloat32, ncclSum, c, s) == ncclSuccess, "all_reduce after resume: %s",
            ncclGetLastError(nullptr));
      std::vector<float> sum(count, -1.f);
      cudaMemcpyAsync(sum.data(), src, count * sizeof(float), cudaMemcpyDeviceToHost, s);
      cudaStreamSynchronize(s);
      CHECK(sum[0] == 11.f && sum[count - 1] == 11.f, "rank %d: all_reduce after resume gave %g", r, sum[0]);
      cudaFree(window);
      cudaFree(src);
      cudaStreamDestroy(s);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) ncclCommDestroy(comms[r]);
  std::printf(failures ? "device: FAILED: %d\n" : "device: ok (windows on GPU 0, 2 ranks)\n", failures);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "device") return device();
  version_and_configs();
  params();
  windows_and_device_api();
  background_failure();
  shrink_revoke_grow();
  std::printf(failures ? "FAILED: %d\n" : "ok\n", failures);
  return failures ? 1 : 0;
}
