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
#include <utility>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/bootstrap/local_launch.hpp>
#include <dcomm/dcomm.hpp>

#include "../tools/cli.hpp"
#include "support/footprint.hpp"

using namespace dcomm;

namespace {
struct Options {
  int ranks = 4, victim = 2, reps = 3, rounds = 20;
  size_t count = 1 << 18;
  ShrinkMode mode = ShrinkMode::kDefault;
  std::string transport = "shm";
  bool grow = false;
  std::vector<std::pair<std::string, std::string>> netns;  // (namespace, interface): rank r in the (r % k)-th
  std::string master = "127.0.0.1";                        // where rank 0 serves the store
  int cycles = 0;  // --cycles: kill, shrink and grow this many times in one job (leak count)
};

// Rank r's command line: in its network namespace, publishing that namespace's interface.
std::vector<std::string> in_namespace(const Options& o, int r, const std::vector<std::string>& argv) {
  if (o.netns.empty()) return argv;
  const auto& [ns, ifname] = o.netns[static_cast<size_t>(r) % o.netns.size()];
  std::string ip = "/sbin/ip";  // posix_spawn does not search PATH
  for (const char* at : {"/usr/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(at, X_OK) == 0) ip = at;
  std::vector<std::string> cmd = {
      ip, "netns", "exec", ns, "/usr/bin/env", "DCOMM_SOCKET_IFNAME=" + ifname, "UCX_NET_DEVICES=" + ifname};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

// Spawns rank r alone (its own command line), adding it to `all`.
Status spawn_rank(const Options& o, int r, const std::vector<std::string>& argv, std::vector<std::string> env,
                  LocalRanks* all) {
  auto one = spawn_processes(in_namespace(o, r, argv), 1, [&](int) { return env; });
  if (!one.ok()) return one.status();
  all->pids.push_back(one->pids[0]);
  all->exit_codes.push_back(0);
  return {};
}

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
  const std::vector<int> lost = c.lost_ranks(std::chrono::seconds(5));
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

int cycle_main(const Options& o, std::unique_ptr<Communicator> c, int first, const std::string& out);

int rank_main(const Options& o, const std::string& out) {
  auto comm = Communicator::from_env();
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().message().c_str()), 3;
  if (o.cycles > 0) return cycle_main(o, std::move(*comm), 0, out);
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

// --cycles: from cycle `first` on, the newest rank (the last to join) is killed mid-all_reduce
// each cycle; the others shrink past it, destroy what they leave behind, and grow back with the
// process the driver starts for the id they publish (out.id.<cycle>). The survivors of every
// cycle compare what they hold after warm-up with what they hold at the end.
int cycle_main(const Options& o, std::unique_ptr<Communicator> c, int first, const std::string& out) {
  const float all = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
  dcomm_test::Footprint before;
  const int warm = std::min(2, o.cycles);
  for (int cycle = first; cycle < o.cycles; ++cycle) {
    if (cycle == warm) before = dcomm_test::Footprint::now();
    if (Status s = checked_all_reduce(*c, o.count, static_cast<float>(c->rank() + 1), all); !s.ok())
      return std::fprintf(stderr, "cycle %d, rank %d: %s\n", cycle, c->rank(), s.message().c_str()), 6;
    // The newest rank arms its kill once a call after the checked one has completed: every rank
    // took part in that call, so every rank's checked call had ended. Armed right after the
    // checked call, it failed a survivor's checked call once over TCP with the suite running
    // beside it (the killed rank's last bytes never arrived: still in its proxy, most likely).
    const bool newest = c->rank() == c->size() - 1;
    std::vector<float> x(o.count);
    for (bool armed = false; c->all_reduce(std::span(x), ReduceOp::kSum).ok();) {
      if (!newest || armed) continue;
      armed = true;
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        raise(SIGKILL);
      }).detach();
    }
    auto shrunk = c->shrink(c->lost_ranks(std::chrono::seconds(5)), o.mode);
    if (!shrunk.ok()) return std::fprintf(stderr, "cycle %d: %s\n", cycle, shrunk.status().message().c_str()), 5;
    c.reset();  // what the dead rank left: links, files, the proxy's sockets
    std::optional<UniqueId> id;
    if ((*shrunk)->rank() == 0) {
      auto made = (*shrunk)->grow_id();
      if (!made.ok()) return std::fprintf(stderr, "grow_id: %s\n", made.status().message().c_str()), 7;
      id = *made;
      append(detail::cat(out, ".id.", cycle), id->to_string());
    }
    auto grown = (*shrunk)->grow(o.ranks, id ? &*id : nullptr);
    if (!grown.ok()) return std::fprintf(stderr, "cycle %d: %s\n", cycle, grown.status().message().c_str()), 7;
    c = std::move(*grown);
  }
  if (Status s = checked_all_reduce(*c, o.count, static_cast<float>(c->rank() + 1), all); !s.ok())
    return std::fprintf(stderr, "last all_reduce, rank %d: %s\n", c->rank(), s.message().c_str()), 6;
  if (first > warm) return 0;  // joined after warm-up: nothing to compare
  // As at the warm-up's snapshot: one communicator of every rank, its ring connected.
  const auto after = dcomm_test::Footprint::settled(before);
  append(out + ".footprint", after.describe(before));
  // Resident memory: allocators keep some of what was freed; 100 cycles that each leaked a
  // link's FIFOs (hundreds of kB) would pass this bound many times over.
  if (after.holds_more_than(before) || after.rss_kb > before.rss_kb + 16 * 1024)
    return std::fprintf(stderr, "after %d cycles: %s\n", o.cycles, after.describe(before).c_str()), 9;
  return 0;
}

int join_main(const Options& o, const std::string& out) {
  auto id = UniqueId::parse(env("DCOMM_RECOVERY_ID"));
  auto config = Config::from_env();
  if (!id.ok() || !config.ok()) return 3;
  auto c = Communicator::join(o.ranks - 1, o.ranks, *id, *config);
  if (!c.ok()) return std::fprintf(stderr, "join: %s\n", c.status().message().c_str()), 7;
  if (o.cycles > 0) return cycle_main(o, std::move(*c), std::atoi(env("DCOMM_RECOVERY_CYCLE")), out);
  const float all = static_cast<float>(o.ranks * (o.ranks + 1) / 2);
  Status ok = checked_all_reduce(**c, o.count, static_cast<float>(o.ranks), all);
  if (!ok.ok()) return std::fprintf(stderr, "joined rank: %s\n", ok.message().c_str()), 8;
  return 0;
}

// The job's N ranks, started as torchrun starts them; their output files begin with `out`.
Result<LocalRanks> start_job(const Options& o, const std::vector<std::string>& argv, const std::string& out,
                             const std::string& secret) {
  auto port = free_rendezvous_port();
  if (!port.ok()) return port.status();
  LocalRanks procs;
  for (int r = 0; r < o.ranks; ++r) {
    auto env = torchrun_env(r, o.ranks, *port, secret, o.master);
    env.insert(env.end(), {"DCOMM_RECOVERY_ROLE=rank", "DCOMM_RECOVERY_OUT=" + out, "DCOMM_TRANSPORT=" + o.transport});
    if (Status s = spawn_rank(o, r, argv, env, &procs); !s.ok()) {
      for (pid_t p : procs.pids) kill(p, SIGKILL);
      return s;
    }
  }
  return procs;
}

// A new process joining with the id the survivors publish in `id_file` (at most a minute away).
Status start_joiner(const Options& o, const std::vector<std::string>& argv, const std::string& id_file,
                    const std::string& out, int cycle, LocalRanks* into) {
  std::string id;
  for (int k = 0; k < 60000 && id.empty(); ++k) {
    std::ifstream(id_file) >> id;
    if (id.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (id.empty()) return make_error(ErrorCode::kTimeout, "no id in ", id_file, " within a minute");
  return spawn_rank(o, o.ranks - 1, argv,
                    {"DCOMM_RECOVERY_ROLE=join", "DCOMM_RECOVERY_ID=" + id, "DCOMM_TRANSPORT=" + o.transport,
                     "DCOMM_RECOVERY_OUT=" + out, detail::cat("DCOMM_RECOVERY_CYCLE=", cycle)},
                    into);
}

// --cycles: one job, a new process for each cycle's id; true when every step was exact, every
// cycle killed one rank, and the survivors hold what they held after warm-up.
bool cycles_job(const Options& o, const std::vector<std::string>& argv) {
  const std::string dir = detail::cat("/tmp/dcomm-recovery-", getpid(), "-cycles"), out = dir + "/out";
  mkdir(dir.c_str(), 0700);
  auto procs = start_job(o, argv, out, detail::cat("dcomm-recovery-", getpid()));
  if (!procs.ok()) return std::fprintf(stderr, "%s\n", procs.status().message().c_str()), false;
  const auto t0 = std::chrono::steady_clock::now();
  bool ok = true;
  for (int cycle = 0; cycle < o.cycles && ok; ++cycle) {
    Status s = start_joiner(o, argv, detail::cat(out, ".id.", cycle), out, cycle + 1, &*procs);
    if (!s.ok()) std::fprintf(stderr, "cycle %d: %s\n", cycle, s.message().c_str()), ok = false;
  }
  Status waited = wait_local_ranks(*procs, std::chrono::seconds(600));
  if (!waited.ok()) std::fprintf(stderr, "%s\n", waited.message().c_str()), ok = false;
  int killed = 0, clean = 0;
  for (int code : procs->exit_codes) killed += code == -SIGKILL, clean += code == 0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%d cycles in %.1f s: %d ranks killed, %d exited cleanly (want %d and %d)\n", o.cycles, secs, killed,
              clean, o.cycles, o.ranks);
  std::ifstream in(out + ".footprint");
  for (std::string line; std::getline(in, line);) std::printf("  a survivor of every cycle: %s\n", line.c_str());
  std::system(detail::cat("rm -rf ", dir).c_str());
  return ok && killed == o.cycles && clean == o.ranks;
}

// One repetition: spawn, wait, read what the survivors wrote. Returns the row, or "" on failure.
std::string one_rep(const Options& o, const std::vector<std::string>& argv, int rep, bool* ok) {
  const std::string dir = detail::cat("/tmp/dcomm-recovery-", getpid(), "-", rep);
  mkdir(dir.c_str(), 0700);
  const std::string out = dir + "/times";
  auto procs = start_job(o, argv, out, detail::cat("dcomm-recovery-", getpid(), "-", rep));
  if (!procs.ok()) return std::fprintf(stderr, "%s\n", procs.status().message().c_str()), *ok = false, "";
  if (o.grow) {
    LocalRanks joiner;
    Status s = start_joiner(o, argv, out + ".id", out, 0, &joiner);
    *ok &= s.ok() && wait_local_ranks(joiner, std::chrono::seconds(120)).ok() && joiner.exit_codes[0] == 0;
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
  dcomm_cli::Cli cli(
      "dcomm-recovery", "[flags]",
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
      .flag("--grow", "", "then a new process joins and all the ranks run an all_reduce",
            [o](const std::string&) {
              o->grow = true;
              return "";
            })
      .flag("--netns", "NS:IF,...",
            "rank r runs in network namespace r % k of the list, on its interface IF\n"
            "(ip netns exec; tests/netns/netns_test.sh makes two)",
            [o](const std::string& v) {
              std::stringstream list(v);
              for (std::string item; std::getline(list, item, ',');) {
                const size_t colon = item.find(':');
                if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) return "NS:IF,NS:IF,...";
                o->netns.emplace_back(item.substr(0, colon), item.substr(colon + 1));
              }
              return "";
            })
      .flag("--cycles", "K",
            "instead of --reps: one job in which the newest rank is killed, shrunk past and replaced K times;\n"
            "a survivor of every cycle then holds the descriptors, threads, files and memory it held after warm-up",
            number(&o->cycles, 1))
      .flag("--master", "ADDR", "where rank 0 serves the store (default 127.0.0.1; with --netns, its address)",
            [o](const std::string& v) {
              o->master = v;
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
  if (role == "join") return join_main(o, env("DCOMM_RECOVERY_OUT"));
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 2;
  std::vector<std::string> args(argv, argv + argc);
  args[0] = self;
  if (o.cycles > 0) {
    std::printf("# %d ranks over %s: %d cycles of kill (the newest rank, mid-all_reduce), shrink and grow\n", o.ranks,
                o.transport.c_str(), o.cycles);
    return cycles_job(o, args) ? 0 : 1;
  }
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
