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
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "dcomm/bootstrap/store_client.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/cma.hpp"

DCOMM_NAMESPACE_BEGIN

struct HostMeasure {
  double cma_us = 0;    // a process_vm_readv's fixed cost
  double copy_gbs = 0;  // memcpy within L2
};

struct HostTuning {
  HostMeasure measured;
  std::string source;  // "measured in 3.1 ms", "read from <path>", "off (DCOMM_HOST_TUNING)"
  size_t cma_bytes = Config{}.cma_bytes;
};

namespace detail {
inline constexpr int kHostTuningFormat = 1;

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
  if (host != "host " + signature) {
    *why = detail::cat(path, " was written for another host or kernel (", host.substr(std::min<size_t>(5, host.size())),
                       "; this one: ", signature, "): ignored, measured again");
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
    if (!out) return make_error(ErrorCode::kInternal, "cannot write the host tuning cache ", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return make_error(ErrorCode::kInternal, "cannot write the host tuning cache ", path);
  }
  return {};
}

// This host's tuning: from this process's memory, else the cache, else measured (and cached).
inline HostTuning host_tuning() {
  HostTuning t;
  if (env_or("DCOMM_HOST_TUNING") == "off") {
    t.source = "off (DCOMM_HOST_TUNING=off): the defaults";
    return t;
  }
  static std::mutex mu;
  static std::optional<HostTuning> known;
  std::lock_guard<std::mutex> lock(mu);
  if (known) return *known;
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
      known = t;
      return t;
    }
    t.measured = *m;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    Status w = write_host_tuning(path, signature, *m);
    t.source = detail::cat("measured in ", ms, " ms (", why, "; ", w.ok() ? "cached there" : w.message(), ")");
  }
  t.cma_bytes = cma_bytes_for(t.measured);
  known = t;
  return t;
}

// Collective over a communicator in set-up: rank 0's tuning goes to every rank's `config`,
// except where DCOMM_CMA_BYTES or the program chose the value.
inline Status agree_host_tuning(Config& config, int rank, int size, StoreClient& store, const std::string& prefix) {
  const bool chosen = !env_or("DCOMM_CMA_BYTES").empty() || config.cma_bytes != Config{}.cma_bytes;
  size_t cma_bytes = 0;
  if (rank == 0) {
    const HostTuning t = host_tuning();
    cma_bytes = t.cma_bytes;
    DCOMM_LOG(kInfo, kSubsysTuning, rank, "host tuning ", t.source, ": process_vm_readv ", t.measured.cma_us,
              " us, copies in cache ", t.measured.copy_gbs, " GB/s -> single copy from ", cma_bytes, " bytes",
              chosen ? detail::cat(" (not taken: DCOMM_CMA_BYTES or the program chose ", config.cma_bytes, ")") : "");
    if (size > 1) DCOMM_RETURN_IF_ERROR(store.set(prefix + "/host_tuning", detail::cat(cma_bytes)));
  } else {
    auto v = store.get(prefix + "/host_tuning");
    if (!v.ok()) return v.status().with_context("rank 0's host tuning");
    cma_bytes = std::strtoull(v->c_str(), nullptr, 10);
  }
  if (!chosen) config.cma_bytes = cma_bytes;
  return {};
}

DCOMM_NAMESPACE_END
