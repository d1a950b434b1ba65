// Processes as ranks: shared memory, TCP and UCX between real processes, started the way
// torchrun, srun and dcomm's own launcher start them; a rank killed mid-collective; a
// /dev/shm too small to hold the FIFOs.
#include <doctest/doctest.h>

#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <utility>
#include <sstream>

#include <dcomm/bootstrap/local_launch.hpp>
#include <dcomm/bootstrap/roster.hpp>
#include <dcomm/transport/shm.hpp>

#include "support/files.hpp"

using namespace dcomm;
using namespace std::chrono_literals;

namespace {
const std::string kWorker = DCOMM_TEST_WORKER;
const std::vector<std::string> kSmall = {"DCOMM_SLOT_BYTES=256", "DCOMM_SLOTS=4", "DCOMM_TIMEOUT_MS=30000"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

LocalRanks run_local(const std::vector<std::string>& args, int ranks, const std::vector<std::string>& env,
                     std::chrono::milliseconds limit = 300s) {
  auto argv = with({kWorker}, args);
  auto procs = spawn_local_ranks(argv, ranks, env);
  REQUIRE_MESSAGE(procs.ok(), procs.status().message());
  Status s = wait_local_ranks(*procs, limit);
  CHECK_MESSAGE(s.ok(), s.message());
  return *procs;
}

void check_all_exit(const LocalRanks& p, int code) {
  for (size_t r = 0; r < p.exit_codes.size(); ++r) CHECK_MESSAGE(p.exit_codes[r] == code, "rank ", r);
}

int free_port() {
  auto port = free_rendezvous_port();
  REQUIRE_MESSAGE(port.ok(), port.status().message());
  return *port;
}

using dcomm_test::read_file;
}  // namespace

TEST_CASE("matrix, processes over shared memory, world sizes 1, 2, 3, 4, 5, 8") {
  for (int size : {1, 2, 3, 4, 5, 8}) {
    CAPTURE(size);
    check_all_exit(run_local({"matrix"}, size, kSmall), 0);
  }
}

// Slots of 1 KiB: small counts ride in the FIFOs' lines, the largest takes their data areas
// (the matrix above fits every slot in a line); and one line per slot.
TEST_CASE("matrix, processes over shared memory, FIFOs with lines apart from their data areas, and one per slot") {
  for (const char* small_slots : {"DCOMM_SMALL_SLOTS=64", "DCOMM_SMALL_SLOTS=3"})
    for (int size : {2, 3, 8}) {
      CAPTURE(small_slots);
      CAPTURE(size);
      check_all_exit(run_local({"matrix"}, size, {"DCOMM_SLOT_BYTES=1024", "DCOMM_SLOTS=3", small_slots}), 0);
    }
}

// Data areas a consumer takes before it hands them back (PeerPort::release_recv): those of up
// to 512 bytes (a message of 449-512 bytes; larger ones are not taken), none, or every one
// (the default takes every area of a 1 KiB slot).
TEST_CASE("matrix, processes over shared memory, data areas taken up to 512 bytes, none, and all") {
  for (const char* take : {"DCOMM_TAKE_AREA_BYTES=512", "DCOMM_TAKE_AREA_BYTES=0", "DCOMM_TAKE_AREA_BYTES=1G"})
    for (int size : {2, 3}) {
      CAPTURE(take);
      CAPTURE(size);
      check_all_exit(run_local({"matrix"}, size, {"DCOMM_SLOT_BYTES=1024", "DCOMM_SLOTS=3", take}), 0);
    }
}

// On 3 ranks the largest count's output (over 2 KiB) is also written with streaming stores,
// which single copy's reductions fold in a buffer for; the smaller ones fold in the output.
TEST_CASE("matrix, processes over shared memory with the single-copy paths from 1 KiB") {
  for (int size : {2, 3, 5}) {
    CAPTURE(size);
    auto env = with(kSmall, {"DCOMM_CMA_BYTES=1K", "DCOMM_CMA_REDUCE_BYTES=1K"});
    if (size == 3) env.push_back("DCOMM_STREAM_BYTES=2K");
    check_all_exit(run_local({"matrix"}, size, env), 0);
  }
}

namespace {
// A worker mode run staged (DCOMM_STAGED_COPY=1; by default only over 2 ranks a core) on 2, 3
// and 5 processes, with `algo` forced, its copies out of the blocks streamed or not; then the
// matrix at 3 with `matrix_env` added, whose counts from 1 KiB take one piece.
void check_staged(const char* mode, const char* algo, const std::vector<std::string>& matrix_env) {
  for (const char* stream : {"DCOMM_STREAM_BYTES=2K", "DCOMM_STREAM_BYTES=1G"})
    for (int size : {2, 3, 5}) {
      CAPTURE(stream);
      CAPTURE(size);
      check_all_exit(run_local({mode}, size, {"DCOMM_STAGED_COPY=1", algo, stream, "DCOMM_TIMEOUT_MS=60000"}), 0);
    }
  check_all_exit(run_local({"matrix"}, 3, with(with(kSmall, {"DCOMM_STAGED_COPY=1"}), matrix_env)), 0);
}
}  // namespace

// A single-copy broadcast staged through the root's mapped block: exact either side of each
// piece boundary (worker.cpp, broadcast_pieces).
TEST_CASE("broadcast staged through the root's mapped block, either side of its piece boundaries") {
  check_staged("broadcast_pieces", "DCOMM_ALGO=broadcast:single_copy", {"DCOMM_CMA_BYTES=1K"});
}

// all_gather's blocks staged through every rank's mapped block: exact either side of each piece
// boundary (worker.cpp, all_gather_pieces).
TEST_CASE("all_gather staged through the ranks' mapped blocks, either side of its piece boundaries") {
  check_staged("all_gather_pieces", "DCOMM_ALGO=all_gather:single_copy", {"DCOMM_CMA_BYTES=1K"});
}

// Every shape's choice duels with its rival (comm/duel.hpp): 200 calls each run trials (after 64
// calls, then 128), every call exact through them, and every rank switches, or not, alike: the
// decisions each rank logs are the same lines on every rank. With single copy through the kernel
// out of place only below 16 KiB, the out-of-place all_reduce's choice is single copy deferred to
// the buffers (not from mem_alloc here): it duels as the ring after the descriptors, or staged.
TEST_CASE("duels: every call exact through the trials, and every rank decides alike") {
  const std::string out = "/tmp/dcomm-test-duel-" + std::to_string(getpid());
  const std::vector<std::string> log = {"DCOMM_DEBUG=INFO", "DCOMM_DEBUG_SUBSYS=TUNING",
                                        "DCOMM_DEBUG_FILE=" + out + ".%p"};
  const std::vector<std::string> deferred = {"DCOMM_CMA_REDUCE_BYTES=16K", "DCOMM_CMA_OUT_OF_PLACE_BYTES=16K"};
  struct Run {
    int size;
    std::vector<std::string> env;
  };
  for (const Run& run : {Run{2, {}}, Run{3, {}}, Run{2, deferred}, Run{3, with(deferred, {"DCOMM_STAGED_COPY=1"})}}) {
    CAPTURE(run.size);
    CAPTURE(run.env.size());
    const auto procs = run_local({"duel"}, run.size, with(log, run.env));
    check_all_exit(procs, 0);
    std::vector<std::vector<std::string>> decisions(procs.pids.size());
    for (size_t r = 0; r < procs.pids.size(); ++r) {
      const std::string file = detail::cat(out, ".", procs.pids[r]);
      std::istringstream text(read_file(file));
      for (std::string line; std::getline(text, line);)
        if (line.find("the slowest rank's fastest calls") != std::string::npos)
          decisions[r].push_back(line.substr(line.find("TUNING ")));
      ::unlink(file.c_str());
    }
    CHECK(decisions[0].size() >= 2 * 5);  // two trials of each of the five shapes
    for (size_t r = 1; r < decisions.size(); ++r) CHECK(decisions[r] == decisions[0]);
    if (run.env.empty()) continue;
    size_t deferred_trials = 0;
    for (const std::string& line : decisions[0])
      deferred_trials += line.find("single_copy_if_registered") != std::string::npos;
    CHECK(deferred_trials >= 2);
  }
}

// all_reduce's finished chunks staged through every rank's mapped block: exact either side of
// each piece boundary (worker.cpp, all_reduce_pieces).
TEST_CASE("all_reduce staged through the ranks' mapped blocks, either side of its piece boundaries") {
  check_staged("all_reduce_pieces", "DCOMM_ALGO=all_reduce:single_copy",
               {"DCOMM_CMA_BYTES=1K", "DCOMM_CMA_REDUCE_BYTES=1K"});
}

TEST_CASE("matrix, processes with buffers from mem_alloc: peers map them (all ranks, or even ranks only)") {
  // Single copy from 1 KiB and through the kernel out of place only below 2 KiB, so
  // out-of-place all_reduce takes the path that needs every output registered; with "mixed"
  // every rank must fall back to the ring.
  const auto env = with(kSmall, {"DCOMM_CMA_BYTES=1K", "DCOMM_CMA_REDUCE_BYTES=1K", "DCOMM_STREAM_BYTES=2K",
                                 "DCOMM_CMA_OUT_OF_PLACE_BYTES=2K"});
  for (int size : {2, 3}) {
    CAPTURE(size);
    check_all_exit(run_local({"matrix", "registered"}, size, env), 0);
    check_all_exit(run_local({"matrix", "mixed"}, size, env), 0);
  }
}

// Over shared memory (stores into a mapping, or cross-memory attach) and over TCP (records on
// a socket, received into the window by the target's wire thread).
TEST_CASE("one-sided puts and signals between processes, into mem_alloc and heap windows, direct and over TCP") {
  for (const char* transport : {"DCOMM_TRANSPORT=auto", "DCOMM_TRANSPORT=tcp"})
    for (const char* memory : {"mem_alloc", "heap"})
      for (int size : {2, 3}) {
        CAPTURE(transport);
        CAPTURE(memory);
        CAPTURE(size);
        check_all_exit(run_local({"one_sided", memory}, size, with(kSmall, {transport})), 0);
      }
}

TEST_CASE("matrix, processes over TCP, world sizes 2, 3, 4") {
  for (int size : {2, 3, 4}) {
    CAPTURE(size);
    check_all_exit(run_local({"matrix"}, size, with(kSmall, {"DCOMM_TRANSPORT=tcp", "DCOMM_SOCKETS_PER_PEER=3"})), 0);
  }
}

// Sends by reference (transport/fifo.hpp's commit_ref): every slice of 64 bytes or more goes to
// the wire from the caller's memory, so every collective and point-to-point path that sends
// by reference runs on both sides of the threshold (the matrix's counts), in and out of place;
// with 3 ranks every point-to-point message of 64 bytes or more goes as a rendezvous into the
// receiver's buffer as well. "realloc": buffers freed and allocated again between calls, at
// the default sizes (its send_recv calls rendezvous).
TEST_CASE(
    "sends by reference and rendezvous over TCP and UCX: the matrix from 64 bytes; buffers freed and reallocated") {
  std::vector<std::vector<std::string>> wires = {{"DCOMM_TRANSPORT=tcp"}};
#if DCOMM_HAS_UCX
  wires.push_back({"DCOMM_TRANSPORT=ucx", "UCX_TLS=sm,self"});
  wires.push_back({"DCOMM_TRANSPORT=ucx", "UCX_TLS=tcp,self"});
#endif
  for (const auto& wire : wires) {
    CAPTURE(wire[wire.size() - 1]);
    for (int size : {2, 3}) {
      CAPTURE(size);
      std::vector<std::string> env = {"DCOMM_ZERO_COPY_BYTES=64"};
      if (size == 3) env.push_back("DCOMM_RENDEZVOUS_BYTES=64");
      check_all_exit(run_local({"matrix"}, size, with(with(kSmall, wire), env)), 0);
    }
    // A schedule's swaps that copy land in the buffer (P2POp::lands): Rabenseifner's
    // all-gather half (3 ranks: with the fold of the rank past a power of two), and the
    // hierarchical all_reduce's leaders between two pretended hosts. The ring's pieces land
    // (prims/landing_prims.hpp; reduce_scatter and all_gather take the ring in the run above):
    // its all_reduce with 2 ranks, and with 3, whose middle steps fold into alternating working
    // buffers. (UCX over TCP lands as UCX over shared memory does: not run again, for time.)
    const std::vector<std::string> lands = {"DCOMM_ZERO_COPY_BYTES=64", "DCOMM_RENDEZVOUS_BYTES=64"};
    const std::pair<std::string, int> runs[] = {
        {"rabenseifner", 3}, {"all_reduce:hierarchical", 4}, {"all_reduce:ring", 2}, {"all_reduce:ring", 3}};
    for (const auto& [algo, size] : runs) {
      if (wire.back() == "UCX_TLS=tcp,self") break;
      CAPTURE(algo);
      CAPTURE(size);
      auto env = with(with(kSmall, wire), with(lands, {"DCOMM_ALGO=" + algo, "DCOMM_TEST_RANKS_PER_HOST=2"}));
      check_all_exit(run_local({"matrix"}, size, env), 0);
    }
    check_all_exit(run_local({"realloc"}, 2, with(wire, {"DCOMM_TIMEOUT_MS=30000"})), 0);
  }
}

// A message one rank sends as a rendezvous (4 MiB) and the other receives in pieces (32 KiB):
// the receiver reports the disagreement at once, not at its ten-minute deadline.
TEST_CASE("a rendezvous met by a smaller receive: the receiver names the disagreement at once") {
  std::vector<std::string> wires = {"tcp"};
#if DCOMM_HAS_UCX
  wires.push_back("ucx");
#endif
  for (const auto& wire : wires) {
    CAPTURE(wire);
    check_all_exit(run_local({"p2p_mismatch"}, 2, {"DCOMM_TRANSPORT=" + wire, "DCOMM_TIMEOUT_MS=600000"}, 60s), 3);
  }
}

#if DCOMM_HAS_UCX
// UCX over its own shared-memory transports and over its TCP transport (UCX_TLS), between
// processes.
TEST_CASE("matrix, processes over UCX: shared memory and TCP, world sizes 2, 3") {
  for (std::string tls : {"sm,self", "tcp,self"}) {
    for (int size : {2, 3}) {
      CAPTURE(tls);
      CAPTURE(size);
      check_all_exit(run_local({"matrix"}, size, with(kSmall, {"DCOMM_TRANSPORT=ucx", "UCX_TLS=" + tls})), 0);
    }
  }
}
#endif

#if DCOMM_HAS_VERBS
// RC queue pairs between processes: runs where an RDMA device exists (Soft-RoCE in the guest
// of scripts/rdma-vm.sh).
TEST_CASE("matrix, processes over verbs, world sizes 2, 3") {
  if (!dcomm::detail::has_rdma_device()) {
    MESSAGE("no RDMA device here: skipped (scripts/rdma-vm.sh runs it under Soft-RoCE)");
    return;
  }
  // With 3 ranks every point-to-point message from 64 bytes is a rendezvous: RDMA WRITE from
  // the sender's registered buffer into the receiver's.
  for (int size : {2, 3}) {
    CAPTURE(size);
    std::vector<std::string> env = with(kSmall, {"DCOMM_TRANSPORT=verbs"});
    if (size == 3) env.push_back("DCOMM_RENDEZVOUS_BYTES=64");
    check_all_exit(run_local({"matrix"}, size, env), 0);
  }
  // Rabenseifner's swaps that copy, as rendezvous too (P2POp::lands).
  check_all_exit(
      run_local({"matrix"}, 2,
                with(kSmall, {"DCOMM_TRANSPORT=verbs", "DCOMM_RENDEZVOUS_BYTES=64", "DCOMM_ALGO=rabenseifner"})),
      0);
  // Asked to send by reference from 64 bytes, the verbs link copies into its registered FIFO
  // (it takes no references); buffers freed and allocated again between calls (the rendezvous
  // must never be served a registration of the old pages).
  check_all_exit(run_local({"matrix"}, 2, with(kSmall, {"DCOMM_TRANSPORT=verbs", "DCOMM_ZERO_COPY_BYTES=64"})), 0);
  check_all_exit(run_local({"realloc"}, 2, {"DCOMM_TRANSPORT=verbs", "DCOMM_TIMEOUT_MS=30000"}), 0);
  check_all_exit(
      run_local({"realloc"}, 2, {"DCOMM_TRANSPORT=verbs", "DCOMM_TIMEOUT_MS=30000", "DCOMM_IB_REG_CACHE=off"}), 0);
  // The ranks disagree on a message: the receiver says so at once.
  check_all_exit(run_local({"p2p_mismatch"}, 2, {"DCOMM_TRANSPORT=verbs", "DCOMM_TIMEOUT_MS=600000"}, 120s), 3);
  // A rank killed while its peers' rendezvous receives are posted (registered, offered).
  auto p = run_local({"die", "2", "5", "p2p"}, 4, {"DCOMM_TRANSPORT=verbs", "DCOMM_TIMEOUT_MS=600000"}, 120s);
  CHECK(p.exit_codes[2] == -SIGKILL);
  for (int r : {0, 1, 3}) CHECK_MESSAGE(p.exit_codes[static_cast<size_t>(r)] == 3, "survivor rank ", r);
  // Communicators made and destroyed, each with a rendezvous: no registration outlives its
  // communicator (pinned memory, VmPin, is as before).
  check_all_exit(run_local({"cycles", "6"}, 2, {"DCOMM_TRANSPORT=verbs"}, 200s), 0);
}
#endif

TEST_CASE("bootstrap from a torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)") {
  int port = free_port();
  auto procs = spawn_processes({kWorker, "matrix"}, 3, [&](int r) {
    return with(kSmall,
                {detail::cat("RANK=", r), "WORLD_SIZE=3", detail::cat("LOCAL_RANK=", r), "LOCAL_WORLD_SIZE=3",
                 "MASTER_ADDR=127.0.0.1", detail::cat("MASTER_PORT=", port), "DCOMM_RANK=", "DCOMM_UNIQUE_ID="});
  });
  REQUIRE(procs.ok());
  CHECK(wait_local_ranks(*procs, 300s).ok());
  check_all_exit(*procs, 0);
}

TEST_CASE("bootstrap from a Slurm environment on one node (no address given)") {
  std::string job = std::to_string(std::random_device{}() % 1000000);
  auto procs = spawn_processes({kWorker, "matrix"}, 3, [&](int r) {
    return with(kSmall,
                {detail::cat("SLURM_PROCID=", r), "SLURM_NTASKS=3", detail::cat("SLURM_LOCALID=", r), "SLURM_NNODES=1",
                 "SLURM_JOB_ID=" + job, "SLURM_STEP_ID=0", "DCOMM_RANK=", "DCOMM_UNIQUE_ID="});
  });
  REQUIRE(procs.ok());
  CHECK(wait_local_ranks(*procs, 300s).ok());
  check_all_exit(*procs, 0);
}

TEST_CASE("a rank killed mid-collective or mid-send_recv: every survivor's error names it") {
  std::vector<std::string> transports = {"shm", "tcp"};
#if DCOMM_HAS_UCX
  transports.push_back("ucx");
#endif
  for (const std::string& transport : transports) {
    CAPTURE(transport);
    // Big all_reduces, so the victim dies with data in flight (over TCP and UCX the ring's
    // sends go by reference); rank 2 of 4 dies after 5 rounds.
    // The deadline is ten minutes and the survivors get one: they must learn of the death
    // from the dead rank's closed connections, not from a timeout.
    // Then point-to-point: over TCP and UCX the survivors' receives are rendezvous posted into
    // their buffers when the victim dies.
    for (std::string shape : {"all_reduce", "p2p"}) {
      CAPTURE(shape);
      auto p = run_local({"die", "2", "5", shape}, 4, {"DCOMM_TRANSPORT=" + transport, "DCOMM_TIMEOUT_MS=600000"}, 60s);
      CHECK(p.exit_codes[2] == -SIGKILL);
      for (int r : {0, 1, 3}) CHECK_MESSAGE(p.exit_codes[static_cast<size_t>(r)] == 3, "survivor rank ", r);
    }
  }
}

TEST_CASE("a rank that aborts and leaves: every survivor's error carries its reason, not a closed link") {
  for (const std::string transport : {"shm", "tcp"}) {
    CAPTURE(transport);
    for (int round = 0; round < 3; ++round) {
      auto p =
          run_local({"abort_leave", "1", "3"}, 4, {"DCOMM_TRANSPORT=" + transport, "DCOMM_TIMEOUT_MS=600000"}, 60s);
      check_all_exit(p, 3);
    }
  }
}

TEST_CASE("DCOMM_TRANSPORT=inproc between processes is refused with the reason") {
  std::string out = "/tmp/dcomm-test-inproc-" + std::to_string(getpid());
  ::unlink((out + ".0").c_str());
  auto argv = std::vector<std::string>{kWorker, "init"};
  auto id = UniqueId::create();
  REQUIRE(id.ok());
  auto procs = spawn_processes(argv, 2, [&](int r) {
    return std::vector<std::string>{
        detail::cat("DCOMM_RANK=", r), "DCOMM_WORLD_SIZE=2",    "DCOMM_UNIQUE_ID=" + id->to_string(),
        "DCOMM_TRANSPORT=inproc",      "DCOMM_TIMEOUT_MS=5000", detail::cat("DCOMM_TEST_OUT=", out, ".", r)};
  });
  REQUIRE(procs.ok());
  CHECK(wait_local_ranks(*procs, 60s).ok());
  check_all_exit(*procs, 5);
  CHECK(read_file(out + ".0").find("is another process") != std::string::npos);
  ::unlink((out + ".0").c_str());
  ::unlink((out + ".1").c_str());
}

TEST_CASE("a /dev/shm too small for the FIFOs is an error that says so and what to do") {
  std::string dir = "/tmp/dcomm-test-tinyshm-" + std::to_string(getpid());
  ::mkdir(dir.c_str(), 0700);
  if (geteuid() != 0 || ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0) {
    ::rmdir(dir.c_str());
    MESSAGE("skipped: mounting a 1 MiB tmpfs needs root (the case Docker's 64 MB /dev/shm hits)");
    return;
  }
  std::string out = dir + "-out";
  auto id = UniqueId::create();
  REQUIRE(id.ok());
  auto procs = spawn_processes({kWorker, "init"}, 2, [&](int r) {
    return std::vector<std::string>{detail::cat("DCOMM_RANK=", r),
                                    "DCOMM_WORLD_SIZE=2",
                                    "DCOMM_UNIQUE_ID=" + id->to_string(),
                                    "DCOMM_SHM_DIR=" + dir,
                                    "DCOMM_SLOT_BYTES=1M",
                                    "DCOMM_SLOTS=4",
                                    "DCOMM_TIMEOUT_MS=5000",
                                    detail::cat("DCOMM_TEST_OUT=", out, ".", r)};
  });
  REQUIRE(procs.ok());
  CHECK(wait_local_ranks(*procs, 60s).ok());
  std::string text = read_file(out + ".0") + read_file(out + ".1");
  ::umount(dir.c_str());
  ::rmdir(dir.c_str());
  ::unlink((out + ".0").c_str());
  ::unlink((out + ".1").c_str());
  check_all_exit(*procs, 5);
  CHECK(text.find("is too small") != std::string::npos);
  CHECK(text.find("--shm-size") != std::string::npos);
}

// ---- hardening: jobs side by side, leftovers, stopped ranks, set-up aborts, secrets --------

namespace {
// A rank started from the environment alone, as a launcher starts it (dcomm's own variables,
// an address rendezvous, no unique id).
std::vector<std::string> env_rank(int r, int n, int port, std::vector<std::string> extra = {}) {
  std::vector<std::string> env = {detail::cat("DCOMM_RANK=", r), detail::cat("DCOMM_WORLD_SIZE=", n),
                                  detail::cat("DCOMM_COMM_ID=127.0.0.1:", port),
                                  "DCOMM_UNIQUE_ID=", "DCOMM_TIMEOUT_MS=60000"};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}
}  // namespace

TEST_CASE("twenty 2-rank jobs at once on one host, each started from the environment, all succeed") {
  // Every job names its shared-memory files for its own processes: none takes or deletes another's.
  std::vector<LocalRanks> jobs;
  for (int j = 0; j < 20; ++j) {
    const int port = free_port();
    auto p = spawn_processes({kWorker, "quick"}, 2, [&](int r) { return env_rank(r, 2, port); });
    REQUIRE(p.ok());
    jobs.push_back(std::move(*p));
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    CAPTURE(j);
    CHECK(wait_local_ranks(jobs[j], 120s).ok());
    check_all_exit(jobs[j], 0);
  }
}

TEST_CASE("a job started after one that was killed during start-up: leftovers never block it, and are swept") {
  // What a rank killed while connecting leaves: its receive FIFO's file, named for its pid
  // (now dead), and a file of the old naming scheme that once made every later job fail.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string leftover =
      detail::cat("/dev/shm/dcomm-", detail::pid_namespace(), "-", dead, "-1to0-0123456789abcdef");
  const std::string old_style = "/dev/shm/dcomm-env0-1to0";
  for (const std::string& f : {leftover, old_style}) std::ofstream(f) << "left behind";
  const int port = free_port();
  auto p = spawn_processes({kWorker, "quick"}, 2, [&](int r) { return env_rank(r, 2, port); });
  REQUIRE(p.ok());
  CHECK(wait_local_ranks(*p, 60s).ok());
  check_all_exit(*p, 0);
  CHECK(access(leftover.c_str(), F_OK) != 0);  // swept: its process is gone
  ::unlink(old_style.c_str());
}

TEST_CASE("a stopped rank (SIGSTOP) is the one every survivor names, over shared memory and TCP") {
  for (const std::string transport : {"shm", "tcp"}) {
    CAPTURE(transport);
    // Rank 2 of 3 stops after 3 rounds; with a 3 s deadline the survivors time out: rank 0
    // waits on rank 2, rank 1 on rank 0, and both must name rank 2 (its heartbeats stopped),
    // not the neighbour they were waiting on.
    auto p =
        spawn_local_ranks({kWorker, "stop", "2", "3"}, 3, {"DCOMM_TRANSPORT=" + transport, "DCOMM_TIMEOUT_MS=3000"});
    REQUIRE(p.ok());
    Status s = wait_local_ranks(*p, 20s);  // the stopped rank never exits: it is killed at the end
    CHECK_MESSAGE(s.message().find("local ranks [2] did not exit") != std::string::npos, s.message());
    for (int r : {0, 1}) CHECK_MESSAGE(p->exit_codes[static_cast<size_t>(r)] == 3, "survivor rank ", r);
  }
}

TEST_CASE("a rank that gives up during set-up: the others learn why at once, not at the deadline") {
  // Rank 2 cannot create its shared-memory FIFOs; ranks 0 and 1 wait for them with a 60 s
  // deadline and must fail within a second or two, with rank 2's reason.
  const std::string out = "/tmp/dcomm-test-setup-abort-" + std::to_string(getpid());
  for (int r = 0; r < 3; ++r) ::unlink(detail::cat(out, ".", r).c_str());
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  auto p = spawn_processes({kWorker, "init"}, 3, [&](int r) {
    std::vector<std::string> extra = {detail::cat("DCOMM_TEST_OUT=", out, ".", r), "DCOMM_TRANSPORT=shm"};
    if (r == 2) extra.push_back("DCOMM_SHM_DIR=/nonexistent-dcomm-dir");
    return env_rank(r, 3, port, extra);
  });
  REQUIRE(p.ok());
  CHECK(wait_local_ranks(*p, 60s).ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  check_all_exit(*p, 5);
  CHECK_MESSAGE(took < 10s, "the set-up abort took ",
                std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), " ms");
  for (int r : {0, 1}) {
    const std::string text = read_file(detail::cat(out, ".", r));
    CAPTURE(text);
    CHECK(text.find("rank 2 gave up during set-up") != std::string::npos);
    CHECK(text.find("nonexistent-dcomm-dir") != std::string::npos);
  }
  for (int r = 0; r < 3; ++r) ::unlink(detail::cat(out, ".", r).c_str());
}

TEST_CASE("job secrets: ranks with different DCOMM_SECRET are refused, saying so; the same secret works") {
  const std::string out = "/tmp/dcomm-test-secret-" + std::to_string(getpid());
  {
    const int port = free_port();
    auto p = spawn_processes({kWorker, "init"}, 2, [&](int r) {
      return env_rank(r, 2, port,
                      {detail::cat("DCOMM_SECRET=secret-of-", r), "DCOMM_TIMEOUT_MS=3000",
                       detail::cat("DCOMM_TEST_OUT=", out, ".", r)});
    });
    REQUIRE(p.ok());
    CHECK(wait_local_ranks(*p, 60s).ok());
    check_all_exit(*p, 5);
    CHECK(read_file(out + ".1").find("same job secret") != std::string::npos);
  }
  {
    const int port = free_port();
    auto p =
        spawn_processes({kWorker, "quick"}, 2, [&](int r) { return env_rank(r, 2, port, {"DCOMM_SECRET=shared"}); });
    REQUIRE(p.ok());
    CHECK(wait_local_ranks(*p, 60s).ok());
    check_all_exit(*p, 0);
  }
  for (int r = 0; r < 2; ++r) ::unlink(detail::cat(out, ".", r).c_str());
}

TEST_CASE("lifecycles between processes: 50 communicators made and destroyed (every other one aborted) leave nothing") {
  for (const std::string transport : {"shm", "tcp"}) {
    CAPTURE(transport);
    check_all_exit(run_local({"cycles", "50"}, 2, {"DCOMM_TRANSPORT=" + transport}), 0);
  }
}

// Issue 40: a rank killed with SIGKILL mid-all_reduce; the survivors find it in lost_ranks(),
// revoke, shrink past it (default and abort mode) and sum exactly; with --grow a new process
// joins and all sum again. Rank 0 (which served the first store, started as torchrun starts
// ranks) is the victim in some runs: nothing the survivors need depends on it.
// bench/recovery.cpp is the scenario; it exits 0 only when every step was exact.
#ifdef DCOMM_TEST_RECOVERY
TEST_CASE("kill a rank mid-all_reduce, then shrink and grow: shm, TCP and UCX, 3 and 4 ranks, rank 0 among the dead") {
  struct Run {
    std::string transport;
    int ranks, victim;
    std::string mode;
    bool grow;
  };
  std::vector<Run> runs = {{"shm", 4, 2, "default", false},
                           {"shm", 3, 0, "abort", true},
                           {"tcp", 4, 0, "default", true},
                           {"tcp", 3, 1, "abort", false}};
#if DCOMM_HAS_UCX
  runs.push_back({"ucx", 4, 2, "abort", false});
  runs.push_back({"ucx", 3, 0, "default", true});
#endif
  for (const Run& run : runs) {
    CAPTURE(run.transport);
    CAPTURE(run.ranks);
    CAPTURE(run.victim);
    CAPTURE(run.mode);
    std::vector<std::string> argv = {DCOMM_TEST_RECOVERY,
                                     "--reps",
                                     "2",
                                     "--count",
                                     "4096",
                                     "--transport",
                                     run.transport,
                                     "--ranks",
                                     std::to_string(run.ranks),
                                     "--victim",
                                     std::to_string(run.victim),
                                     "--mode",
                                     run.mode};
    if (run.grow) argv.push_back("--grow");
    auto p = spawn_processes(argv, 1, [](int) { return std::vector<std::string>{}; });
    REQUIRE(p.ok());
    CHECK(wait_local_ranks(*p, 300s).ok());
    CHECK(p->exit_codes[0] == 0);
  }
}
#endif

// Nothing leaks: 100 cycles in one job of the newest rank killed mid-all_reduce, the others
// shrinking past it and growing back with a new process; a survivor of every cycle then holds
// the descriptors, threads, shared-memory files and pinned memory it held after warm-up, and its
// resident memory within 16 MiB (dcomm-recovery --cycles exits 9 otherwise, saying what grew).
#ifdef DCOMM_TEST_RECOVERY
TEST_CASE("100 kill-shrink-grow cycles over shm and TCP leave a survivor's resources as they were") {
  for (const std::string transport : {"shm", "tcp"}) {
    CAPTURE(transport);
    auto p = spawn_processes(
        {DCOMM_TEST_RECOVERY, "--ranks", "3", "--cycles", "100", "--count", "4096", "--transport", transport}, 1,
        [](int) { return std::vector<std::string>{}; });
    REQUIRE(p.ok());
    CHECK(wait_local_ranks(*p, 600s).ok());
    CHECK(p->exit_codes[0] == 0);
  }
}
#endif

// dcomm-run keeps the survivors running when a rank dies (torchrun, mpirun and srun stop them by
// default): rank 0 of 4, which serves the store, is killed mid-all_reduce; the other three shrink
// and sum exactly, and dcomm-run exits 0, reporting rank 0 lost. With --stop-all-on-failure the
// survivors are stopped and it exits 1.
#if defined(DCOMM_TEST_RECOVERY) && defined(DCOMM_TEST_RUN)
TEST_CASE("dcomm-run: the survivors of a killed rank 0 go on, shrink and finish; --stop-all-on-failure stops them") {
  for (bool stop_all : {false, true}) {
    CAPTURE(stop_all);
    std::vector<std::string> argv = {DCOMM_TEST_RUN, "-n", "4"};
    if (stop_all) argv.push_back("--stop-all-on-failure");
    argv.insert(argv.end(), {"--", DCOMM_TEST_RECOVERY, "--victim", "0", "--count", "4096"});
    auto p = spawn_processes(argv, 1, [](int) { return std::vector<std::string>{"DCOMM_RECOVERY_ROLE=rank"}; });
    REQUIRE(p.ok());
    CHECK(wait_local_ranks(*p, 120s).ok());
    CHECK(p->exit_codes[0] == (stop_all ? 1 : 0));
  }
}
#endif
