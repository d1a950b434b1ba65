// Configuration from DCOMM_* environment variables. Read once per communicator; a bad value
// is an error that names the variable, not a silent default.
#pragma once

#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// Where settings come from: the process environment, or, on one thread for a scope, a table
// (EnvTable: the fuzz targets and tests feed the parsers that way, leaving the environment alone).
namespace detail {
inline const std::map<std::string, std::string>*& env_table() {
  static thread_local const std::map<std::string, std::string>* table = nullptr;
  return table;
}
}  // namespace detail
class EnvTable {
 public:
  explicit EnvTable(const std::map<std::string, std::string>& t) : saved_(detail::env_table()) {
    detail::env_table() = &t;
  }
  ~EnvTable() { detail::env_table() = saved_; }
  EnvTable(const EnvTable&) = delete;
  EnvTable& operator=(const EnvTable&) = delete;

 private:
  const std::map<std::string, std::string>* saved_;
};

inline std::string env_or(const char* name, const std::string& fallback = {}) {
  if (const auto* t = detail::env_table()) {
    auto it = t->find(name);
    return it != t->end() && !it->second.empty() ? it->second : fallback;
  }
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

// Parses an integer with an optional K/M/G suffix (powers of 1024), as nccl-tests' sizes.
inline Result<long long> parse_size(const std::string& text, const char* what) {
  if (text.empty()) return invalid_argument(what, " is empty");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || errno != 0) return invalid_argument(what, "='", text, "' is not a number");
  std::string suffix(end);
  long long mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = 1LL << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") mult = 1LL << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") mult = 1LL << 30;
  else if (!suffix.empty()) return invalid_argument(what, "='", text, "' has an unknown suffix '", suffix, "'");
  if (v > LLONG_MAX / mult || v < LLONG_MIN / mult) return invalid_argument(what, "='", text, "' is too large");
  return v * mult;
}

inline Result<long long> env_size(const char* name, long long fallback, long long min_value, long long max_value) {
  std::string text = env_or(name);
  if (text.empty()) return fallback;
  auto v = parse_size(text, name);
  if (!v.ok()) return v.status();
  if (*v < min_value || *v > max_value)
    return invalid_argument(name, "=", text, " is out of range [", min_value, ", ", max_value, "]");
  return *v;
}

enum class TransportChoice { kAuto, kInproc, kShm, kTcp, kUcx, kVerbs };

// Whether a proxy thread moves this link's slots (it holds a local FIFO at each end).
inline bool proxied(TransportChoice k) {
  return k == TransportChoice::kTcp || k == TransportChoice::kUcx || k == TransportChoice::kVerbs;
}

// DCOMM_ALGO, as NCCL_ALGO: entries separated by ';' or ',', each "name" (every collective that
// has it) or "collective:name". Returns the forced name per collective ("" = automatic).
inline Result<std::array<std::string, 5>> parse_algo(const std::string& text) {
  std::array<std::string, 5> forced;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(";,", start);
    if (end == std::string::npos) end = text.size();
    std::string entry = text.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    size_t colon = entry.find(':');
    std::string name = colon == std::string::npos ? entry : entry.substr(colon + 1);
    bool applied = false;
    for (int k = 0; k < 5; ++k) {
      if (colon != std::string::npos && entry.substr(0, colon) != kAlgoCollectives[k]) continue;
      if (colon != std::string::npos && !algo_valid_for(name, k))
        return invalid_argument("DCOMM_ALGO: '", name, "' is not an algorithm of ", kAlgoCollectives[k]);
      if (algo_valid_for(name, k)) forced[static_cast<size_t>(k)] = name, applied = true;
    }
    if (!applied)
      return invalid_argument("DCOMM_ALGO: '", entry, "' names no collective's algorithm (collectives: all_reduce, ",
                              "reduce_scatter, all_gather, broadcast, reduce; algorithms: ring, direct, single_copy, ",
                              "recursive_doubling, rabenseifner, halving_doubling, tree, double_tree, hierarchical)");
  }
  return forced;
}

// A size threshold's "none": larger than any call (and exact as a double, as the tuning's values
// travel between ranks).
inline constexpr size_t kNoUpperBound = size_t{1} << 60;
// A threshold not measured, whose rule is another's (Config::cma_all_gather_bytes: DCOMM_CMA_BYTES's;
// Config::recursive_doubling_bytes: the cost model's); exact as a double too.
inline constexpr size_t kNotMeasured = size_t{1} << 61;

// Whether `bytes` is in a run of sizes [from, until) that a host tuning walk found, up to the
// largest size it timed (`last`); nothing where not measured (kNotMeasured) or above `last`,
// where another rule decides.
inline std::optional<bool> in_measured_run(size_t bytes, size_t from, size_t until, size_t last) {
  if (from == kNotMeasured || bytes > last) return std::nullopt;
  return from && bytes >= from && bytes < until;
}

struct Config {
  // Longest a wait may go without progress before the call fails (DCOMM_TIMEOUT_MS).
  std::chrono::milliseconds timeout{60'000};
  // Staging FIFO per directed peer link: slots x slot_bytes (DCOMM_SLOT_BYTES, DCOMM_SLOTS).
  size_t slot_bytes = size_t{512} * 1024;
  int slots = 8;
  bool slots_from_env = false;  // DCOMM_SLOTS was set: fifo_slots() keeps it whatever the size
  // DCOMM_SMALL_SLOTS: a shared-memory or in-process FIFO's slots in all (at least
  // DCOMM_SLOTS): a message of up to 448 bytes stays in its 512-byte slot and needs no data
  // area, so a rank may queue this many small messages (a loop of small broadcasts, say)
  // before it waits for the consumer, while larger ones still queue up to DCOMM_SLOTS.
  int small_slots = 256;
  // DCOMM_TRANSPORT=auto|inproc|shm|tcp; auto picks inproc, then shm, then tcp per peer.
  TransportChoice transport = TransportChoice::kAuto;
  int sockets_per_peer = 2;          // DCOMM_SOCKETS_PER_PEER: TCP connections striped per peer
  std::string socket_ifname;         // DCOMM_SOCKET_IFNAME: interface whose address we listen on
  std::string shm_dir = "/dev/shm";  // DCOMM_SHM_DIR
  // The PCI address of the GPU this rank drives ("0000:17:00.0"; cudaDeviceGetPCIBusId's form
  // too), empty for none. Ranks are ordered by its PCI path (topo/order.hpp), so GPUs under one
  // switch sit next to each other in the ring. The NCCL library sets it from the current device.
  std::string device;
  // DCOMM_SPIN: busy polls before a wait starts yielding. -1 (auto): 2000 when this host has a
  // core for every local rank, 16 when ranks outnumber cores (spinning would only keep the
  // rank that holds the data off the CPU).
  int spin_iterations = -1;
  // DCOMM_PROXY_SPIN_US: while this rank is in a call, its proxy thread (TCP, UCX, verbs)
  // polls its wires without sleeping for this long after the last thing it moved, so a small
  // message pays no thread wake-up at either end; idle, it sleeps in poll(). 0: always sleep.
  // -1 (auto): 2000 when this host has a core for every local rank (two over verbs: an
  // emulated NIC works on the same cores), else 0 (busy proxies would keep the threads that
  // hold the data off the cores).
  long long proxy_spin_us = -1;
  // DCOMM_ZERO_COPY_BYTES: over a TCP or UCX link, a slice of a send at least this large goes
  // to the wire from the user's buffer instead of a copy in the send FIFO (point-to-point
  // sends, the ring and the chains); 0 turns that off.
  size_t zero_copy_bytes = 64u << 10;
  // DCOMM_RENDEZVOUS_BYTES: over a TCP or UCX link, a point-to-point message at least this
  // large goes as one rendezvous: the receiver says where it goes, and the wire moves it from
  // the sender's buffer straight into the receiver's (no FIFO at either end); 0 turns that off.
  // Every rank must set the same value.
  size_t rendezvous_bytes = 64u << 10;
  // DCOMM_STREAM_BYTES: calls at least this large write their output with streaming stores
  // (no read-for-ownership); smaller ones keep their output in cache for the caller.
  size_t stream_bytes = 16u << 20;
  // DCOMM_TAKE_AREA_BYTES: over shared memory and between threads, a rank that has read a FIFO
  // data area of up to this many bytes stores once to each of its cache lines before it hands
  // the slot back, so that the producer's next write of that area finds the lines held by one
  // core instead of shared by two (transport/fifo.hpp, FifoRef::take_area); 0 turns that off.
  // -1 (auto): this core's L2 over twice DCOMM_SLOTS (prims/peer.hpp, take_area_bytes: 64 KiB
  // on the AMD EPYC's 1 MiB).
  long long take_area_bytes = -1;
  // DCOMM_DIRECT_BYTES: all_reduce calls up to this size (at most 16K and one slot) exchange
  // whole buffers in one step instead of running the ring; 0 turns that off. The host tuning
  // measures it (comm/tuning.hpp).
  size_t direct_bytes = 4096;
  // DCOMM_MAX_STAGING_BYTES: the most FIFO memory one rank may hold. Each link a rank talks
  // over takes one FIFO (slots x slot_bytes; 4 MiB by default, so a 2-rank communicator holds
  // 4 MiB); connecting a link past the bound is an error that names this setting.
  size_t max_staging_bytes = 512u << 20;
  // DCOMM_CMA_BYTES: all_gather and broadcast calls at least this large copy straight from the
  // peers' buffers (cross-memory attach) when every rank is on one host and can read every
  // other; 0 turns that off.
  size_t cma_bytes = 16u << 10;  // measured: ahead of the FIFO from 16 KiB on 2 ranks
  // DCOMM_CMA_REDUCE_BYTES: all_reduce calls from this size reduce straight from the peers'
  // inputs (single copy; out of place from cma_out_of_place_bytes only when every rank's
  // buffers are from dcomm::mem_alloc); 0 turns that off. The host tuning measures it
  // (comm/host_tuning.hpp). DCOMM_CMA_REDUCE_SCATTER_BYTES: the same for reduce_scatter (unset,
  // DCOMM_CMA_REDUCE_BYTES when that is set).
  size_t cma_reduce_bytes = 1u << 20;
  size_t cma_reduce_scatter_bytes = 1u << 20;
  // DCOMM_CMA_REDUCE_ROOT_BYTES: the same for reduce (to a root: single copy writes the root's
  // output only); unset, DCOMM_CMA_REDUCE_SCATTER_BYTES's value. The host tuning measures it.
  size_t cma_reduce_root_bytes = 1u << 20;
  // Up to where those three reduce through the kernel (below this size; from it, only when
  // every rank's buffers are from dcomm::mem_alloc): the host tuning finds where single copy
  // falls behind again (comm/tuning.hpp's SizeWalk; AMD EPYC, 2 processes: all_reduce's single
  // copy behind the ring from 256 KiB). No variable: one that sets the lower threshold leaves
  // these unbounded.
  size_t cma_reduce_until_bytes = kNoUpperBound;
  size_t cma_reduce_scatter_until_bytes = kNoUpperBound;
  size_t cma_reduce_root_until_bytes = kNoUpperBound;
  // all_gather and broadcast through single copy where the host tuning found it ahead of the
  // FIFO algorithms: [cma_all_gather_bytes, cma_all_gather_until_bytes) of the whole buffer
  // (all_gather's output), and broadcast's likewise (AMD EPYC, 2 processes: all_gather's behind
  // the ring at 512 KiB-2 MiB, where DCOMM_CMA_BYTES's rule took it from 128 KiB on). kNotMeasured
  // where not measured: DCOMM_CMA_BYTES's rule (comm/algorithm_choice.hpp), as above the
  // largest size the walks time (2 MiB); 0: not up to there. No variable: DCOMM_CMA_BYTES, set,
  // keeps its rule.
  size_t cma_all_gather_bytes = kNotMeasured, cma_all_gather_until_bytes = kNoUpperBound;
  size_t cma_broadcast_bytes = kNotMeasured, cma_broadcast_until_bytes = kNoUpperBound;
  // all_reduce by recursive doubling where the host tuning found it ahead of what the cost model
  // and the thresholds above run otherwise: [recursive_doubling_bytes, _until_bytes), up to the
  // largest size its walk times (512 KiB; AMD EPYC, 4 processes on 2 cores: 0.75-0.80x the
  // ring's time at 32-64 KiB, where the model's byte factors, fitted to 8 ranks, put it at 3.5x).
  // kNotMeasured, and above that size: the cost model; 0: never up to there. No variable:
  // DCOMM_ALGO forces an algorithm at every size.
  size_t recursive_doubling_bytes = kNotMeasured, recursive_doubling_until_bytes = kNoUpperBound;
  // DCOMM_CMA_OUT_OF_PLACE_BYTES: out-of-place all_reduce and reduce_scatter calls from this
  // size take single copy only when every rank's buffers are from dcomm::mem_alloc; below it,
  // through the kernel too (measured on 2 ranks, 2026-12-03: ahead of the ring at 16 MiB, behind
  // it from 24 MiB, all_reduce and reduce_scatter alike).
  size_t cma_out_of_place_bytes = 24u << 20;
  // DCOMM_STAGED_COPY: a single-copy broadcast whose root buffer is not from dcomm::mem_alloc
  // goes through a staging block the receivers map, and a single-copy all_gather or all_reduce
  // whose outputs are not all from it moves its blocks or finished chunks through the ranks'
  // blocks (algo/single_copy.hpp, single_copy_reduce.hpp): 1 always between processes, 0 never
  // (through the kernel), -1 (auto): a broadcast where ranks outnumber the cores over
  // kMaxTunedLoad (2) times, or outnumber them and the call is in place and at least 2 MiB; an
  // all_gather there, and an all_reduce out of place, over kMaxTunedLoad ranks a core
  // (comm/dispatch.hpp).
  int staged_copy = -1;
  // Set by the host tuning (comm/host_tuning.hpp) at a set-up: a communicator made from this one
  // (split, shrink, grow) takes its rank 0's values and measures nothing, so a recovery waits for
  // no timing.
  bool host_tuned = false;
  // DCOMM_ALGO: an algorithm forced per collective (see parse_algo); empty = the cost model's.
  std::array<std::string, 5> algo;
  // DCOMM_TEST_RANKS_PER_HOST: for tests, the algorithms treat every k consecutive ranks as one
  // host (transports are unaffected); 0 = the real hosts.
  int test_ranks_per_host = 0;
  // DCOMM_TEST_CYCLIC_HOSTS: for tests, rank r is on pretended host r % k (as mpirun
  // --map-by node places them); 0 = off.
  int test_cyclic_hosts = 0;
  // DCOMM_DETERMINISTIC=1: every reduction folds the ranks' contributions in rank order
  // (algo/ordered.hpp), so its bits do not depend on the algorithm, sizes or timing.
  bool deterministic = false;
  // DCOMM_DUEL=1 (the default): a call shape's choice duels with its rival while it runs, single
  // copy against the FIFO algorithms, and every rank switches where the rival was faster
  // (comm/duel.hpp); 0: the choice made at the first call serves.
  bool duel = true;

  static Result<Config> from_env() {
    Config c;
    auto timeout = env_size("DCOMM_TIMEOUT_MS", c.timeout.count(), 1, 1LL << 40);
    auto slot = env_size("DCOMM_SLOT_BYTES", static_cast<long long>(c.slot_bytes), 256, 1LL << 30);
    auto slots = env_size("DCOMM_SLOTS", c.slots, 3, 1024);  // 3 keeps the ring deadlock-free
    auto small_slots = env_size("DCOMM_SMALL_SLOTS", c.small_slots, 3, 1 << 16);
    auto socks = env_size("DCOMM_SOCKETS_PER_PEER", c.sockets_per_peer, 1, 64);
    auto spin = env_size("DCOMM_SPIN", c.spin_iterations, -1, 1LL << 30);
    auto proxy_spin = env_size("DCOMM_PROXY_SPIN_US", c.proxy_spin_us, -1, 1LL << 30);
    auto zero_copy = env_size("DCOMM_ZERO_COPY_BYTES", static_cast<long long>(c.zero_copy_bytes), 0, 1LL << 50);
    auto rendezvous = env_size("DCOMM_RENDEZVOUS_BYTES", static_cast<long long>(c.rendezvous_bytes), 0, 1LL << 50);
    auto stream = env_size("DCOMM_STREAM_BYTES", static_cast<long long>(c.stream_bytes), 0, 1LL << 50);
    auto take = env_size("DCOMM_TAKE_AREA_BYTES", c.take_area_bytes, -1, 1LL << 50);
    auto direct = env_size("DCOMM_DIRECT_BYTES", static_cast<long long>(c.direct_bytes), 0, 16384);
    auto staging = env_size("DCOMM_MAX_STAGING_BYTES", static_cast<long long>(c.max_staging_bytes), 0, 1LL << 50);
    auto cma = env_size("DCOMM_CMA_BYTES", static_cast<long long>(c.cma_bytes), 0, 1LL << 50);
    auto cma_reduce = env_size("DCOMM_CMA_REDUCE_BYTES", static_cast<long long>(c.cma_reduce_bytes), 0, 1LL << 50);
    auto cma_rs = env_size("DCOMM_CMA_REDUCE_SCATTER_BYTES", cma_reduce.ok() ? *cma_reduce : 0, 0, 1LL << 50);
    auto cma_root = env_size("DCOMM_CMA_REDUCE_ROOT_BYTES", cma_rs.ok() ? *cma_rs : 0, 0, 1LL << 50);
    auto cma_oop =
        env_size("DCOMM_CMA_OUT_OF_PLACE_BYTES", static_cast<long long>(c.cma_out_of_place_bytes), 0, 1LL << 50);
    auto staged = env_size("DCOMM_STAGED_COPY", c.staged_copy, -1, 1);
    auto per_host = env_size("DCOMM_TEST_RANKS_PER_HOST", 0, 0, 1 << 20);
    auto cyclic = env_size("DCOMM_TEST_CYCLIC_HOSTS", 0, 0, 1 << 20);
    for (const Status& s :
         {timeout.status(),  slot.status(),       slots.status(),     small_slots.status(), socks.status(),
          spin.status(),     proxy_spin.status(), zero_copy.status(), rendezvous.status(),  stream.status(),
          direct.status(),   staging.status(),    cma.status(),       cma_reduce.status(),  cma_rs.status(),
          cma_root.status(), cma_oop.status(),    staged.status(),    per_host.status(),    cyclic.status(),
          take.status()})
      if (!s.ok()) return s;
    c.timeout = std::chrono::milliseconds(*timeout);
    c.slot_bytes = static_cast<size_t>(*slot) & ~size_t{63};
    c.slots = static_cast<int>(*slots);
    c.slots_from_env = !env_or("DCOMM_SLOTS").empty();
    c.small_slots = std::max(c.slots, static_cast<int>(*small_slots));
    c.sockets_per_peer = static_cast<int>(*socks);
    c.spin_iterations = static_cast<int>(*spin);
    c.proxy_spin_us = *proxy_spin;
    c.zero_copy_bytes = static_cast<size_t>(*zero_copy);
    c.rendezvous_bytes = static_cast<size_t>(*rendezvous);
    c.stream_bytes = static_cast<size_t>(*stream);
    c.direct_bytes = static_cast<size_t>(*direct);
    c.take_area_bytes = *take;
    c.max_staging_bytes = static_cast<size_t>(*staging);
    c.cma_bytes = static_cast<size_t>(*cma);
    c.cma_reduce_bytes = static_cast<size_t>(*cma_reduce);
    c.cma_reduce_scatter_bytes = static_cast<size_t>(*cma_rs);
    c.cma_reduce_root_bytes = static_cast<size_t>(*cma_root);
    c.cma_out_of_place_bytes = static_cast<size_t>(*cma_oop);
    c.staged_copy = static_cast<int>(*staged);
    c.test_ranks_per_host = static_cast<int>(*per_host);
    c.test_cyclic_hosts = static_cast<int>(*cyclic);
    std::string t = env_or("DCOMM_TRANSPORT", "auto");
    if (t == "auto") c.transport = TransportChoice::kAuto;
    else if (t == "inproc") c.transport = TransportChoice::kInproc;
    else if (t == "shm") c.transport = TransportChoice::kShm;
    else if (t == "tcp") c.transport = TransportChoice::kTcp;
    else if (t == "ucx") c.transport = TransportChoice::kUcx;
    else if (t == "verbs") c.transport = TransportChoice::kVerbs;
    else return invalid_argument("DCOMM_TRANSPORT='", t, "' is not one of auto, inproc, shm, tcp, ucx, verbs");
    auto algo = parse_algo(env_or("DCOMM_ALGO"));
    if (!algo.ok()) return algo.status();
    c.algo = *algo;
    for (auto [name, flag] : {std::pair{"DCOMM_DETERMINISTIC", &c.deterministic}, std::pair{"DCOMM_DUEL", &c.duel}}) {
      const std::string v = env_or(name, *flag ? "1" : "0");
      if (v != "0" && v != "1") return invalid_argument(name, "='", v, "' is not 0 or 1");
      *flag = v == "1";
    }
    c.socket_ifname = env_or("DCOMM_SOCKET_IFNAME");
    c.shm_dir = env_or("DCOMM_SHM_DIR", c.shm_dir);
    return c;
  }
};

// The FIFOs' depth a communicator of `ranks` runs with: DCOMM_SLOTS when set; else at least the
// binary tree's depth (floor(log2 ranks) + 1: from 256 ranks on it is more than the default 8), so
// that a rank of the double tree can run its leaf tree as many slices ahead of its interior one as
// its depths in the two trees differ, which the double tree needs to reach its bound at scale
// (docs/algorithms.md). It follows the trees' shape, not the machine.
inline int fifo_slots(const Config& c, int ranks) {
  if (c.slots_from_env) return c.slots;
  int depth = 1;
  while (depth < 31 && (1 << depth) <= ranks) ++depth;
  return std::max(c.slots, depth);
}

DCOMM_NAMESPACE_END
