// One-sided windows between threads as ranks: put lands in the peer's window and its signal
// follows it; signals count per (peer, index, context) and a wait consumes them; bad arguments
// are named; a wait for a signal that never comes ends at the deadline naming the peer.
#include <doctest/doctest.h>

#include <dcomm/comm/one_sided.hpp>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

// Over shared memory in this process (direct) and over TCP (the wire: the target's thread
// receives into its window).
TEST_CASE("one-sided: a ring of puts with signals, each rank waiting for its left neighbour") {
  const int n = 3;
  for (TransportChoice t : {TransportChoice::kAuto, TransportChoice::kTcp}) {
    CAPTURE(static_cast<int>(t));
    auto comms = Communicator::create_local(n, test_config(t));
    REQUIRE(comms.ok());
    on_ranks(*comms, [&](Communicator& c) {
      auto o = OneSided::create(c, 2);
      REQUIRE(o.ok());
      const int right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;

      std::vector<int32_t> window(1000, -1), mine(100);
      auto id = (*o)->register_window(window.data(), window.size() * sizeof(int32_t));
      REQUIRE(id.ok());
      CHECK(((*o)->peer_address(right, *id) == nullptr) == (t == TransportChoice::kTcp));
      for (int round = 0; round < 5; ++round) {
        for (int i = 0; i < 100; ++i) mine[static_cast<size_t>(i)] = c.rank() * 1000 + round * 100 + i;
        // Into the right neighbour's window at element 100 * round, then signal index 3, context 1.
        REQUIRE((*o)->put(mine.data(), 400, right, *id, static_cast<size_t>(round) * 400, 3, 1).ok());
        Status waited = (*o)->wait({{1, left, 3, 1}});
        INFO(waited.message());
        REQUIRE(waited.ok());
        CHECK(window[static_cast<size_t>(round) * 100 + 7] == left * 1000 + round * 100 + 7);
        CHECK(window[static_cast<size_t>(round) * 100 + 99] == left * 1000 + round * 100 + 99);
      }
      CHECK((*o)->received(left, 3, 1) == 5);
      CHECK((*o)->received(left, 3, 0) == 0);
      // Signals without data count alike; one wait may consume several.
      for (int k = 0; k < 4; ++k) REQUIRE((*o)->signal(right, 63, 0).ok());
      REQUIRE((*o)->wait({{4, left, 63, 0}, {0, right, 0, 0}}).ok());
      c.barrier().ignore();  // every put of this test has landed before the windows go
    });
  }
}

// Over TCP the target applies what comes: a put into a window it deregistered fails its next
// wait, naming the sender and the window, and the signal that came with it is not counted.
TEST_CASE("one-sided over TCP: a put the target cannot apply fails the target's wait, naming both") {
  auto comms = Communicator::create_local(2, test_config(TransportChoice::kTcp));
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    auto o = OneSided::create(c);
    REQUIRE(o.ok());
    std::vector<char> window(1 << 20, 0), src(1 << 20, 7);
    auto id = (*o)->register_window(window.data(), window.size());
    REQUIRE(id.ok());
    if (c.rank() == 1) (*o)->deregister_window(*id);
    c.barrier().ignore();
    if (c.rank() == 0) {
      REQUIRE((*o)->put(src.data(), src.size(), 1, *id, 0, 2, 0).ok());  // the sender cannot tell
      REQUIRE((*o)->put(src.data(), 16, 1, *id, 0, 2, 0).ok());
    } else {
      Status s = (*o)->wait({{1, 0, 2, 0}});
      CHECK(s.code() == ErrorCode::kInvalidArgument);
      CHECK(s.message().find("window 0 is not registered here") != std::string::npos);
      CHECK(s.message().find("from rank 0") != std::string::npos);
      CHECK((*o)->received(0, 2, 0) == 0);
      CHECK(window[0] == 0);
    }
    c.barrier().ignore();
  });
}

TEST_CASE("one-sided: bad arguments are named and a missing signal times out naming the peer") {
  auto comms = Communicator::create_local(2, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    auto o = OneSided::create(c);
    REQUIRE(o.ok());
    std::vector<char> window(64);
    auto id = (*o)->register_window(window.data(), window.size());
    REQUIRE(id.ok());
    const int peer = 1 - c.rank();
    char byte = 1;
    Status past = (*o)->put(&byte, 1, peer, *id, 64, -1, 0);
    CHECK(past.code() == ErrorCode::kInvalidArgument);
    CHECK(past.message().find("past rank") != std::string::npos);
    CHECK((*o)->put(&byte, 1, 2, *id, 0, -1, 0).code() == ErrorCode::kInvalidArgument);
    CHECK((*o)->put(&byte, 1, peer, 7, 0, -1, 0).code() == ErrorCode::kInvalidArgument);
    CHECK((*o)->signal(peer, 64, 0).code() == ErrorCode::kInvalidArgument);
    CHECK((*o)->signal(peer, 0, 1).code() == ErrorCode::kInvalidArgument);  // one context only
    c.set_timeout(std::chrono::milliseconds(300));
    Status late = (*o)->wait({{1, peer, 5, 0}});
    c.set_timeout(std::chrono::seconds(20));
    CHECK(late.code() == ErrorCode::kTimeout);
    CHECK(late.message().find(detail::cat("rank ", peer)) != std::string::npos);
    c.barrier().ignore();
  });
}
