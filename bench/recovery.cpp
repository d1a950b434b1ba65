// dcomm-recovery: how long survivors take to go on after a rank is killed, and that they go on
// exactly. N local processes started as torchrun starts them (rank 0 serves the rendezvous store)
// run all_reduces; the victim is killed with SIGKILL from a thread while its main thread is inside
// one. Every survivor then sees the call fail (detect), learns which rank died (lost_ranks),
// revokes, shrinks past it and runs an all_reduce on the survivors, checked. With --grow a new
// process then joins (grow_id + grow + join) and all N run a checked all_reduce.
//
//   dcomm-recovery [--ranks N] [--victim R] [--mode default|abort] [--transport T] [--reps K]
//                  [--count ELEMENTS] [--grow]        (--help says more)
//
// Prints one row per repetition, times in ms from the kill (the slowest survivor's), and exits 0
// only when every survivor's results were exact and the victim died as planned. The process tests
// run it with small counts; docs/reliability.md has its figures.
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/bootstrap/local_launch.hpp>
#include <dcomm/dcomm.hpp>

#include "../tools/cli.hpp"

using namespace dcomm;

namespace {
struct Options {
  int ranks = 4, victim = 2, reps = 3, rounds = 20;
  size_t count = 1 << 18;
  ShrinkMode mode = ShrinkMode::kDefault;
  std::string transport = "shm";
  bool grow = false;
};

long long now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // one clock for every process on the host
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

void append(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n" << std::flush;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Each rank contributes `value` everywhere: every element of the sum must be `expected`.
Status checked_all_reduce(Communicator& c, size_t count, float value, float expected) {
  std::vector<float> x(count, value);
  DCOMM_RETURN_IF_ERROR(c.all_reduce(std::span(x), ReduceOp::kSum));
  for (size_t k : {size_t{0}, count / 2, count - 1})
    if (x[k] != expected)
      return make_error(ErrorCode::kInternal, "all_reduce element ", k, " is ", x[k], ", not ", expected);
  return {};
}

// A survivor's way on; returns its exit code. `out` gets "rank R detect lost revoke shrink next" (ns).
int recover(Communicator& c, const Options& o, long long detect, const std::string& out) {
  std::vector<int> lost;
  const auto until = now_ns() + 5'000'000'000LL;
  while ((lost = c.lost_ranks()).empty() && now_ns() < until) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const long long t_lost = now_ns();
  if (lost != std::vector<int>{o.victim}) {
    std::fprintf(stderr, "rank %d: lost ranks %s, not {%d}\n", c.rank(), detail::rank_list(lost).c_str(), o.victim);
    return 4;
  }
  c.revoke();
  const long long t_revoke = now_ns();
  auto shrunk = c.shrink(lost, o.mode);
  const long long t_shrink = now_ns();
  if (!shrunk.ok()) return std::fprintf(stderr, "rank %d: %s\n", c.rank(), shrunk.status().message().c_str()), 5;
  Communicator& s = **shrunk;
  // The survivors' old ranks plus one, summed: exact whatever the victim was.
  const float survivors_sum = static_cast<float>(o.ranks * (o.ranks + 1) / 2 - (o.victim + 1));
  Status ok = checked_all_reduce(s, o.count, static_cast<float>(c.rank() + 1), survivors_sum);
  const long long t_next = now_ns();
  if (!ok.ok()) return std::fprintf(stderr, "rank %d: %s\n", c.rank(), ok.message().c_str()), 6;
  append(out, detail::cat("rank ", c.rank(), " ", detect, " ", t_lost, " ", t_revoke, " ", t_shrink, " ", t_next));
  if (!o.grow) return 0;
  std::optional<UniqueId> id;
  if (s.rank() == 0) {
    auto made = s.grow_id();
    if (!made.ok()) return std::fprintf(stderr, "grow_id: %s\n", made.status().message().c_str()), 7;
    id = *made;
    append(out + ".id", id->to_string());
  }
  auto grown = s.grow(o.ranks, id ? &*id : nullptr);
  if (!grown.ok()) return std::fprintf(stderr, "rank %d: %s\n", c.rank(), grown.status().message().c_str()), 7;
  const float all = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
  ok = checked_all_reduce(**grown, o.count, static_cast<float>((*grown)->rank() + 1), all);
  if (!ok.ok()) return std::fprintf(stderr, "rank %d after grow: %s\n", c.rank(), ok.message().c_str()), 8;
  return 0;
}

int rank_main(const Options& o, const std::string& out) {
  auto comm = Communicator::from_env();
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().message().c_str()), 3;
  Communicator& c = **comm;
  std::vector<float> x(o.count);
  for (int i = 0;; ++i) {
    if (c.rank() == o.victim && i == o.rounds)
      std::thread([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(300));  // inside the next all_reduce
        append(out, detail::cat("kill ", now_ns()));
        raise(SIGKILL);
      }).detach();
    std::fill(x.begin(), x.end(), 1.0f);
    Status s = c.all_reduce(std::span(x), ReduceOp::kSum);
    if (!s.ok()) return recover(c, o, now_ns(), out);
    if (x[0] != static_cast<float>(c.size())) return std::fprintf(stderr, "round %d: wrong sum\n", i), 6;
  }
}

int join_main(const Options& o) {
  auto id = UniqueId::parse(env("DCOMM_RECOVERY_ID"));
  auto config = Config::from_env();
  if (!id.ok() || !config.ok()) return 3;
  auto c = Communicator::join(o.ranks - 1, o.ranks, *id, *config);
  if (!c.ok()) return std::fprintf(stderr, "join: %s\n", c.status().message().c_str()), 7;
  const float all = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
  Status ok = checked_all_reduce(**c, o.count, static_cast<float>(o.ranks), all);
  if (!ok.ok()) return std::fprintf(stderr, "joined rank: %s\n", ok.message().c_str()), 8;
  return 0;
}

// One repetition: spawn, wait, read what the survivors wrote. Returns the row, or "" on failure.
std::string one_rep(const Options& o, const std::vector<std::string>& argv, int rep, bool* ok) {
  const std::string dir = detail::cat("/tmp/dcomm-recovery-", getpid(), "-", rep);
  mkdir(dir.c_str(), 0700);
  const std::string out = dir + "/times";
  auto port = free_rendezvous_port();
  if (!port.ok()) return std::fprintf(stderr, "%s\n", port.status().message().c_str()), *ok = false, "";
  const std::string secret = detail::cat("dcomm-recovery-", getpid(), "-", rep);  // a job's own (no warning)
  auto procs = spawn_processes(argv, o.ranks, [&](int r) {
    auto env = torchrun_env(r, o.ranks, *port, secret);
    env.insert(env.end(), {"DCOMM_RECOVERY_ROLE=rank", "DCOMM_RECOVERY_OUT=" + out, "DCOMM_TRANSPORT=" + o.transport});
    return env;
  });
  if (!procs.ok()) return std::fprintf(stderr, "%s\n", procs.status().message().c_str()), *ok = false, "";
  std::optional<LocalRanks> joiner;
  if (o.grow) {
    std::string id;
    for (int k = 0; k < 60000 && id.empty(); ++k) {
      std::ifstream(out + ".id") >> id;
      if (id.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    auto j = spawn_processes(argv, 1, [&](int) {
      return std::vector<std::string>{"DCOMM_RECOVERY_ROLE=join", "DCOMM_RECOVERY_ID=" + id,
                                      "DCOMM_TRANSPORT=" + o.transport};
    });
    if (j.ok()) joiner = *j;
    *ok &= j.ok() && wait_local_ranks(*joiner, std::chrono::seconds(120)).ok() && joiner->exit_codes[0] == 0;
  }
  Status waited = wait_local_ranks(*procs, std::chrono::seconds(120));
  if (!waited.ok()) std::fprintf(stderr, "%s\n", waited.message().c_str()), *ok = false;
  for (int r = 0; r < o.ranks; ++r) {
    const int want = r == o.victim ? -SIGKILL : 0, got = procs->exit_codes[static_cast<size_t>(r)];
    if (got != want) std::fprintf(stderr, "rep %d: rank %d exited %d, not %d\n", rep, r, got, want), *ok = false;
  }
  long long kill = 0, worst[5] = {};
  int survivors = 0;
  std::ifstream in(out);
  for (std::string word; in >> word;) {
    if (word == "kill") {
      in >> kill;
      continue;
    }
    int r = 0;
    long long t[5] = {};
    in >> r >> t[0] >> t[1] >> t[2] >> t[3] >> t[4];
    for (int k = 0; k < 5; ++k) worst[k] = std::max(worst[k], t[k]);
    ++survivors;
  }
  if (kill == 0 || survivors != o.ranks - 1)
    return std::fprintf(stderr, "rep %d: %d survivors reported\n", rep, survivors), *ok = false, "";
  auto ms = [&](long long a, long long b) { return static_cast<double>(b - a) / 1e6; };
  char row[200];
  std::snprintf(row, sizeof row, "%4d %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f", rep, ms(kill, worst[0]),
                ms(worst[0], worst[1]), ms(worst[1], worst[2]), ms(worst[2], worst[3]), ms(worst[3], worst[4]),
                ms(kill, worst[4]));
  std::system(detail::cat("rm -rf ", dir).c_str());
  return row;
}

void parse(int argc, char** argv, Options* o) {
  dcomm_cli::Cli cli("dcomm-recovery", "[flags]",
                     "Kills a rank with SIGKILL mid-all_reduce; the survivors revoke, shrink past it and go on, timed.");
  auto number = [](int* at, int least) {
    return [at, least](const std::string& v) {
      *at = std::atoi(v.c_str());
      return *at >= least ? std::string() : detail::cat("must be at least ", least);
    };
  };
  cli.flag("--ranks", "N", "processes (default 4)", number(&o->ranks, 2))
      .flag("--victim", "R", "the rank killed (default 2; 0 serves the first store)", number(&o->victim, 0))
      .flag("--mode", "M", "shrink mode: default or abort (default: default)",
            [o](const std::string& m) {
              o->mode = m == "abort" ? ShrinkMode::kAbort : ShrinkMode::kDefault;
              return m == "abort" || m == "default" ? "" : "default or abort";
            })
      .flag("--transport", "T", "DCOMM_TRANSPORT for the ranks: shm, tcp, ucx, ... (default shm)",
            [o](const std::string& t) {
              o->transport = t;
              return "";
            })
      .flag("--reps", "K", "repetitions (default 3)", number(&o->reps, 1))
      .flag("--count", "N", "float elements per all_reduce (default 262144)",
            [o](const std::string& v) {
              o->count = std::strtoull(v.c_str(), nullptr, 10);
              return o->count >= 1 ? "" : "must be at least 1";
            })
      .flag("--grow", "", "then a new process joins and all the ranks run an all_reduce", [o](const std::string&) {
        o->grow = true;
        return "";
      });
  cli.parse(argc, argv);
  if (o->victim >= o->ranks) cli.fail(detail::cat("--victim ", o->victim, " is not below --ranks ", o->ranks));
}
}  // namespace

int main(int argc, char** argv) {
  Options o;
  parse(argc, argv, &o);
  const std::string role = env("DCOMM_RECOVERY_ROLE");
  if (role == "rank") return rank_main(o, env("DCOMM_RECOVERY_OUT"));
  if (role == "join") return join_main(o);
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 2;
  std::vector<std::string> args(argv, argv + argc);
  args[0] = self;
  std::printf("# %d ranks over %s, rank %d killed mid-all_reduce (%zu floats), shrink in %s mode%s\n", o.ranks,
              o.transport.c_str(), o.victim, o.count, o.mode == ShrinkMode::kAbort ? "abort" : "default",
              o.grow ? ", then grown back" : "");
  std::printf("# ms, the slowest survivor's: detect = kill to the failed call; lost = to lost_ranks() naming it\n");
  std::printf("%4s %10s %10s %10s %10s %10s %10s\n", "rep", "detect", "lost", "revoke", "shrink", "next_ar", "total");
  bool ok = true;
  for (int rep = 0; rep < o.reps; ++rep) {
    std::string row = one_rep(o, args, rep, &ok);
    if (!row.empty()) std::printf("%s\n", row.c_str());
    std::fflush(stdout);
  }
  std::printf(ok ? "# every survivor's results exact\n" : "# FAILED\n");
  return ok ? 0 : 1;
}
