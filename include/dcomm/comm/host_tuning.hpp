// Tuned where it runs: the size thresholds that depend on the machine are measured on it, at
// the first communicator's set-up on a host (a few milliseconds), and kept in a cache that dcomm
// writes for that host; later set-ups, in this process or another, read it. Rank 0 measures or
// reads, and every rank takes rank 0's values through the store, so no two ranks choose
// differently. A DCOMM_* variable that sets a value wins over the tuning, and so does a Config
// field that the program set to something other than its default.
//
// Measured:
//   DCOMM_CMA_BYTES  single copy (all_gather, broadcast) saves each byte one copy through a
//                    FIFO and costs one process_vm_readv per peer block, so it pays from
//                    (that call's fixed cost) x (the copy bandwidth in cache) bytes on. The fixed
//                    cost: 64-byte reads of this process's own memory; the bandwidth: 64 KiB
//                    copies within L2; each the best of 5 rounds (a preemption only slows a round
//                    down). Rounded to a power of two, 4 KiB to 1 MiB.
//   DCOMM_CMA_REDUCE_BYTES, DCOMM_CMA_REDUCE_SCATTER_BYTES, DCOMM_CMA_REDUCE_ROOT_BYTES,
//   DCOMM_DIRECT_BYTES
//                    where single copy overtakes the FIFO algorithms and where it falls behind
//                    them again (the run of sizes where it is ahead), and up to where the
//                    direct exchange is ahead of them: timed side by side by every rank of the
//                    first communicator of each shape on the host (ranks, and processes or
//                    threads), since it takes them all (comm/tuning.hpp's tune_shape); kept in
//                    the same cache, one line per shape. all_gather's and broadcast's runs of
//                    single copy likewise (no variable of their own: DCOMM_CMA_BYTES, set,
//                    serves them by its rule); a user's messages (send/recv, an all-to-all's
//                    blocks) go with all_gather's, block for block (algorithm_choice.hpp's
//                    pull_rule); and all_reduce's run of recursive doubling against what runs
//                    without it, up to 512 KiB (none: DCOMM_ALGO forces).
// What stays fixed, and why: docs/environment.md ("Tuned where it runs").
//
// DCOMM_HOST_TUNING=off keeps the compiled-in defaults. The cache: DCOMM_HOST_TUNING_CACHE, else
// $XDG_CACHE_HOME/dcomm/host-tuning, else $HOME/.cache/dcomm/host-tuning, else
// /tmp/dcomm-host-tuning-<uid>. It names the host it was measured on (CPU model, CPUs online,
// memory, kernel, format); one written elsewhere or under another kernel is ignored, logged and
// measured again.
#pragma once

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <istream>
#include <iterator>
#include <mutex>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store_client.hpp"
#include "dcomm/comm/algorithm_choice.hpp"
#include "dcomm/core/algorithms.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/cma.hpp"

DCOMM_NAMESPACE_BEGIN

// The thresholds measured for communicators of one shape on this host ("2-processes",
// "4-threads"): from which size single copy reduces (all_reduce, reduce_scatter, reduce) or
// copies (all_gather, broadcast) ahead of the FIFO algorithms and from which it is behind them
// again (the `_until`s; kNoUpperBound:
// not behind up to the largest size timed), and up to which size the direct exchange is ahead
// (all_reduce). A threshold is 0 where it is not known: the set-ups that measured the shape
// (`tries`) ran out of their budget before it (a loaded host), and the compiled-in value serves
// until a later set-up measures it (at most kShapeTries in all), going on from the size where
// the walk was cut (the `_next`s; 0: not cut).
struct ShapeTuning {
  std::string shape;
  size_t all_reduce = 0, reduce_scatter = 0, direct = 0, reduce = 0, all_gather = 0, broadcast = 0,
         recursive_doubling = 0;
  size_t all_reduce_until = 0, reduce_scatter_until = 0, reduce_until = 0, all_gather_until = 0, broadcast_until = 0,
         recursive_doubling_until = 0;
  size_t all_reduce_next = 0, reduce_scatter_next = 0, reduce_next = 0, all_gather_next = 0, broadcast_next = 0,
         recursive_doubling_next = 0;
  // The pace its walks began at (comm/tuning.hpp's pace_us: the ring's 16 KiB all_reduce), in ns;
  // 0: not timed (a line written by hand).
  size_t pace_ns = 0;
  int tries = 0;

  bool complete() const {
    return all_reduce && reduce_scatter && direct && reduce && all_gather && broadcast && recursive_doubling &&
           all_reduce_until && reduce_scatter_until && reduce_until && all_gather_until && broadcast_until &&
           recursive_doubling_until;
  }
};
// Every set-up that measures times at least one size (its first round is never cut), and one
// that runs out of the budget keeps where each walk got, so that the next goes on from there.
// 4 processes on 2 cores of an AMD EPYC with a memory hog on one core ended the walks in 4
// set-ups; with 3 tries, each going on only from a run's start, no single-copy walk ended.
inline constexpr int kShapeTries = 8;

// A shape's one text form, in the cache's "shape" lines and in what rank 0 publishes at set-up.
inline std::ostream& operator<<(std::ostream& out, const ShapeTuning& r) {
  return out << r.shape << " " << r.all_reduce << " " << r.reduce_scatter << " " << r.direct << " " << r.reduce << " "
             << r.all_gather << " " << r.broadcast << " " << r.recursive_doubling << " " << r.all_reduce_until << " "
             << r.reduce_scatter_until << " " << r.reduce_until << " " << r.all_gather_until << " " << r.broadcast_until
             << " " << r.recursive_doubling_until << " " << r.all_reduce_next << " " << r.reduce_scatter_next << " "
             << r.reduce_next << " " << r.all_gather_next << " " << r.broadcast_next << " " << r.recursive_doubling_next
             << " " << r.pace_ns << " " << r.tries;
}
inline std::istream& operator>>(std::istream& in, ShapeTuning& r) {
  return in >> r.shape >> r.all_reduce >> r.reduce_scatter >> r.direct >> r.reduce >> r.all_gather >> r.broadcast >>
         r.recursive_doubling >> r.all_reduce_until >> r.reduce_scatter_until >> r.reduce_until >> r.all_gather_until >>
         r.broadcast_until >> r.recursive_doubling_until >> r.all_reduce_next >> r.reduce_scatter_next >>
         r.reduce_next >> r.all_gather_next >> r.broadcast_next >> r.recursive_doubling_next >> r.pace_ns >> r.tries;
}

// A shape's thresholds for the log: "single copy reduces in [65536, 262144) bytes (all_reduce),
// ...; direct up to 2048 bytes; recursive doubling in [32768, 131072) bytes" (0: not known; "on":
// not behind again up to the largest size timed).
inline std::string describe(const ShapeTuning& t) {
  auto range = [](size_t from, size_t until) {
    return until == kNoUpperBound ? detail::cat("[", from, ", on)") : detail::cat("[", from, ", ", until, ")");
  };
  return detail::cat("single copy reduces in ", range(t.all_reduce, t.all_reduce_until), " (all_reduce), ",
                     range(t.reduce_scatter, t.reduce_scatter_until), " (reduce_scatter), ",
                     range(t.reduce, t.reduce_until), " bytes (reduce), copies in ",
                     range(t.all_gather, t.all_gather_until), " (all_gather), ", range(t.broadcast, t.broadcast_until),
                     " bytes (broadcast); direct up to ", t.direct, " bytes; recursive doubling in ",
                     range(t.recursive_doubling, t.recursive_doubling_until), " bytes (all_reduce)");
}

struct HostMeasure {
  double cma_us = 0;    // a process_vm_readv's fixed cost
  double copy_gbs = 0;  // memcpy within L2
  std::vector<ShapeTuning> shapes;

  const ShapeTuning* for_shape(const std::string& shape) const {
    for (const ShapeTuning& r : shapes)
      if (r.shape == shape) return &r;
    return nullptr;
  }
};

struct HostTuning {
  HostMeasure measured;
  std::string source;  // "measured in 3.1 ms", "read from <path>", "off (DCOMM_HOST_TUNING)"
  size_t cma_bytes = Config{}.cma_bytes;
  bool off = false;  // DCOMM_HOST_TUNING=off, or the measurement failed: nothing is measured
};

namespace detail {
// Raised when what the cache holds, or what its timings would find, changes (4: single copy folds
// out-of-place tiles in the output, so it overtakes the ring at other sizes; 5: a shape line
// counts its tries and leaves what the budget did not reach at 0; 6: and says where single copy
// falls behind again; 7: and where the budget cut each walk; 8: and all_gather's and broadcast's
// runs; 9: and recursive doubling's, and the pace the walks began at; 10: consumers take the
// FIFO's data areas for the producer's next write, so the FIFO paths the walks time single copy
// and the direct exchange against got faster).
inline constexpr int kHostTuningFormat = 10;

inline std::string first_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      auto colon = line.find(':');
      std::string v = colon == std::string::npos ? line.substr(key.size()) : line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "?";
}

// The best of `rounds` means of `iters` calls of f, in microseconds.
template <class F>
double best_mean_us(int rounds, int iters, F f) {
  double best = 1e300;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    best = std::min(best,
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return best;
}

inline size_t power_of_two_near(double bytes, size_t lo, size_t hi) {
  size_t p = lo;
  while (p < hi && static_cast<double>(p) * 1.5 < bytes) p *= 2;
  return p;
}
}  // namespace detail

// What the cache is keyed by: the machine and the kernel as this process sees them.
inline std::string host_signature() {
  utsname u{};
  uname(&u);
  return detail::cat("format ", detail::kHostTuningFormat, "; cpu ", detail::first_field("/proc/cpuinfo", "model name"),
                     "; cpus ", sysconf(_SC_NPROCESSORS_ONLN), "; memory ",
                     detail::first_field("/proc/meminfo", "MemTotal"), "; kernel ", u.release);
}

inline std::string host_tuning_cache_path() {
  if (std::string p = env_or("DCOMM_HOST_TUNING_CACHE"); !p.empty()) return p;
  if (std::string x = env_or("XDG_CACHE_HOME"); !x.empty()) return x + "/dcomm/host-tuning";
  if (std::string h = env_or("HOME"); !h.empty()) return h + "/.cache/dcomm/host-tuning";
  return detail::cat("/tmp/dcomm-host-tuning-", getuid());
}

// A few milliseconds of this process's own time; no peer is involved.
inline Result<HostMeasure> measure_host() {
  HostMeasure m;
  std::vector<char> a(64u << 10, 1), b(64u << 10, 2);
  const double copy_us = detail::best_mean_us(5, 32, [&] {
    std::memcpy(b.data(), a.data(), a.size());
    asm volatile("" : : "r"(b.data()) : "memory");  // the copy is not optimized away
  });
  m.copy_gbs = static_cast<double>(a.size()) / copy_us / 1e3;
  Status s;
  const double read_us = detail::best_mean_us(5, 200, [&] {
    if (s.ok())
      s = detail::cross_memory(getpid(), b.data(), reinterpret_cast<uint64_t>(a.data()), 64, "process_vm_readv of",
                               process_vm_readv);
  });
  if (!s.ok()) return s.with_context("measuring single copy for the host's tuning");
  m.cma_us = read_us;
  return m;
}

// The thresholds that follow from a measurement.
inline size_t cma_bytes_for(const HostMeasure& m) {
  return detail::power_of_two_near(m.cma_us * m.copy_gbs * 1e3, size_t{4} << 10, size_t{1} << 20);
}

// The cache's measurement when it was written for this host; else nothing, and why.
inline std::optional<HostMeasure> read_host_tuning(const std::string& path, const std::string& signature,
                                                   std::string* why) {
  std::ifstream in(path);
  if (!in) {
    *why = "no cache at " + path;
    return std::nullopt;
  }
  std::string magic, host, key;
  HostMeasure m;
  if (!std::getline(in, magic) || magic != "dcomm-host-tuning" || !std::getline(in, host) || !(in >> key >> m.cma_us) ||
      key != "cma_us" || !(in >> key >> m.copy_gbs) || key != "copy_gbs" || !(m.cma_us > 0 && m.copy_gbs > 0)) {
    *why = path + " is not a dcomm host tuning (unreadable): measured again";
    return std::nullopt;
  }
  if (host != "host " + signature) {  // before the shapes: another format's lines may differ
    *why = detail::cat(path, " was written for another host or kernel (", host.substr(std::min<size_t>(5, host.size())),
                       "; this one: ", signature, "): ignored, measured again");
    return std::nullopt;
  }
  for (ShapeTuning r; in >> key >> r && key == "shape";) m.shapes.push_back(r);
  if (!in.eof()) {
    *why = path + " is not a dcomm host tuning (unreadable after copy_gbs): measured again";
    return std::nullopt;
  }
  return m;
}

inline Status write_host_tuning(const std::string& path, const std::string& signature, const HostMeasure& m) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    mkdir(path.substr(0, at).c_str(), 0755);  // the folders up to it; errors show at the write
  const std::string tmp = detail::cat(path, ".", getpid(), ".tmp");
  {
    std::ofstream out(tmp);
    out << "dcomm-host-tuning\nhost " << signature << "\ncma_us " << m.cma_us << "\ncopy_gbs " << m.copy_gbs << "\n";
    for (const ShapeTuning& r : m.shapes) out << "shape " << r << "\n";
    if (!out) return make_error(ErrorCode::kInternal, "cannot write the host tuning cache ", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kInternal, "cannot write the host tuning cache ", path);
  }
  return {};
}

namespace detail {
struct HostTuningMemo {
  std::mutex mu;
  std::optional<HostTuning> known;
};
inline HostTuningMemo& host_tuning_memo() {
  static HostTuningMemo memo;
  return memo;
}

// The thresholds a DCOMM_* variable or the program chose: the tuning leaves them as they are.
// all_gather's and broadcast's runs go with DCOMM_CMA_BYTES, whose rule serves them where set.
struct ChosenThresholds {
  bool cma, all_reduce, reduce_scatter, direct, reduce, all_gather, broadcast, recursive_doubling;
};
inline ChosenThresholds chosen_thresholds(const Config& c) {
  const Config d;
  const bool reduce_env = !env_or("DCOMM_CMA_REDUCE_BYTES").empty();
  const bool scatter_env = reduce_env || !env_or("DCOMM_CMA_REDUCE_SCATTER_BYTES").empty();
  const bool cma = !env_or("DCOMM_CMA_BYTES").empty() || c.cma_bytes != d.cma_bytes;
  return {cma,
          reduce_env || c.cma_reduce_bytes != d.cma_reduce_bytes,
          scatter_env || c.cma_reduce_scatter_bytes != d.cma_reduce_scatter_bytes,
          !env_or("DCOMM_DIRECT_BYTES").empty() || c.direct_bytes != d.direct_bytes,
          scatter_env || !env_or("DCOMM_CMA_REDUCE_ROOT_BYTES").empty() ||
              c.cma_reduce_root_bytes != d.cma_reduce_root_bytes,
          cma || c.cma_all_gather_bytes != d.cma_all_gather_bytes,
          cma || c.cma_broadcast_bytes != d.cma_broadcast_bytes,
          c.recursive_doubling_bytes != d.recursive_doubling_bytes};
}

// What each of a shape's walks (comm/tuning.hpp's shape_walks, in its order) times and where
// its thresholds go: the collective, the algorithm timed against the one chosen without it,
// its start, end (none for the direct exchange's) and where an earlier set-up's budget ended
// it in a ShapeTuning, the Config thresholds they set, and whether a variable or the program
// chose those.
inline constexpr size_t kShapeWalks = 7;
struct WalkFields {
  OpKind kind;
  Algorithm candidate;
  size_t ShapeTuning::*found;
  size_t ShapeTuning::*until;
  size_t ShapeTuning::*next;
  size_t Config::*from_bytes;
  size_t Config::*until_bytes;
  bool ChosenThresholds::*chosen;
};
inline constexpr WalkFields kWalkFields[kShapeWalks] = {
    {OpKind::kAllReduce, Algorithm::kSingleCopy, &ShapeTuning::all_reduce, &ShapeTuning::all_reduce_until,
     &ShapeTuning::all_reduce_next, &Config::cma_reduce_bytes, &Config::cma_reduce_until_bytes,
     &ChosenThresholds::all_reduce},
    {OpKind::kReduceScatter, Algorithm::kSingleCopy, &ShapeTuning::reduce_scatter, &ShapeTuning::reduce_scatter_until,
     &ShapeTuning::reduce_scatter_next, &Config::cma_reduce_scatter_bytes, &Config::cma_reduce_scatter_until_bytes,
     &ChosenThresholds::reduce_scatter},
    {OpKind::kAllReduce, Algorithm::kDirect, &ShapeTuning::direct, nullptr, nullptr, &Config::direct_bytes, nullptr,
     &ChosenThresholds::direct},
    {OpKind::kReduce, Algorithm::kSingleCopy, &ShapeTuning::reduce, &ShapeTuning::reduce_until,
     &ShapeTuning::reduce_next, &Config::cma_reduce_root_bytes, &Config::cma_reduce_root_until_bytes,
     &ChosenThresholds::reduce},
    {OpKind::kAllGather, Algorithm::kSingleCopy, &ShapeTuning::all_gather, &ShapeTuning::all_gather_until,
     &ShapeTuning::all_gather_next, &Config::cma_all_gather_bytes, &Config::cma_all_gather_until_bytes,
     &ChosenThresholds::all_gather},
    {OpKind::kBroadcast, Algorithm::kSingleCopy, &ShapeTuning::broadcast, &ShapeTuning::broadcast_until,
     &ShapeTuning::broadcast_next, &Config::cma_broadcast_bytes, &Config::cma_broadcast_until_bytes,
     &ChosenThresholds::broadcast},
    {OpKind::kAllReduce, Algorithm::kRecursiveDoubling, &ShapeTuning::recursive_doubling,
     &ShapeTuning::recursive_doubling_until, &ShapeTuning::recursive_doubling_next, &Config::recursive_doubling_bytes,
     &Config::recursive_doubling_until_bytes, &ChosenThresholds::recursive_doubling}};

inline constexpr size_t kDirectWalk = 2;  // the direct exchange's row: a walk of its own rule (tuning.hpp)
static_assert(kWalkFields[kDirectWalk].candidate == Algorithm::kDirect && !kWalkFields[kDirectWalk].until);
inline constexpr size_t kDoublingWalk = 6;  // recursive doubling's: its sizes end at kFifoWalkLast
static_assert(kWalkFields[kDoublingWalk].candidate == Algorithm::kRecursiveDoubling);

// How many walks' thresholds a variable or the program chose (all kShapeWalks: nothing to time).
inline size_t walks_chosen(const ChosenThresholds& chosen) {
  return static_cast<size_t>(std::count_if(std::begin(kWalkFields), std::end(kWalkFields),
                                           [&](const WalkFields& f) { return chosen.*f.chosen; }));
}

}  // namespace detail

// A shape this set-up measures: what the cache knows of it already, the thresholds a variable or
// the program chose (taken before the set-up set DCOMM_CMA_BYTES), which the tuning times but
// leaves as they are, and whether it walks what is not known (else the thresholds are known
// whole, or have had their tries, and only the pace is timed: comm/tuning.hpp's pace_check).
struct ShapeToMeasure {
  ShapeTuning known;
  detail::ChosenThresholds chosen;
  bool walk = true;
};

namespace detail {
// One walk's thresholds go to `config` where known (not 0), unless a variable or the program
// chose them (unbounded from the value chosen).
inline void apply_walk(Config& config, const ChosenThresholds& chosen, const WalkFields& f, size_t found,
                       size_t until) {
  if (chosen.*f.chosen) return;
  if (found) config.*f.from_bytes = found;
  if (f.until && until) config.*f.until_bytes = until;
}

// A shape's known thresholds go to `config`, as apply_walk.
inline void apply_shape_tuning(Config& config, const ChosenThresholds& chosen, const ShapeTuning& t) {
  for (const WalkFields& f : kWalkFields) apply_walk(config, chosen, f, t.*f.found, f.until ? t.*f.until : 0);
}
}  // namespace detail

// This host's tuning: from this process's memory, else the cache, else measured (and cached).
inline HostTuning host_tuning() {
  HostTuning t;
  if (env_or("DCOMM_HOST_TUNING") == "off") {
    t.source = "off (DCOMM_HOST_TUNING=off): the defaults";
    t.off = true;
    return t;
  }
  detail::HostTuningMemo& memo = detail::host_tuning_memo();
  std::lock_guard<std::mutex> lock(memo.mu);
  if (memo.known) return *memo.known;
  const std::string path = host_tuning_cache_path(), signature = host_signature();
  std::string why;
  if (auto cached = read_host_tuning(path, signature, &why)) {
    t.measured = *cached;
    t.source = "read from " + path;
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = measure_host();
    if (!m.ok()) {
      DCOMM_LOG(kInfo, kSubsysTuning, 0, m.status().message(), ": the defaults");
      t.source = "not measured (" + m.status().message() + "): the defaults";
      t.off = true;
      memo.known = t;
      return t;
    }
    t.measured = *m;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    Status w = write_host_tuning(path, signature, *m);
    t.source = detail::cat("measured in ", ms, " ms (", why, "; ", w.ok() ? "cached there" : w.message(), ")");
  }
  t.cma_bytes = cma_bytes_for(t.measured);
  memo.known = t;
  return t;
}

// A set-up's measured shape joins this host's tuning and its cache (with the shapes that
// other processes added to the cache meanwhile).
inline void remember_shape_tuning(const ShapeTuning& r) {
  detail::HostTuningMemo& memo = detail::host_tuning_memo();
  std::lock_guard<std::mutex> lock(memo.mu);
  if (!memo.known || memo.known->off) return;
  std::vector<ShapeTuning>& mine = memo.known->measured.shapes;
  mine.erase(std::remove_if(mine.begin(), mine.end(), [&](const ShapeTuning& x) { return x.shape == r.shape; }),
             mine.end());
  mine.push_back(r);
  const std::string path = host_tuning_cache_path(), signature = host_signature();
  std::string why;
  HostMeasure m = memo.known->measured;
  if (auto on_disk = read_host_tuning(path, signature, &why))
    for (const ShapeTuning& x : on_disk->shapes)
      if (!m.for_shape(x.shape)) m.shapes.push_back(x);
  if (Status w = write_host_tuning(path, signature, m); !w.ok()) DCOMM_LOG(kInfo, kSubsysTuning, 0, w.message());
}

// What the host tuning of a set-up needs to know of the communicator.
struct HostTuningContext {
  int rank, size;
  StoreClient& store;
  const std::string& prefix;
  bool single_copy;                    // every rank can read every other's memory (comm/facts.hpp)
  const std::vector<PeerInfo>& peers;  // all on this host when single_copy
  double load;                         // the most ranks per core on a host (comm/facts.hpp)
};

// Collective over a communicator in set-up: rank 0's tuning goes to every rank's `config`,
// except where a DCOMM_* variable or the program chose the value. Returns the shape whose
// thresholds this set-up must measure (comm/tuning.hpp: every rank can read every other's
// memory, and the cache has none for it, or only some of them and fewer than kShapeTries tries),
// with those known, or whose pace it times (known whole, or tried kShapeTries times, with the
// pace its walks began at), or nothing.
inline Result<std::optional<ShapeToMeasure>> agree_host_tuning(Config& config, const HostTuningContext& c) {
  const detail::ChosenThresholds chosen = detail::chosen_thresholds(config);
  const bool threads = std::all_of(c.peers.begin(), c.peers.end(),
                                   [&](const PeerInfo& p) { return p.process_id == c.peers[0].process_id; });
  const std::string shape = detail::cat(c.size, threads ? "-threads" : "-processes");
  // What rank 0 publishes: DCOMM_CMA_BYTES, whether this set-up walks the shape, times its pace
  // only or neither, and the shape's thresholds (0 where not known).
  size_t cma_bytes = 0;
  enum : int { kMeasureNothing, kWalk, kPaceOnly };
  int measure = kMeasureNothing;
  ShapeTuning known{shape};
  if (c.rank == 0 && config.host_tuned) {  // made from a tuned communicator: its values
    cma_bytes = config.cma_bytes;
    for (const detail::WalkFields& f : detail::kWalkFields) {
      known.*f.found = config.*f.from_bytes;
      if (f.until) known.*f.until = config.*f.until_bytes;
    }
  } else if (c.rank == 0) {
    const HostTuning t = host_tuning();
    // Measured with the default FIFO slots; with others (DCOMM_SLOT_BYTES) the compiled-in values.
    const bool default_slots = config.slot_bytes == Config{}.slot_bytes;
    const ShapeTuning* cached = default_slots ? t.measured.for_shape(shape) : nullptr;
    const bool tuned = !t.off && default_slots && c.single_copy && c.size >= 2 && c.size <= kAllPeerMaxRanks &&
                       c.load <= kMaxTunedLoad && detail::walks_chosen(chosen) < detail::kShapeWalks;
    const bool walk = !cached || (!cached->complete() && cached->tries < kShapeTries);
    measure = !tuned ? kMeasureNothing : walk ? kWalk : cached->pace_ns ? kPaceOnly : kMeasureNothing;
    cma_bytes = t.cma_bytes;
    if (cached) known = *cached;
    DCOMM_LOG(
        kInfo, kSubsysTuning, c.rank, "host tuning ", t.source, ": process_vm_readv ", t.measured.cma_us,
        " us, copies in cache ", t.measured.copy_gbs, " GB/s -> single copy from ", cma_bytes, " bytes",
        chosen.cma ? detail::cat(" (not taken: DCOMM_CMA_BYTES or the program chose ", config.cma_bytes, ")") : "",
        cached ? detail::cat("; ", shape, ": ", describe(known),
                             known.complete() ? "" : " (0: not known, the compiled-in value)")
               : "",
        measure == kWalk
            ? detail::cat("; ", shape, ": ", cached ? "the rest of " : "",
                          "its thresholds are measured at this set-up (try ", known.tries + 1, " of ", kShapeTries, ")")
        : measure == kPaceOnly ? detail::cat("; ", shape, ": its pace is timed against the ", known.pace_ns * 1e-3,
                                             " us its walks began at")
                               : "");
  }
  if (c.rank == 0 && c.size > 1) {
    std::ostringstream out;
    out << cma_bytes << " " << measure << " " << known;
    DCOMM_RETURN_IF_ERROR(c.store.set(c.prefix + "/host_tuning", out.str()));
  } else if (c.rank != 0) {
    auto got = c.store.get(c.prefix + "/host_tuning");
    if (!got.ok()) return got.status().with_context("rank 0's host tuning");
    std::istringstream in(*got);
    if (!(in >> cma_bytes >> measure >> known) || known.shape != shape)
      return make_error(ErrorCode::kInternal, "rank 0 published an unreadable host tuning '", *got, "' (rank ", c.rank,
                        " is of shape ", shape, ")");
  }
  if (!chosen.cma) config.cma_bytes = cma_bytes;
  config.host_tuned = true;
  if (measure)  // tune_shape applies it, with the rest
    return std::optional<ShapeToMeasure>({known, chosen, measure == kWalk});
  detail::apply_shape_tuning(config, chosen, known);
  return std::optional<ShapeToMeasure>();
}

DCOMM_NAMESPACE_END
