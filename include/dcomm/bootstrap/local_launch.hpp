// Starts N local ranks of a program, as a one-host torchrun would: each child gets
// DCOMM_RANK, DCOMM_WORLD_SIZE, DCOMM_LOCAL_RANK and a DCOMM_UNIQUE_ID whose store this process
// serves. Used by dcomm-bench (when no launcher started it) and by the process tests. Or with
// torchrun's own variables (torchrun_env: rank 0 serves the store), as dcomm-run starts them.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

extern char** environ;

DCOMM_NAMESPACE_BEGIN

struct LocalRanks {
  std::vector<pid_t> pids;
  std::vector<int> exit_codes;         // -signal for a child killed by a signal
  std::shared_ptr<StoreServer> store;  // the rendezvous store served here, for as long as the ranks run
};

// Spawns `ranks` copies of argv with this process's environment, overridden by name with
// what per_rank_env(rank) returns ("NAME=value" strings).
template <class PerRank>
Result<LocalRanks> spawn_processes(const std::vector<std::string>& argv, int ranks, PerRank per_rank_env) {
  LocalRanks out;
  for (int r = 0; r < ranks; ++r) {
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const std::string& kv : per_rank_env(r)) {
      size_t eq = kv.find('=');
      if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    std::vector<std::string> env;
    env.reserve(vars.size());
    for (const auto& [k, v] : vars) env.push_back(detail::cat(k, "=", v));
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_t pid = 0;
    int rc = posix_spawn(&pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data());
    if (rc != 0) {
      for (pid_t p : out.pids) kill(p, SIGKILL);
      return errno_status(detail::cat("cannot start ", argv[0]).c_str(), rc);
    }
    out.pids.push_back(pid);
  }
  out.exit_codes.assign(static_cast<size_t>(ranks), 0);
  return out;
}

// Spawns `ranks` local ranks of argv rendezvousing through a UniqueId served here;
// extra_env ("NAME=value") goes to every rank.
inline Result<LocalRanks> spawn_local_ranks(const std::vector<std::string>& argv, int ranks,
                                            const std::vector<std::string>& extra_env = {}) {
  auto id = UniqueId::create();
  if (!id.ok()) return id.status();
  auto procs = spawn_processes(argv, ranks, [&](int r) {
    std::vector<std::string> env = {detail::cat("DCOMM_RANK=", r), detail::cat("DCOMM_WORLD_SIZE=", ranks),
                                    detail::cat("DCOMM_LOCAL_RANK=", r), "DCOMM_UNIQUE_ID=" + id->to_string()};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return env;
  });
  if (procs.ok()) procs->store = detail::claim_store(id->address);
  return procs;
}

// What torchrun tells rank r of n, with rank 0 serving the store on host:port (this host's
// loopback by default); the secret (DCOMM_SECRET) authenticates the job's connections.
inline std::vector<std::string> torchrun_env(int r, int n, int port, const std::string& secret,
                                             const std::string& host = "127.0.0.1") {
  return {detail::cat("RANK=", r),
          detail::cat("WORLD_SIZE=", n),
          detail::cat("LOCAL_RANK=", r),
          detail::cat("LOCAL_WORLD_SIZE=", n),
          "MASTER_ADDR=" + host,
          detail::cat("MASTER_PORT=", port),
          "DCOMM_SECRET=" + secret,
          "DCOMM_RANK=",
          "DCOMM_UNIQUE_ID="};
}

// A port for a job's rendezvous on this host, taken below the kernel's ephemeral range: a port
// the kernel hands out (listen on port 0, close, pass the number on) can be given to another
// job's outgoing connection before this job binds it. Each call moves on, so jobs started one
// after another never share a port; the pid spreads processes that start jobs side by side.
inline Result<int> free_rendezvous_port() {
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  const int first = std::max(1024, low - 8000), range = low - first;
  if (range <= 0) return make_error(ErrorCode::kOutOfResources, "no ports below the ephemeral range ", low);
  static int next = static_cast<int>(getpid()) % range;
  for (int tries = 0; tries < range; ++tries) {
    const int port = first + (next++ % range);
    if (listen_on({"127.0.0.1", port}).ok()) return port;
  }
  return make_error(ErrorCode::kOutOfResources, "no free port in [", first, ", ", low, ")");
}

// Waits for every child; after `timeout` kills the ones left and says which.
inline Status wait_local_ranks(LocalRanks& ranks, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> done(ranks.pids.size(), false);
  size_t left = ranks.pids.size();
  while (left > 0) {
    for (size_t r = 0; r < ranks.pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      if (waitpid(ranks.pids[r], &status, WNOHANG) == ranks.pids[r]) {
        done[r] = true;
        --left;
        ranks.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > end) {
      std::string hung;
      for (size_t r = 0; r < ranks.pids.size(); ++r)
        if (!done[r]) {
          kill(ranks.pids[r], SIGKILL);
          waitpid(ranks.pids[r], nullptr, 0);
          ranks.exit_codes[r] = -SIGKILL;
          hung += detail::cat(hung.empty() ? "" : ", ", r);
        }
      return make_error(ErrorCode::kTimeout, "local ranks [", hung, "] did not exit within ", timeout.count(),
                        " ms and were killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

DCOMM_NAMESPACE_END
