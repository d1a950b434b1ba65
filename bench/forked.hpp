// Ranks as forked processes for the benchmarks that need no launcher: run_forked(n, body) runs
// body(rank) in n children and returns 0 when every one exited 0. Fork before anything of
// dcomm exists in the parent (its threads would not follow).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <vector>

template <class Body>
int run_forked(int n, Body body) {
  std::vector<pid_t> pids(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    if ((pids[static_cast<size_t>(r)] = fork()) == 0) _exit(body(r));
  int bad = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return bad ? 1 : 0;
}
