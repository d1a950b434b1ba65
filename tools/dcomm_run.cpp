// dcomm-run: starts N ranks of a program on this host, with torchrun's variables (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0 serves the store)
// and a fresh job secret, so anything that starts from torchrun's environment runs under it:
// dcomm's from_env, torch's init_process_group, the example trainer.
//
// Unlike torchrun's agent, mpirun and srun's defaults, it keeps the other ranks running when one
// dies: a rank killed by a signal is reported as lost, and the survivors may revoke, shrink and go
// on (docs/reliability.md). --stop-all-on-failure restores the usual rule. --max-restarts K starts
// a rank that failed or was killed again (K times at most, each rank), with the same variables and
// TORCHELASTIC_RESTART_COUNT counting its restarts (0 at the first start, as torchrun's): a
// program that sees a non-zero count joins the running job (grow, join, reconfigure) instead of
// starting one.
//
// Exit status: 0 when every rank that ended by itself exited 0 (at least one did); else the first
// such rank's non-zero status, or 1 when every rank was killed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/bootstrap/auth.hpp>
#include <dcomm/bootstrap/local_launch.hpp>

#include "cli.hpp"

using namespace dcomm;

namespace {
volatile sig_atomic_t g_signal = 0;
void remember(int sig) { g_signal = sig; }
}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  bool stop_all = false;
  int max_restarts = 0;
  // The program and its arguments: everything after the first word that is not a flag (or after --).
  int program_at = argc;
  for (int i = 1; i < argc; ++i) {
    const std::string w = argv[i];
    if (w == "--") {
      program_at = i + 1;
      break;
    }
    if (w == "-n" || w == "--nproc" || w == "--max-restarts") {
      ++i;
      continue;
    }
    if (w[0] != '-') {
      program_at = i;
      break;
    }
  }
  dcomm_cli::Cli cli("dcomm-run", "-n N [--stop-all-on-failure] [--max-restarts K] [--] program [args...]",
                     "Starts N ranks of a program on this host with torchrun's variables; the others go on when one "
                     "dies.");
  cli.flag("-n", "N", "how many ranks",
           [&](const std::string& v) {
             n = std::atoi(v.c_str());
             return n >= 1 ? "" : "N must be at least 1";
           })
      .flag("--nproc", "N", "the same as -n",
            [&](const std::string& v) {
              n = std::atoi(v.c_str());
              return n >= 1 ? "" : "N must be at least 1";
            })
      .flag("--stop-all-on-failure", "", "when a rank fails or is killed, stop the others (torchrun's rule)",
            [&](const std::string&) {
              stop_all = true;
              return "";
            })
      .flag("--max-restarts", "K", "start a rank that failed or was killed again, K times at most (each rank)",
            [&](const std::string& v) {
              max_restarts = std::atoi(v.c_str());
              return max_restarts >= 0 ? "" : "K must be at least 0";
            })
      .epilog(
          "Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT (a free\n"
          "port below the ephemeral range), DCOMM_SECRET (random, unless set) and TORCHELASTIC_RESTART_COUNT (0;\n"
          "1, 2, ... for a rank started again by --max-restarts). Exit status: 0 when every rank that ended by\n"
          "itself exited 0; ranks killed by a signal are reported as lost.");
  cli.parse(program_at > 1 && std::string(argv[program_at - 1]) == "--" ? program_at - 1 : program_at, argv);
  if (n < 1) cli.fail("-n N is required");
  if (program_at >= argc) cli.fail("no program to run");

  auto port = free_rendezvous_port();
  if (!port.ok()) return std::fprintf(stderr, "dcomm-run: %s\n", port.status().message().c_str()), 1;
  std::string secret = env_or("DCOMM_SECRET");
  if (secret.empty()) {
    auto made = JobSecret::random();
    if (!made.ok()) return std::fprintf(stderr, "dcomm-run: %s\n", made.status().message().c_str()), 1;
    secret = made->hex();
  }
  std::vector<std::string> program(argv + program_at, argv + argc);
  std::vector<int> restarts(static_cast<size_t>(n), 0);
  const auto env_of = [&](int r) {
    auto env = torchrun_env(r, n, *port, secret);
    env.push_back(detail::cat("TORCHELASTIC_RESTART_COUNT=", restarts[static_cast<size_t>(r)]));
    return env;
  };
  auto ranks = spawn_processes(program, n, env_of);
  if (!ranks.ok()) return std::fprintf(stderr, "dcomm-run: %s\n", ranks.status().message().c_str()), 1;
  signal(SIGINT, remember);
  signal(SIGTERM, remember);

  std::vector<bool> done(static_cast<size_t>(n), false);
  int left = n, status = 0, exited_ok = 0;
  bool stopping = false;
  while (left > 0) {
    if (g_signal && !stopping) {  // passed on to every rank, once
      for (int r = 0; r < n; ++r)
        if (!done[static_cast<size_t>(r)]) kill(ranks->pids[static_cast<size_t>(r)], g_signal);
      stopping = true;
    }
    int wstatus = 0;
    const pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    int r = 0;
    while (r < n && ranks->pids[static_cast<size_t>(r)] != pid) ++r;
    if (r == n || done[static_cast<size_t>(r)]) continue;
    const bool killed = WIFSIGNALED(wstatus), failed = killed || WEXITSTATUS(wstatus) != 0;
    if (failed && !stopping && !stop_all && restarts[static_cast<size_t>(r)] < max_restarts) {
      ++restarts[static_cast<size_t>(r)];
      auto again = spawn_processes(program, 1, [&](int) { return env_of(r); });
      if (again.ok()) {
        ranks->pids[static_cast<size_t>(r)] = again->pids[0];
        std::fprintf(stderr, "dcomm-run: rank %d (pid %d) %s %d: started again as pid %d (restart %d of %d)\n", r, pid,
                     killed ? "was killed by signal" : "exited with status",
                     killed ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus), again->pids[0],
                     restarts[static_cast<size_t>(r)], max_restarts);
        continue;
      }
      std::fprintf(stderr, "dcomm-run: rank %d: %s\n", r, again.status().message().c_str());
    }
    done[static_cast<size_t>(r)] = true;
    --left;
    if (killed) {
      std::fprintf(stderr, "dcomm-run: rank %d (pid %d) was killed by signal %d: lost%s\n", r, pid, WTERMSIG(wstatus),
                   stop_all ? "" : "; the others go on");
    } else if (const int code = WEXITSTATUS(wstatus); code != 0) {
      std::fprintf(stderr, "dcomm-run: rank %d (pid %d) exited with status %d\n", r, pid, code);
      if (status == 0) status = code;
    } else {
      ++exited_ok;
    }
    if (failed && stop_all && !stopping) {
      for (int k = 0; k < n; ++k)
        if (!done[static_cast<size_t>(k)]) kill(ranks->pids[static_cast<size_t>(k)], SIGTERM);
      stopping = true;
    }
  }
  if (status == 0 && exited_ok == 0) status = 1;
  return status;
}
