#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <dcomm/core/env.hpp>
#include <dcomm/core/status.hpp>
#include <dcomm/core/wait.hpp>

using namespace dcomm;

TEST_CASE("Status and Result carry the error and its context") {
  Status ok;
  CHECK(ok.ok());
  Status bad = invalid_argument("root ", 7, " is out of range");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == ErrorCode::kInvalidArgument);
  CHECK(bad.with_context("broadcast on rank 2").message() == "broadcast on rank 2: root 7 is out of range");
  int made = 0;  // a context given as a callable is made only on failure
  auto make = [&] { return std::to_string(++made) + " on rank 2"; };
  CHECK(ok.with_context(make).ok());
  CHECK(made == 0);
  CHECK(bad.with_context(make).message() == "1 on rank 2: root 7 is out of range");
  CHECK(bad.with_context(make).code() == ErrorCode::kInvalidArgument);
  CHECK(made == 2);
  Result<int> r = 5;
  CHECK(r.ok());
  CHECK(*r == 5);
  Result<int> e = bad;
  CHECK_FALSE(e.ok());
  CHECK(e.status().message() == "root 7 is out of range");
}

TEST_CASE("Config::from_env reads DCOMM_* variables and names a bad one") {
  // A bad value of `var` fails with a message that names it; `var` is unset again either way.
  auto rejects = [](const char* var, const char* value) {
    setenv(var, value, 1);
    auto bad = Config::from_env();
    unsetenv(var);
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.status().message().find(var) != std::string::npos);
  };
  setenv("DCOMM_TIMEOUT_MS", "1234", 1);
  setenv("DCOMM_SLOT_BYTES", "64K", 1);
  setenv("DCOMM_TRANSPORT", "tcp", 1);
  auto c = Config::from_env();
  REQUIRE(c.ok());
  CHECK(c->timeout.count() == 1234);
  CHECK(c->slot_bytes == 65536);
  CHECK(c->transport == TransportChoice::kTcp);

  rejects("DCOMM_TIMEOUT_MS", "soon");

  setenv("DCOMM_TRANSPORT", "carrier-pigeon", 1);
  auto bad_t = Config::from_env();
  REQUIRE_FALSE(bad_t.ok());
  CHECK(bad_t.status().message().find("carrier-pigeon") != std::string::npos);

  setenv("DCOMM_SLOTS", "2", 1);  // fewer than 3 slots could deadlock a ring
  unsetenv("DCOMM_TRANSPORT");
  auto bad_s = Config::from_env();
  REQUIRE_FALSE(bad_s.ok());
  CHECK(bad_s.status().message().find("DCOMM_SLOTS") != std::string::npos);
  unsetenv("DCOMM_SLOTS");
  unsetenv("DCOMM_SLOT_BYTES");

  CHECK(Config::from_env()->staged_copy == -1);  // auto: over 2 ranks a core
  setenv("DCOMM_STAGED_COPY", "0", 1);
  CHECK(Config::from_env()->staged_copy == 0);
  rejects("DCOMM_STAGED_COPY", "2");

  CHECK(Config::from_env()->duel);  // on unless DCOMM_DUEL=0
  setenv("DCOMM_DUEL", "0", 1);
  CHECK_FALSE(Config::from_env()->duel);
  rejects("DCOMM_DUEL", "yes");
  setenv("DCOMM_DETERMINISTIC", "1", 1);
  CHECK(Config::from_env()->deterministic);
  rejects("DCOMM_DETERMINISTIC", "2");

  CHECK(Config::from_env()->take_area_bytes == -1);  // auto: the L2 over twice the slots
  setenv("DCOMM_TAKE_AREA_BYTES", "64K", 1);
  CHECK(Config::from_env()->take_area_bytes == 65536);
  rejects("DCOMM_TAKE_AREA_BYTES", "-2");
}

TEST_CASE("parse_size understands K, M and G suffixes") {
  CHECK(*parse_size("8", "x") == 8);
  CHECK(*parse_size("4K", "x") == 4096);
  CHECK(*parse_size("256M", "x") == 256LL << 20);
  CHECK(*parse_size("1G", "x") == 1LL << 30);
  CHECK_FALSE(parse_size("12Q", "x").ok());
}

TEST_CASE("WaitClock: the deadline and the stall diagnosis start at the first slow tick, progress restarts both") {
  Config c;
  c.timeout = std::chrono::milliseconds(400);  // the stall threshold is a quarter: 100 ms
  CHECK(stall_threshold(c) == std::chrono::milliseconds(100));
  WaitClock clock(c);
  CHECK(clock.tick() == WaitClock::Tick::kWait);  // starts both clocks
  CHECK(clock.tick() == WaitClock::Tick::kWait);  // well within 100 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  CHECK(clock.tick() == WaitClock::Tick::kDiagnose);
  CHECK(clock.tick() == WaitClock::Tick::kWait);  // the next diagnosis is ten thresholds away
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(clock.tick() == WaitClock::Tick::kTimedOut);
  CHECK(clock.tick() == WaitClock::Tick::kTimedOut);  // it stays timed out
  clock.restart();                                    // progress
  CHECK(clock.tick() == WaitClock::Tick::kWait);
  CHECK(clock.tick() == WaitClock::Tick::kWait);
  // Short deadlines diagnose at 50 ms at the least; long ones after a second at the most.
  c.timeout = std::chrono::milliseconds(100);
  CHECK(stall_threshold(c) == std::chrono::milliseconds(50));
  c.timeout = std::chrono::milliseconds(600'000);
  CHECK(stall_threshold(c) == std::chrono::milliseconds(1000));
}

TEST_CASE("Backoff: DCOMM_SPIN counts polls, so a wait that polls many things a round spins fewer rounds") {
  CHECK(Backoff(16).spin_rounds() == 16);
  CHECK(Backoff(16, 1).spin_rounds() == 16);
  CHECK(Backoff(16, 6).spin_rounds() == 2);  // 4 ranks' all_to_all: 3 sends and 3 receives
  CHECK(Backoff(2000, 2).spin_rounds() == 1000);
  CHECK(Backoff(16, 0).spin_rounds() == 16);  // nothing polled: as one
  CHECK(Backoff(4, 14).spin_rounds() == 1);   // where it spins at all, at least one round
  CHECK(Backoff(0, 6).spin_rounds() == 0);    // DCOMM_SPIN=0 yields at once
}

TEST_CASE("fifo_slots: the default FIFO depth follows the tree's depth at scale; DCOMM_SLOTS always wins") {
  const Config d;
  CHECK(fifo_slots(d, 2) == 8);
  CHECK(fifo_slots(d, 255) == 8);  // floor(log2 255) + 1 = 8
  CHECK(fifo_slots(d, 256) == 9);  // the tree is 9 deep
  CHECK(fifo_slots(d, 1024) == 11);
  CHECK(fifo_slots(d, 65536) == 17);  // docs/algorithms.md: 16 slots or more reach the double tree's bound
  setenv("DCOMM_SLOTS", "4", 1);
  auto set = Config::from_env();
  unsetenv("DCOMM_SLOTS");
  REQUIRE(set.ok());
  CHECK(fifo_slots(*set, 65536) == 4);
  auto unset = Config::from_env();
  REQUIRE(unset.ok());
  CHECK(fifo_slots(*unset, 65536) == 17);
}
