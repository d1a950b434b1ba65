// Where a communicator's rank, size and rendezvous address come from: torchrun, OpenMPI's
// mpirun, Slurm's srun, or a UniqueId made by one rank and handed to the others out of band.
#pragma once

#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "dcomm/bootstrap/auth.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// Rendezvous store servers hosted by this process, by port. A communicator that rendezvouses
// through one of them holds it (splits reuse it); the registry only remembers it, so it stops
// once the last such communicator is gone. A server nobody here has used yet (a UniqueId made
// for other processes) is held by the registry until a communicator of this process claims it.
struct ServerRegistry {
  std::mutex mu;
  std::map<int, std::weak_ptr<StoreServer>> servers;
  std::map<int, std::shared_ptr<StoreServer>> unclaimed;
};
inline ServerRegistry& server_registry() {
  static ServerRegistry r;
  return r;
}

// Serves a store on `host`:`port`, or on the first free one of port .. port + span - 1 (one
// this process already serves in that range is reused).
inline Result<std::shared_ptr<StoreServer>> serve_store(const std::string& host, int port, int span,
                                                        const StoreAccess& access) {
  auto& reg = server_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (port != 0) {
    for (int k = 0; k < span; ++k)
      if (auto it = reg.servers.find(port + k); it != reg.servers.end())
        if (auto alive = it->second.lock()) return alive;
  }
  Status last;
  for (int k = 0; k < span; ++k) {
    auto server = StoreServer::start({host, port == 0 ? 0 : port + k}, access);
    if (!server.ok()) {
      last = server.status();
      continue;
    }
    const int at = (*server)->address().port;
    reg.servers[at] = *server;
    reg.unclaimed[at] = *server;
    return *server;
  }
  return last;
}

// The server on `port` when this process serves it: a communicator about to rendezvous
// through it takes it from here (null when another process serves it).
inline std::shared_ptr<StoreServer> claim_store(int port) {
  auto& reg = server_registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.servers.find(port);
  if (it == reg.servers.end()) return nullptr;
  auto alive = it->second.lock();  // before the registry lets go of it
  reg.unclaimed.erase(port);
  if (!alive) reg.servers.erase(it);
  return alive;
}

inline std::shared_ptr<StoreServer> claim_store(const SocketAddress& addr) {
  {
    auto& reg = server_registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.servers.find(addr.port);
    auto alive = it == reg.servers.end() ? nullptr : it->second.lock();
    if (!alive || alive->address().host != addr.host) return nullptr;
  }
  return claim_store(addr.port);
}

// Where rank 0 listens for the rendezvous: the address the other ranks were told (so not on
// every interface), when this host has it; else every interface, saying so (the address may
// be a name for a load balancer or a NAT).
inline std::string bind_host_for(const std::string& host) {
  if (listen_on({host, 0}).ok()) return host;
  DCOMM_LOG(kWarn, kSubsysBootstrap, 0, "the rendezvous address ", host,
            " is not an address of this host: the store listens on every interface");
  return "0.0.0.0";
}

inline uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// The address other hosts reach this one at: DCOMM_SOCKET_IFNAME's, else the first
// non-loopback IPv4 address, else loopback.
inline Result<std::string> advertised_ip() {
  std::string ifname = env_or("DCOMM_SOCKET_IFNAME");
  if (!ifname.empty()) return interface_ip(ifname);
  ifaddrs* list = nullptr;
  std::string found = "127.0.0.1";
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || std::string(i->ifa_name) == "lo") continue;
      char buf[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
      found = buf;
      break;
    }
    freeifaddrs(list);
  }
  return found;
}

// A nonce as 16 hex digits: in unique ids and communicators' key prefixes.
inline std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}
}  // namespace detail

// NCCL-style unique id: one rank makes it (which starts a rendezvous store in that process),
// sends to_string() to the others by any means, and every rank passes it to Communicator::init.
// It carries the job secret that authenticates every connection of the communicators made
// from it: treat it as a credential.
struct UniqueId {
  SocketAddress address;
  uint64_t nonce = 0;
  JobSecret secret;

  static Result<UniqueId> create() {
    auto ip = detail::advertised_ip();
    if (!ip.ok()) return ip.status();
    return create_at({*ip, 0});
  }
  // The same with the store at `at` (port 0: any free port), e.g. DCOMM_COMM_ID's address.
  static Result<UniqueId> create_at(const SocketAddress& at) {
    auto secret = JobSecret::random();
    if (!secret.ok()) return secret.status();
    auto server = detail::serve_store(at.host, at.port, 1, {*secret, {}});
    if (!server.ok()) return server.status();
    return UniqueId{{at.host, (*server)->address().port}, detail::random_u64(), *secret};
  }
  // dcomm2:<16 hex digits: nonce>:<64 hex digits: secret>@host:port
  std::string to_string() const {
    return detail::cat("dcomm2:", detail::hex16(nonce), ":", secret.hex(), "@", address.to_string());
  }
  static Result<UniqueId> parse(const std::string& text) {
    constexpr size_t kNonceAt = 7, kSecretAt = kNonceAt + 17, kAt = kSecretAt + 2 * JobSecret::kBytes;
    const auto bad = [&] {
      return invalid_argument("'", text.substr(0, 120),
                              "' is not a dcomm unique id (dcomm2:<16 hex digits>:<64 hex digits>@host:port)");
    };
    if (text.size() <= kAt + 1 || text.rfind("dcomm2:", 0) != 0 || text[kSecretAt - 1] != ':' || text[kAt] != '@')
      return bad();
    auto nonce = detail::from_hex(std::string_view(text).substr(kNonceAt, 16));
    auto key = detail::from_hex(std::string_view(text).substr(kSecretAt, 2 * JobSecret::kBytes));
    if (!nonce || !key) return bad();
    auto addr = parse_address(text.substr(kAt + 1));
    if (!addr.ok()) return addr.status().with_context("unique id");
    UniqueId id;
    id.address = *addr;
    for (unsigned char b : *nonce) id.nonce = id.nonce << 8 | b;
    std::memcpy(id.secret.key.data(), key->data(), JobSecret::kBytes);
    id.secret.set = true;
    return id;
  }
};

// What the launcher told this process.
struct LaunchInfo {
  std::string launcher;  // "torchrun", "mpirun", "srun", "dcomm"
  int rank = -1;
  int size = -1;
  int local_rank = -1;  // as the launcher says; dcomm also derives it from the hosts
  SocketAddress rendezvous;
  bool host_store = false;  // this process serves the store (rank 0 of an address rendezvous)
  int port_span = 1;        // the store is on the first free of rendezvous.port .. + port_span - 1
  uint64_t nonce = 0;       // from a unique id; 0 for address rendezvous
  // Who may use the store: the job secret (a unique id's; DCOMM_SECRET / DCOMM_SECRET_FILE
  // for launcher starts, or none) and, where ranks scan ports for it, the job's tag.
  StoreAccess access;
};

namespace detail {
inline Result<int> env_int(const char* name) {
  std::string v = env_or(name);
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < 0) return invalid_argument(name, "='", v, "' is not a non-negative integer");
  return static_cast<int>(x);
}

// Rendezvous address for launchers that give none: DCOMM_COMM_ID, else MASTER_ADDR/PORT.
// Where the store is: an address, and how many ports from it rank 0 may try (1: exactly there).
struct Rendezvous {
  SocketAddress address;
  int port_span = 1;
};

inline Result<Rendezvous> rendezvous_from_env(const std::string& launcher, bool single_host,
                                              const std::string& job_key) {
  std::string id = env_or("DCOMM_COMM_ID");
  if (!id.empty()) {
    auto a = parse_address(id);
    if (!a.ok()) return a.status();
    return Rendezvous{*a};
  }
  std::string addr = env_or("MASTER_ADDR"), port = env_or("MASTER_PORT");
  if (!addr.empty() && !port.empty()) {
    auto a = parse_address(addr + ":" + port);
    if (!a.ok()) return a.status();
    return Rendezvous{*a};
  }
  if (single_host && !job_key.empty()) {
    // Every rank of a one-host job derives the same port from the job's id. It may be taken:
    // rank 0 uses the first free one after it.
    uint64_t h = 1469598103934665603ull;
    for (char c : job_key) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return Rendezvous{{"127.0.0.1", static_cast<int>(40000 + h % 20000)}, 16};
  }
  return invalid_argument(launcher,
                          " launched this process but no rendezvous address is set: set DCOMM_COMM_ID=host:port "
                          "(or MASTER_ADDR and MASTER_PORT) to a free port on the host of rank 0");
}
}  // namespace detail

// Reads the environment of torchrun, mpirun (OpenMPI) or srun (Slurm), or dcomm's own
// DCOMM_RANK / DCOMM_WORLD_SIZE; DCOMM_UNIQUE_ID, if set, gives the rendezvous instead of an
// address.
inline Result<LaunchInfo> detect_launch() {
  LaunchInfo info;
  const char* rank_var = nullptr;
  const char* size_var = nullptr;
  const char* local_var = nullptr;
  bool single_host = false;
  std::string job_key;
  if (!env_or("DCOMM_RANK").empty()) {
    info.launcher = "dcomm";  // dcomm-bench and the tests start ranks this way
    rank_var = "DCOMM_RANK", size_var = "DCOMM_WORLD_SIZE", local_var = "DCOMM_LOCAL_RANK";
  } else if (!env_or("RANK").empty() && !env_or("WORLD_SIZE").empty()) {
    info.launcher = "torchrun";
    rank_var = "RANK", size_var = "WORLD_SIZE", local_var = "LOCAL_RANK";
  } else if (!env_or("OMPI_COMM_WORLD_RANK").empty()) {
    info.launcher = "mpirun";
    rank_var = "OMPI_COMM_WORLD_RANK", size_var = "OMPI_COMM_WORLD_SIZE", local_var = "OMPI_COMM_WORLD_LOCAL_RANK";
    single_host = env_or("OMPI_COMM_WORLD_LOCAL_SIZE") == env_or("OMPI_COMM_WORLD_SIZE");
    job_key = env_or("OMPI_MCA_orte_hnp_uri", env_or("PMIX_NAMESPACE", env_or("OMPI_MCA_ess_base_jobid")));
  } else if (!env_or("SLURM_PROCID").empty()) {
    info.launcher = "srun";
    rank_var = "SLURM_PROCID", size_var = "SLURM_NTASKS", local_var = "SLURM_LOCALID";
    single_host = env_or("SLURM_NNODES", env_or("SLURM_JOB_NUM_NODES")) == "1";
    job_key = env_or("SLURM_JOB_ID") + "." + env_or("SLURM_STEP_ID");
  } else {
    return invalid_argument(
        "no launcher environment found: expected torchrun's RANK/WORLD_SIZE, mpirun's "
        "OMPI_COMM_WORLD_RANK/SIZE or srun's SLURM_PROCID/SLURM_NTASKS");
  }
  auto rank = detail::env_int(rank_var);
  auto size = detail::env_int(size_var);
  if (!rank.ok()) return rank.status().with_context(info.launcher);
  if (!size.ok()) return size.status().with_context(info.launcher);
  info.rank = *rank;
  info.size = *size;
  if (auto local = detail::env_int(local_var); local.ok()) info.local_rank = *local;
  if (info.size < 1 || info.rank >= info.size)
    return invalid_argument(info.launcher, ": rank ", info.rank, " is not below the world size ", info.size);

  std::string uid = env_or("DCOMM_UNIQUE_ID");
  if (!uid.empty()) {
    auto id = UniqueId::parse(uid);
    if (!id.ok()) return id.status().with_context("DCOMM_UNIQUE_ID");
    info.rendezvous = id->address;
    info.nonce = id->nonce;
    info.access.secret = id->secret;
    return info;
  }
  auto secret = JobSecret::from_env();
  if (!secret.ok()) return secret.status();
  info.access.secret = *secret;
  auto where = detail::rendezvous_from_env(info.launcher, single_host, job_key);
  if (!where.ok()) return where.status();
  info.rendezvous = where->address;
  info.port_span = where->port_span;
  // torchrun's agent already serves its own store on MASTER_PORT; dcomm's goes on the first
  // free port after it (its own client sockets may hold the next one).
  if (info.launcher == "torchrun" && env_or("DCOMM_COMM_ID").empty() &&
      !env_or("TORCHELASTIC_USE_AGENT_STORE").empty()) {
    info.rendezvous.port += 1;
    info.port_span = 16;
    job_key =
        detail::cat("torchrun ", env_or("TORCHELASTIC_RUN_ID"), " ", env_or("MASTER_ADDR"), ":", env_or("MASTER_PORT"));
  }
  // Ranks that scan ports must not join another job's store on one of them.
  if (info.port_span > 1)
    info.access.job_tag = detail::cat(info.launcher, " ", job_key).substr(0, auth::kMaxPayloadBytes);
  info.host_store = info.rank == 0;
  return info;
}

DCOMM_NAMESPACE_END
