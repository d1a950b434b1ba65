// revoke(), shrink() and grow() with threads as ranks over each transport: the survivors'
// communicator is exact; disagreeing exclusions fail on every rank naming the difference; calls in
// flight are refused in default mode and ended in abort mode; revoke ends a blocked call on every
// rank; a grow from 3 to 4, after rank 0 was dropped, keeps each rank's rank; an abort while the
// others set up lazy links reaches them at once with its reason.
#include <doctest/doctest.h>

#include <atomic>
#include <latch>
#include <numeric>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;
using namespace std::chrono_literals;

namespace {
bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Every member contributes (its rank in `c` + 1) * 1000 + k at element k: the sums are exact.
void check_all_reduce(Communicator& c, size_t count = 3000) {
  std::vector<int64_t> x(count);
  for (size_t k = 0; k < count; ++k) x[k] = (c.rank() + 1) * 1000 + static_cast<int64_t>(k);
  REQUIRE(c.all_reduce(std::span(x), ReduceOp::kSum).ok());
  const int64_t n = c.size();
  for (size_t k : {size_t{0}, count / 2, count - 1})
    CHECK(x[k] == 1000 * n * (n + 1) / 2 + n * static_cast<int64_t>(k));
}

Comms make(int n, TransportChoice transport) {
  auto comms = Communicator::create_local(n, test_config(transport, 20s));
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  return std::move(*comms);
}

// Every rank but `dropped` shrinks past it (the dropped one never calls again, as if dead): the
// survivors' communicators, in order, each checked to be renumbered in order.
Comms shrink_past(Comms& comms, int dropped, ShrinkMode mode = ShrinkMode::kDefault) {
  Comms out(comms.size());
  on_ranks(comms, [&](Communicator& c) {
    if (c.rank() == dropped) return;
    auto s = c.shrink({dropped}, mode);
    REQUIRE_MESSAGE(s.ok(), s.status().message());
    out[static_cast<size_t>(c.rank())] = std::move(*s);
  });
  out.erase(out.begin() + dropped);
  for (size_t r = 0; r < out.size(); ++r) {
    CHECK(out[r]->rank() == static_cast<int>(r));
    CHECK(out[r]->size() == static_cast<int>(out.size()));
  }
  return out;
}

const TransportChoice kTransports[] = {TransportChoice::kInproc, TransportChoice::kShm, TransportChoice::kTcp};
}  // namespace

TEST_CASE("shrink past a rank that stopped calling, in default and abort mode, rank 0 among the dropped") {
  for (TransportChoice transport : kTransports) {
    for (int dropped : {0, 2}) {
      for (ShrinkMode mode : {ShrinkMode::kDefault, ShrinkMode::kAbort}) {
        CAPTURE(static_cast<int>(transport));
        CAPTURE(dropped);
        CAPTURE(static_cast<int>(mode));
        Comms comms = make(4, transport);
        on_ranks(comms, [&](Communicator& c) { check_all_reduce(c); });  // every link up
        Comms shrunk = shrink_past(comms, dropped, mode);
        if (mode == ShrinkMode::kAbort) CHECK(comms[1]->aborted());  // revoked first
        on_ranks(shrunk, [&](Communicator& c) {
          check_all_reduce(c);
          check_all_reduce(c, 5);
        });
      }
    }
  }
}

TEST_CASE("shrink twice: the second led by a rank that was not rank 0 of the first") {
  Comms comms = make(5, TransportChoice::kShm);
  Comms once = shrink_past(comms, 0);
  Comms twice = shrink_past(once, 0);  // past old rank 1, which led the first shrink
  REQUIRE(twice.size() == 3);
  on_ranks(twice, [&](Communicator& c) { check_all_reduce(c); });
}

TEST_CASE(
    "survivors that disagree on whom to exclude fail on every rank, naming the difference; agreeing, they go on") {
  Comms comms = make(4, TransportChoice::kShm);
  std::vector<Status> got(4);
  on_ranks(comms, [&](Communicator& c) {
    if (c.rank() == 3) return;
    std::vector<int> excluded = c.rank() == 1 ? std::vector<int>{2, 3} : std::vector<int>{3};
    if (c.rank() == 2) excluded = {3};
    auto s = c.shrink(excluded);
    got[static_cast<size_t>(c.rank())] = s.status();
  });
  for (int r : {0, 1}) {
    CAPTURE(r);
    CHECK(got[static_cast<size_t>(r)].code() == ErrorCode::kInvalidArgument);
    CHECK(contains(got[static_cast<size_t>(r)], "disagree on whom to exclude"));
    CHECK(contains(got[static_cast<size_t>(r)], "{2,3}"));
    CHECK(contains(got[static_cast<size_t>(r)], "{3}"));
  }
  CHECK_FALSE(got[2].ok());  // excluded by rank 1: it learns the disagreement too
  CHECK(contains(got[2], "disagree"));
  // Tried again with the same set, it works: the leader serves the store it served the first time.
  Comms shrunk(4);
  on_ranks(comms, [&](Communicator& c) {
    if (c.rank() == 3) return;
    auto s = c.shrink({3});
    REQUIRE_MESSAGE(s.ok(), s.status().message());
    shrunk[static_cast<size_t>(c.rank())] = std::move(*s);
  });
  shrunk.pop_back();
  on_ranks(shrunk, [&](Communicator& c) { check_all_reduce(c); });
}

TEST_CASE("shrink's arguments: out of range, twice, itself, everyone; each names what is wrong") {
  Comms comms = make(2, TransportChoice::kInproc);
  Communicator& c = *comms[0];
  CHECK(contains(c.shrink({5}).status(), "excluded rank 5 is out of range for 2 ranks"));
  CHECK(contains(c.shrink({1, 1}).status(), "rank 1 is excluded twice"));
  CHECK(contains(c.shrink({0}).status(), "in its own exclude list"));
  CHECK_FALSE(c.aborted());
}

TEST_CASE("shrink in default mode with a call in flight is refused at once; abort mode ends the call first") {
  Comms comms = make(3, TransportChoice::kShm);
  std::atomic<int> refused{0};
  std::latch both_refused(2);  // neither revokes (abort mode) before the other's default-mode try
  Comms shrunk(3);
  on_ranks(comms, [&](Communicator& c) {
    if (c.rank() == 2) return;  // never joins: the all_reduce below waits for it
    std::vector<float> x(1000, 1.0f);
    Work pending = c.all_reduce_async(std::span(x), ReduceOp::kSum);  // in flight from here
    auto s = c.shrink({2});
    CHECK(s.status().code() == ErrorCode::kInvalidArgument);
    if (contains(s.status(), "still in flight")) ++refused;
    both_refused.arrive_and_wait();
    auto a = c.shrink({2}, ShrinkMode::kAbort);
    REQUIRE_MESSAGE(a.ok(), a.status().message());
    Status ended = pending.wait();
    CHECK(ended.code() == ErrorCode::kAborted);
    CHECK(contains(ended, "revoked the communicator"));
    shrunk[static_cast<size_t>(c.rank())] = std::move(*a);
  });
  CHECK(refused == 2);
  shrunk.pop_back();
  on_ranks(shrunk, [&](Communicator& c) { check_all_reduce(c); });
}

TEST_CASE("revoke ends a blocked call on every rank with a status that says so; later calls fail at once") {
  for (TransportChoice transport : kTransports) {
    CAPTURE(static_cast<int>(transport));
    Comms comms = make(3, transport);
    std::vector<Status> got(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        Communicator& c = *comms[static_cast<size_t>(r)];
        std::vector<float> x(100, 1.0f);
        // Ranks 0 and 1 wait for rank 2's all_reduce, which never comes; rank 2 revokes.
        if (r == 2) {
          std::this_thread::sleep_for(100ms);
          c.revoke();
          got[2] = c.all_reduce(std::span(x), ReduceOp::kSum);
          return;
        }
        got[static_cast<size_t>(r)] = c.all_reduce(std::span(x), ReduceOp::kSum);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(got[static_cast<size_t>(r)].code() == ErrorCode::kAborted);
      CHECK(contains(got[static_cast<size_t>(r)], "rank 2 revoked the communicator"));
      // A revoke loses no one: lost_ranks waits its full time and names nobody.
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(comms[static_cast<size_t>(r)]->lost_ranks(20ms).empty());
      CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);
    }
    // Nothing was destroyed: the survivors can still shrink (here, past nobody).
    Comms again(3);
    on_ranks(comms, [&](Communicator& c) {
      auto s = c.shrink({});
      REQUIRE_MESSAGE(s.ok(), s.status().message());
      again[static_cast<size_t>(c.rank())] = std::move(*s);
    });
    on_ranks(again, [&](Communicator& c) { check_all_reduce(c); });
  }
}

TEST_CASE("grow from 3 to 4 after rank 0 was dropped: old ranks keep theirs, the new one takes rank 3") {
  for (TransportChoice transport : {TransportChoice::kShm, TransportChoice::kTcp}) {
    CAPTURE(static_cast<int>(transport));
    Comms comms = make(4, transport);
    Comms three = shrink_past(comms, 0);
    comms.clear();                  // the old communicator, rank 0's included, is gone
    auto id = three[1]->grow_id();  // any rank may hand out the id
    REQUIRE_MESSAGE(id.ok(), id.status().message());
    CHECK(contains(three[1]->grow_id().status(), "not used yet"));
    Comms four(4);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back([&, r] {
        auto g = three[static_cast<size_t>(r)]->grow(4, r == 1 ? &*id : nullptr);
        REQUIRE_MESSAGE(g.ok(), g.status().message());
        CHECK((*g)->rank() == r);
        four[static_cast<size_t>(r)] = std::move(*g);
      });
    threads.emplace_back([&] {
      // A new rank below the old size is refused, naming the range.
      CHECK(contains(Communicator::join(1, 4, *id, test_config(transport)).status(), "takes a rank from 3 to 3"));
      auto j = Communicator::join(3, 4, *id, test_config(transport));
      REQUIRE_MESSAGE(j.ok(), j.status().message());
      four[3] = std::move(*j);
    });
    for (auto& t : threads) t.join();
    on_ranks(four, [&](Communicator& c) { check_all_reduce(c); });
  }
}

TEST_CASE("grow: exactly one rank passes the id; a second id before the first is used is refused") {
  Comms comms = make(2, TransportChoice::kInproc);
  std::vector<Status> got(2);
  on_ranks(comms, [&](Communicator& c) { got[static_cast<size_t>(c.rank())] = c.grow(3, nullptr).status(); });
  for (const Status& s : got) CHECK(contains(s, "0 ranks passed an id"));
  CHECK(contains(comms[0]->grow(2, nullptr).status(), "the new size 2 is not above 2"));
}

// The case: tried 50 times with 4 thread ranks over shared memory, a rank that aborted while
// the others connected to it left them waiting for its store key until the timeout.
TEST_CASE("an abort while the others set up their lazy links reaches them at once with its reason") {
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    Comms comms = make(4, TransportChoice::kShm);
    std::vector<Status> got(4);
    on_ranks(comms, [&](Communicator& c) {
      if (c.rank() == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(round));
        c.abort("stopping during set-up");
        return;
      }
      // Every pair: links beyond the ring's connect now, waiting on rank 3's store keys.
      std::vector<int32_t> mine(4, c.rank()), theirs(4, -1);
      got[static_cast<size_t>(c.rank())] = c.all_to_all(mine.data(), theirs.data(), 1, DataType::kInt32);
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      // A wait on the store until the deadline would end in a timeout without the reason.
      CHECK(contains(got[static_cast<size_t>(r)], "stopping during set-up"));
    }
  }
}
