// What a careless caller does to a communicator: ranks that make different calls, two threads
// in one communicator, and what must not depend on timing: deterministic reductions, and
// clean lifecycles (nothing left behind after create/destroy and abort/re-create).
#include <doctest/doctest.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <random>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;
using namespace std::chrono_literals;

namespace {
bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Runs call(rank) on every rank; returns each rank's status.
template <class F>
std::vector<Status> on_each(int n, F call, Config config = test_config(TransportChoice::kAuto, 5000ms)) {
  auto comms = Communicator::create_local(n, config);
  REQUIRE(comms.ok());
  std::vector<Status> out(static_cast<size_t>(n));
  on_ranks(*comms, [&](Communicator& c) { out[static_cast<size_t>(c.rank())] = call(c); });
  return out;
}

// Every rank failed, with kAborted (the communicator is done), none after a timeout; at least
// one names both calls as given.
void all_aborted_naming(const std::vector<Status>& got, const std::string& theirs, const std::string& mine) {
  bool named = false;
  for (size_t r = 0; r < got.size(); ++r) {
    CAPTURE(r);
    CHECK_MESSAGE(got[r].code() == ErrorCode::kAborted, got[r].message());
    named = named || (contains(got[r], theirs) && contains(got[r], mine));
  }
  CHECK_MESSAGE(named, "no rank named both '", theirs, "' and '", mine, "': ", got[0].message(), " | ",
                got[1].message());
}
}  // namespace

TEST_CASE("mismatched calls fail every rank with kAborted, naming both calls") {
  const auto t0 = std::chrono::steady_clock::now();
  SUBCASE("types with the same bytes: float32 against int32") {
    auto got = on_each(2, [](Communicator& c) {
      std::vector<uint32_t> buf(1024, 1);
      return c.all_reduce(buf.data(), buf.data(), buf.size(), c.rank() ? DataType::kFloat32 : DataType::kInt32,
                          ReduceOp::kSum);
    });
    all_aborted_naming(got, "called all_reduce(float32, sum, 1024)", "called all_reduce(int32, sum, 1024)");
  }
  SUBCASE("ops: sum against max") {
    auto got = on_each(3, [](Communicator& c) {
      std::vector<float> buf(100, 1.0f);
      return c.all_reduce(std::span(buf), c.rank() == 2 ? ReduceOp::kMax : ReduceOp::kSum);
    });
    all_aborted_naming(got, "all_reduce(float32, max, 100)", "all_reduce(float32, sum, 100)");
  }
  SUBCASE("counts") {
    auto got = on_each(2, [](Communicator& c) {
      std::vector<float> buf(c.rank() ? 200 : 100, 1.0f);
      return c.all_reduce(std::span(buf), ReduceOp::kSum);
    });
    all_aborted_naming(got, "all_reduce(float32, sum, 200)", "all_reduce(float32, sum, 100)");
  }
  SUBCASE("collectives: all_reduce against all_gather") {
    auto got = on_each(2, [](Communicator& c) {
      std::vector<float> a(64, 1.0f), b(128);
      if (c.rank() == 0) return c.all_reduce(std::span(a), ReduceOp::kSum);
      return c.all_gather(a.data(), b.data(), 64, DataType::kFloat32);
    });
    all_aborted_naming(got, "all_gather(float32, 64)", "all_reduce(float32, sum, 64)");
  }
  SUBCASE("reduce roots") {
    auto got = on_each(3, [](Communicator& c) {
      std::vector<int32_t> a(50, 1), b(50, 0);
      return c.reduce(a.data(), b.data(), 50, DataType::kInt32, ReduceOp::kSum, c.rank() == 1 ? 2 : 0);
    });
    bool named = false;
    for (const auto& s : got) named |= contains(s, "root 2") && contains(s, "root 0");
    CHECK(named);
    for (const auto& s : got) CHECK_MESSAGE(s.code() == ErrorCode::kAborted, s.message());
  }
  SUBCASE("point-to-point: a send of float32 received as int32 (same bytes)") {
    auto got = on_each(2, [](Communicator& c) {
      std::vector<uint32_t> buf(16, 7);
      if (c.rank() == 0) return c.send(buf.data(), 16, DataType::kFloat32, 1);
      return c.recv(buf.data(), 16, DataType::kInt32, 0);
    });
    CHECK_MESSAGE(got[1].code() == ErrorCode::kAborted, got[1].message());
    CHECK_MESSAGE(contains(got[1], "send/recv(float32, 16)"), got[1].message());
    CHECK_MESSAGE(contains(got[1], "send/recv(int32, 16)"), got[1].message());
  }
  SUBCASE("point-to-point: a send with tag 5 met by a receive with tag 6") {
    auto got = on_each(2, [](Communicator& c) {
      std::vector<float> buf(16, 7.0f);
      if (c.rank() == 0) return c.p2p({P2POp::send(buf.data(), 16, DataType::kFloat32, 1, 5)});
      return c.p2p({P2POp::recv(buf.data(), 16, DataType::kFloat32, 0, 6)});
    });
    CHECK_MESSAGE(got[1].code() == ErrorCode::kAborted, got[1].message());
    CHECK_MESSAGE(contains(got[1], "send/recv(float32, 16, tag 5)"), got[1].message());
    CHECK_MESSAGE(contains(got[1], "send/recv(float32, 16, tag 6)"), got[1].message());
  }
  // None of these waits for a deadline (5 s here): they are caught when the first slot lands.
  CHECK(std::chrono::steady_clock::now() - t0 < 4s);
}

TEST_CASE("broadcast with different roots: no root's buffer is overwritten, and every rank fails") {
  // Ranks that each believe themselves the root only send. A broadcast that fits the FIFOs
  // returns with none of its slots read: the next call meets them and fails everywhere. A
  // larger one stalls, and the stalled ranks ask which call their peers are in.
  for (size_t count : {8, 5000}) {
    for (int n : {2, 3}) {
      CAPTURE(count);
      CAPTURE(n);
      auto comms = Communicator::create_local(n, test_config(TransportChoice::kAuto, 10000ms));
      REQUIRE(comms.ok());
      std::vector<Status> first(static_cast<size_t>(n)), next(static_cast<size_t>(n));
      std::vector<std::vector<int32_t>> bufs(static_cast<size_t>(n));
      const auto t0 = std::chrono::steady_clock::now();
      on_ranks(*comms, [&](Communicator& c) {
        const int r = c.rank();
        const int root = r == n - 1 ? n - 1 : 0;  // the last rank disagrees
        auto& buf = bufs[static_cast<size_t>(r)];
        buf.assign(count, r == root ? 100 + r : -1);
        first[static_cast<size_t>(r)] = c.broadcast(std::span(buf), root);
        std::vector<int32_t> x(10, 1);
        next[static_cast<size_t>(r)] = c.all_reduce(std::span(x), ReduceOp::kSum);
      });
      CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // well before the 10 s deadline
      // Rank 0 and the last rank both thought they were the root: their data is their own.
      CHECK(bufs[0][count - 1] == 100);
      CHECK(bufs[static_cast<size_t>(n - 1)][count - 1] == 100 + n - 1);
      // Every rank fails (in the broadcast, or at the next call), and the calls that met are
      // named (each rank names the one it met). The last rank's broadcast is named when a peer
      // reads its slot; it may instead have finished as a root and moved on, and then the peer
      // meets its all_reduce first (the abort that follows ends the other ranks' waits before
      // they read the older slot): a race between two detections, either of which is right.
      std::string all;
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        const Status& s =
            first[static_cast<size_t>(r)].ok() ? next[static_cast<size_t>(r)] : first[static_cast<size_t>(r)];
        CHECK_MESSAGE(s.code() == ErrorCode::kAborted, s.message());
        all += s.message();
      }
      CHECK(all.find("broadcast(int32, " + std::to_string(count) + ", root 0)") != std::string::npos);
      const bool last_named = all.find("broadcast(int32, " + std::to_string(count) + ", root " + std::to_string(n - 1) +
                                       ")") != std::string::npos;
      CHECK_MESSAGE((last_named || all.find("all_reduce(int32, sum, 10)") != std::string::npos), all);
    }
  }
}

TEST_CASE("a second thread entering a communicator in a call gets an error; the first call is unharmed") {
  auto comms = Communicator::create_local(2, test_config());
  REQUIRE(comms.ok());
  std::vector<Status> intruders;
  on_ranks(*comms, [&](Communicator& c) {
    std::vector<float> v(100000, static_cast<float>(c.rank() + 1));
    if (c.rank() == 1) {
      std::this_thread::sleep_for(500ms);  // rank 0's call waits for this rank meanwhile
      CHECK(c.all_reduce(std::span(v), ReduceOp::kSum).ok());
      return;
    }
    std::thread intruder([&] {
      std::this_thread::sleep_for(100ms);  // rank 0's main thread is inside its all_reduce now
      for (int i = 0; i < 3; ++i) {
        std::vector<float> z(16, 1.0f);
        intruders.push_back(c.all_reduce(std::span(z), ReduceOp::kSum));
        intruders.push_back(c.barrier());
        intruders.push_back(c.all_reduce_async(std::span(z), ReduceOp::kSum).wait());
      }
    });
    Status s = c.all_reduce(std::span(v), ReduceOp::kSum);
    intruder.join();
    CHECK(s.ok());
    CHECK(v[0] == 3.0f);
    CHECK(v[99999] == 3.0f);
  });
  REQUIRE(intruders.size() == 9);
  for (const Status& s : intruders) {
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(contains(s, "another thread is inside a call on this communicator"), s.message());
  }
  // Both ranks go on.
  on_ranks(*comms, [&](Communicator& c) {
    std::vector<int32_t> x(10, 1);
    CHECK(c.all_reduce(std::span(x), ReduceOp::kSum).ok());
    CHECK(x[9] == 2);
  });
}

TEST_CASE("DCOMM_DETERMINISTIC=1: bitwise equal results whatever the algorithm forced") {
  // Random floats of wide range: float sums depend on their order, so different algorithms
  // give different bits unless the order is fixed.
  const int n = 5;
  const size_t count = 20011;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  for (auto& in : inputs)
    for (auto& x : in) x = std::ldexp(mant(rng), expo(rng)) * (rng() & 1 ? 1.0f : -1.0f);
  auto run = [&](const std::string& algo, bool deterministic, OpKind kind) {
    Config cfg = test_config();
    cfg.slot_bytes = 4096;
    cfg.deterministic = deterministic;
    cfg.algo = *parse_algo(algo);
    auto comms = Communicator::create_local(n, cfg);
    REQUIRE(comms.ok());
    std::vector<std::vector<float>> out(n);
    on_ranks(*comms, [&](Communicator& c) {
      const int r = c.rank();
      auto& o = out[static_cast<size_t>(r)];
      const auto& in = inputs[static_cast<size_t>(r)];
      Status s;
      if (kind == OpKind::kAllReduce) {
        o.resize(count);
        s = c.all_reduce(in.data(), o.data(), count, DataType::kFloat32, ReduceOp::kSum);
      } else if (kind == OpKind::kReduceScatter) {
        o.resize(count / n);
        s = c.reduce_scatter(in.data(), o.data(), count / n, DataType::kFloat32, ReduceOp::kSum);
      } else {
        o.resize(count);
        s = c.reduce(in.data(), o.data(), count, DataType::kFloat32, ReduceOp::kSum, 2);
      }
      CHECK(s.ok());
    });
    return kind == OpKind::kReduce ? std::vector<std::vector<float>>{out[2]} : out;
  };
  for (OpKind kind : {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kReduce}) {
    CAPTURE(to_string(kind));
    const auto reference = run("", true, kind);
    for (const char* algo :
         {"ring", "recursive_doubling", "rabenseifner;halving_doubling", "tree", "double_tree", "direct"}) {
      CAPTURE(algo);
      CHECK(run(algo, true, kind) == reference);
    }
    // Without it, some algorithms differ: the test can tell.
    if (kind == OpKind::kAllReduce) {
      bool any_differs = false;
      for (const char* algo : {"ring", "recursive_doubling", "tree"})
        any_differs |= run(algo, false, kind) != reference;
      CHECK(any_differs);
    }
  }
}

namespace {
int count_dir(const char* path, const std::string& prefix = "") {
  int n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.' && std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}
long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  long v = 0;
  while (in >> key)
    if (key == "VmRSS:" && in >> v) return v;
  return -1;
}
struct Footprint {
  int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task"), shm = count_dir("/dev/shm", "dcomm-");
  long rss = rss_kib();
};
}  // namespace

TEST_CASE(
    "lifecycles: create/destroy and abort/re-create 100 times leave descriptors, threads, /dev/shm and memory as they "
    "were") {
  for (TransportChoice t : {TransportChoice::kInproc, TransportChoice::kShm, TransportChoice::kTcp}) {
    CAPTURE(static_cast<int>(t));
    auto cycle = [&](bool abort) {
      auto comms = Communicator::create_local(2, test_config(t, 5000ms));
      REQUIRE(comms.ok());
      on_ranks(*comms, [&](Communicator& c) {
        std::vector<int32_t> v(100, 1);
        CHECK(c.all_reduce(std::span(v), ReduceOp::kSum).ok());
      });
      if (abort) (*comms)[1]->abort("the test re-creates it");
    };
    for (int i = 0; i < 5; ++i) cycle(i % 2);  // warm-up: first-use allocations, the logger
    const Footprint before;
    for (int i = 0; i < 100; ++i) cycle(i % 2);
    const Footprint after;
    CHECK(after.fds == before.fds);
    CHECK(after.threads == before.threads);
    CHECK(after.shm == before.shm);
    CHECK_MESSAGE(after.rss - before.rss < 8 * 1024, "resident memory grew by ", after.rss - before.rss, " KiB");
  }
}
