// Ranks as forked processes for the benchmarks that need no launcher: run_forked(n, body) runs
// body(rank) in n children and returns 0 when every one exited 0. Fork before anything of
// dcomm exists in the parent (its threads would not follow). run_forked_with_id also hands
// every rank the text of one dcomm::UniqueId, and count_and_max_bytes reads the arguments the
// benchmarks share; median and slowest_seconds are how they report a pass.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dcomm/dcomm.hpp>

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

// run_forked for the ranks of one communicator: rank 0 makes a dcomm::UniqueId (in the child,
// so nothing of dcomm exists before the fork) and writes its text to the others over a pipe;
// body(rank, id_text) runs in each. A rank that cannot make or read the id exits 3.
template <class Body>
int run_forked_with_id(int n, Body body) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  return run_forked(n, [&](int r) {
    std::string text(256, '\0');
    if (r == 0) {
      auto id = dcomm::UniqueId::create();
      if (!id.ok()) return 3;
      text = id->to_string();
      text.resize(256);
      for (int k = 1; k < n; ++k)
        if (write(fds[1], text.data(), 256) != 256) return 3;
    } else if (read(fds[0], text.data(), 256) != 256) {
      return 3;
    }
    return body(r, std::string(text.c_str()));
  });
}

// [count] [max bytes] (K/M/G suffixes) over the defaults in *count and *max_bytes; false, after
// saying why, when the size is not one.
inline bool count_and_max_bytes(int argc, char** argv, int* count, size_t* max_bytes) {
  if (argc > 1) *count = std::atoi(argv[1]);
  if (argc > 2) {
    auto v = dcomm::parse_size(argv[2], "max bytes");
    if (!v.ok()) return std::fprintf(stderr, "%s\n", v.status().message().c_str()), false;
    *max_bytes = static_cast<size_t>(*v);
  }
  return true;
}

// The median of the passes (the upper middle one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds for body() (a dcomm::Status), the slowest rank's: every rank calls it, after a
// barrier. A rank whose body failed prints why and counts 1e9 s.
template <class F>
double slowest_seconds(dcomm::Communicator& c, F&& body) {
  c.barrier().ignore();
  const auto t = std::chrono::steady_clock::now();
  dcomm::Status s = body();
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.message().c_str()), sec = 1e9;
  c.all_reduce(&sec, &sec, 1, dcomm::DataType::kFloat64, dcomm::ReduceOp::kMax).ignore();
  return sec;
}
