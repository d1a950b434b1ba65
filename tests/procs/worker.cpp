// A rank in its own process, for the process tests and for real launchers (mpirun, srun,
// torchrun). It builds its communicator from the environment and runs one scenario:
//   matrix          the full collective matrix; exit 0 when every result is exact
//   die RANK N      all_reduce in a loop; rank RANK kills itself (SIGKILL) after N rounds;
//                   survivors exit 3 when their error names rank RANK as dead (or a peer's
//                   abort naming it), 4 otherwise
//   init            create the communicator and report its error, if any (exit 5)
// Output: one line per failure, then "rank R: ..." summaries.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "support/matrix.hpp"

using namespace dcomm;

namespace {
// Prints a line, and appends it to $DCOMM_TEST_OUT when set, for the driver to read.
template <class... Args>
void report(const char* fmt, Args... args) {
  std::printf(fmt, args...);
  std::fflush(stdout);
  if (const char* path = std::getenv("DCOMM_TEST_OUT")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, fmt, args...);
      std::fclose(f);
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "matrix";
  auto comm = Communicator::from_env();
  if (!comm.ok()) {
    report("init error: %s\n", comm.status().message().c_str());
    return 5;
  }
  Communicator& c = **comm;
  if (mode == "init") {
    std::printf("rank %d of %d: local %d of %d, next via %s\n", c.rank(), c.size(), c.local_rank(), c.local_size(),
                c.transport_to((c.rank() + 1) % c.size()));
    return 0;
  }
  if (mode == "matrix") {
    // "registered": buffers from mem_alloc on every rank; "mixed": on even ranks only.
    auto m = dcomm_test::full_matrix(c.size(), c.config().slot_bytes);
    std::string buffers = argc > 2 ? argv[2] : "";
    m.registered = buffers == "registered" || (buffers == "mixed" && c.rank() % 2 == 0);
    auto rep = dcomm_test::run_matrix(c, m);
    for (const auto& f : rep.failures) std::printf("FAIL %s\n", f.c_str());
    std::printf("rank %d: %d checks, %zu failures\n", c.rank(), rep.checked, rep.failures.size());
    return rep.failures.empty() && rep.checked > 0 ? 0 : 1;
  }
  if (mode == "die" && argc > 3) {
    int victim = std::atoi(argv[2]), rounds = std::atoi(argv[3]);
    std::vector<float> buf(1 << 20, 1.0f);
    for (int i = 0;; ++i) {
      if (c.rank() == victim && i == rounds) raise(SIGKILL);
      Status s = c.all_reduce(std::span(buf), ReduceOp::kMax);
      if (!s.ok()) {
        report("rank %d error: %s\n", c.rank(), s.message().c_str());
        bool named = s.message().find("rank " + std::to_string(victim)) != std::string::npos &&
                     s.code() == ErrorCode::kPeerFailure;
        return named ? 3 : 4;
      }
    }
  }
  std::printf("unknown mode %s\n", mode.c_str());
  return 2;
}
