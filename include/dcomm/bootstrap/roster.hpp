// The roster: every rank claims its rank number in the store, publishes its PeerInfo, and
// learns everyone else's. The last rank to arrive checks that each rank was claimed exactly
// once and publishes the verdict, so a duplicated or missing rank is reported on every rank
// at once rather than as a timeout somewhere later.
#pragma once

#include <dirent.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
inline std::string read_link(const char* path) {
  char buf[256] = {};
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Ranks with equal host ids can share memory: same machine (boot id) and the same IPC, mount
// and network namespaces (ranks in separate network namespaces are treated as separate hosts,
// which is how multi-host runs are tested on one machine).
inline std::string this_host_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return cat(host, "|", boot, "|", read_link("/proc/self/ns/ipc"), "|", read_link("/proc/self/ns/mnt"), "|",
             read_link("/proc/self/ns/net"));
}

inline uint64_t this_process_id() {
  static const uint64_t id = random_u64();
  return id;
}

// An RDMA device (InfiniBand, RoCE, Soft-RoCE) is registered with the kernel.
inline bool has_rdma_device() {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = readdir(d)) any |= e->d_name[0] != '.';
  closedir(d);
  return any;
}

inline std::string serialize(const PeerInfo& p) {
  return cat(p.rank, "\n", p.hostname, "\n", p.host_id, "\n", p.pid, "\n", p.address, "\n", p.process_id, "\n",
             p.probe_addr, "\n", p.rdma ? 1 : 0, "\n", p.built, "\n", p.spare, "\n");
}
// A roster entry another rank published: ten lines, each checked (a rank that published
// garbage is named, it does not crash this one).
inline Result<PeerInfo> deserialize(const std::string& text) {
  std::istringstream in(text);
  std::string line[10];
  for (auto& l : line)
    if (!std::getline(in, l)) return make_error(ErrorCode::kInternal, "a roster entry with too few lines");
  auto number = [](const std::string& t, unsigned long long max, unsigned long long* out) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || errno != 0 || v > max || t[0] == '-') return false;
    *out = v;
    return true;
  };
  PeerInfo p;
  unsigned long long rank = 0, pid = 0, process = 0, probe = 0, rdma = 0, built = 0;
  if (!number(line[0], INT32_MAX, &rank) || !number(line[3], INT32_MAX, &pid) ||
      !number(line[5], UINT64_MAX, &process) || !number(line[6], UINT64_MAX, &probe) || !number(line[7], 1, &rdma) ||
      !number(line[8], INT32_MAX, &built))
    return make_error(ErrorCode::kInternal, "an unreadable roster entry");
  p.rank = static_cast<int>(rank), p.pid = static_cast<int>(pid), p.process_id = process, p.probe_addr = probe;
  p.rdma = rdma == 1, p.built = static_cast<int>(built);
  p.hostname = line[1], p.host_id = line[2], p.address = line[4], p.spare = line[9];
  return p;
}
}  // namespace detail

inline PeerInfo make_self_info(int rank, const std::string& listen_address, const std::string& spare = {}) {
  PeerInfo p;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  p.rank = rank;
  p.hostname = host;
  p.host_id = detail::this_host_id();
  p.pid = static_cast<int>(getpid());
  p.address = listen_address;
  p.spare = spare;
  p.process_id = detail::this_process_id();
  p.probe_addr = reinterpret_cast<uint64_t>(&detail::cma_probe_word());
  p.rdma = detail::has_rdma_device();
#if DCOMM_HAS_UCX
  p.built |= PeerInfo::kBuiltUcx;
#endif
#if DCOMM_HAS_VERBS
  p.built |= PeerInfo::kBuiltVerbs;
#endif
  return p;
}

inline Result<std::vector<PeerInfo>> exchange_roster(StoreClient& store, const std::string& prefix, int size,
                                                     const PeerInfo& self) {
  const int rank = self.rank;
  auto claims = store.add(detail::cat(prefix, "/claim/", rank), 1);
  if (!claims.ok()) return claims.status();
  if (*claims == 1) DCOMM_RETURN_IF_ERROR(store.set(detail::cat(prefix, "/info/", rank), detail::serialize(self)));
  auto arrived = store.add(prefix + "/arrivals", 1);
  if (!arrived.ok()) return arrived.status();
  if (*claims > 1) {
    // Tell the ranks waiting for the roster too; the last arrival's verdict, if it comes
    // later, says the same.
    if (*arrived <= size)
      store.set(prefix + "/roster", detail::cat("rank ", rank, " was claimed by more than one process")).ignore();
    return invalid_argument("rank ", rank, " was already claimed by another process (this is pid ", self.pid, " on ",
                            self.hostname, "): each rank must be started once");
  }
  if (*arrived > size) return invalid_argument("more than ", size, " processes joined a communicator of size ", size);
  if (*arrived == size) {
    std::string verdict;
    for (int r = 0; r < size; ++r) {
      auto n = store.add(detail::cat(prefix, "/claim/", r), 0);
      if (!n.ok()) return n.status();
      if (*n != 1)
        verdict += detail::cat(verdict.empty() ? "" : "; ", "rank ", r, " was claimed by ", *n, " processes");
    }
    DCOMM_RETURN_IF_ERROR(store.set(prefix + "/roster", verdict.empty() ? "ok" : verdict));
  }
  auto roster = store.get(prefix + "/roster");
  if (!roster.ok()) {
    if (roster.status().code() == ErrorCode::kTimeout)
      return make_error(ErrorCode::kTimeout, "only ", *arrived, " of ", size, " ranks had reached the rendezvous at ",
                        store.server_address().to_string(),
                        " when this rank arrived, and the rest did not come within ", store.timeout().count(),
                        " ms (DCOMM_TIMEOUT_MS)");
    return roster.status();
  }
  if (*roster != "ok") return invalid_argument("bootstrap failed: ", *roster);
  std::vector<PeerInfo> peers(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto info = store.get(detail::cat(prefix, "/info/", r));
    if (!info.ok()) return info.status();
    auto peer = detail::deserialize(*info);
    if (!peer.ok() || peer->rank != r)
      return make_error(ErrorCode::kInternal, "rank ", r,
                        " published an unreadable roster entry: ", peer.status().message());
    peers[static_cast<size_t>(r)] = *peer;
  }
  DCOMM_LOG(kInfo, kSubsysBootstrap, rank, "roster of ", size, " ranks complete through the store at ",
            store.server_address().to_string());
  return peers;
}

DCOMM_NAMESPACE_END
