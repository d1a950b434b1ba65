// Bad input gets a clear error on the caller's rank; failures once data moves abort the
// communicator on every rank with a message that names the rank at fault; nothing hangs.
#include <doctest/doctest.h>

#include <atomic>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;
using namespace std::chrono_literals;

namespace {
bool contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }
}  // namespace

TEST_CASE("invalid arguments fail on the caller's rank, name the argument, and abort nothing") {
  auto comms = Communicator::create_local(2, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    std::vector<float> buf(8);
    Status s = c.all_reduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::kSum);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK(contains(s, "all_reduce on rank " + std::to_string(c.rank())));
    CHECK(contains(s, "send buffer is null"));
    s = c.all_gather(buf.data(), nullptr, 4, DataType::kFloat32);
    CHECK(contains(s, "receive buffer is null"));
    s = c.all_reduce(buf.data(), buf.data(), 8, static_cast<DataType>(99), ReduceOp::kSum);
    CHECK(contains(s, "unknown data type 99"));
    s = c.gather(buf.data(), buf.data(), 4, static_cast<DataType>(99), 0);
    CHECK((s.code() == ErrorCode::kInvalidArgument && contains(s, "gather: unknown data type 99")));
    s = c.all_to_all(buf.data(), buf.data(), 4, static_cast<DataType>(98));
    CHECK(contains(s, "all_to_all: unknown data type 98"));
    s = c.reduce_scatter(buf.data(), buf.data(), 4, DataType::kFloat32, static_cast<ReduceOp>(42));
    CHECK(contains(s, "unknown reduction op 42"));
    s = c.broadcast(buf.data(), buf.data(), 8, DataType::kFloat32, 2);
    CHECK(contains(s, "root 2 is out of range for 2 ranks"));
    s = c.reduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::kSum, -1);
    CHECK(contains(s, "root -1"));
    s = c.send(buf.data(), 8, DataType::kFloat32, 7);
    CHECK(contains(s, "peer 7 is out of range"));
    CHECK(c.recv(nullptr, 3, DataType::kFloat32, 0).code() == ErrorCode::kInvalidArgument);
    // A null buffer is fine when there is nothing to move.
    CHECK(c.all_reduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum).ok());
    // The communicator still works.
    std::fill(buf.begin(), buf.end(), 1.0f);
    CHECK(c.all_reduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::kSum).ok());
    CHECK(buf[7] == 2.0f);
    CHECK_FALSE(c.aborted());
  });
}

TEST_CASE("a rank that never calls: the waiting rank times out naming it; the comm is aborted everywhere") {
  auto comms = Communicator::create_local(2, test_config(TransportChoice::kAuto, 300ms));
  REQUIRE(comms.ok());
  Communicator& r0 = *(*comms)[0];
  Communicator& r1 = *(*comms)[1];
  std::vector<float> buf(64, 1.0f);
  Status s = r0.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK(s.code() == ErrorCode::kTimeout);
  CHECK(contains(s, "all_reduce on rank 0"));
  CHECK(contains(s, "rank 1"));
  CHECK(contains(s, "DCOMM_TIMEOUT_MS"));
  // Rank 1 learns of it at once, with rank 0 named.
  Status later = r1.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  CHECK_FALSE(later.ok());
  CHECK(contains(later, "aborted"));
  CHECK(contains(later, "rank 0"));
  CHECK(r0.aborted());
  CHECK(r1.aborted());
}

TEST_CASE("abort() on one rank fails the pending calls of the others with its reason") {
  auto comms = Communicator::create_local(4, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    if (c.rank() == 3) {
      std::this_thread::sleep_for(50ms);
      c.abort("operator pressed stop");
      return;
    }
    std::vector<int64_t> buf(1024, 1);
    Status s = c.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kInt64, ReduceOp::kSum);
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "rank 3"));
    CHECK(contains(s, "operator pressed stop"));
  });
}

TEST_CASE("init: rank out of range, empty world, duplicate rank, missing rank, unreachable rendezvous") {
  auto id = UniqueId::create();
  REQUIRE(id.ok());
  auto bad_rank = Communicator::init(5, 4, *id, test_config());
  REQUIRE_FALSE(bad_rank.ok());
  CHECK(contains(bad_rank.status(), "rank 5 is out of range for 4 ranks"));
  CHECK_FALSE(Communicator::create_local(0).ok());

  SUBCASE("two processes claim rank 0 of 2 and nobody claims rank 1") {
    auto dup = UniqueId::create();
    REQUIRE(dup.ok());
    Status a, b;
    std::thread t([&] { a = Communicator::init(0, 2, *dup, test_config(TransportChoice::kAuto, 3000ms)).status(); });
    b = Communicator::init(0, 2, *dup, test_config(TransportChoice::kAuto, 3000ms)).status();
    t.join();
    CHECK_FALSE(a.ok());
    CHECK_FALSE(b.ok());
    // One is told it duplicated a rank, the other that rank 0 was claimed twice.
    CHECK((contains(a, "claimed") && contains(b, "claimed")));
  }
  SUBCASE("a rendezvous that never completes") {
    auto lonely = UniqueId::create();
    REQUIRE(lonely.ok());
    auto c = Communicator::init(0, 2, *lonely, test_config(TransportChoice::kAuto, 300ms));
    REQUIRE_FALSE(c.ok());
    CHECK(c.status().code() == ErrorCode::kTimeout);
    CHECK(contains(c.status(), "1 of 2 ranks"));
  }
  SUBCASE("a rendezvous address nobody serves") {
    UniqueId nowhere = *UniqueId::parse("dcomm2:0000000000000001:" + std::string(64, '0') + "@127.0.0.1:1");
    auto c = Communicator::init(0, 2, nowhere, test_config(TransportChoice::kAuto, 300ms));
    REQUIRE_FALSE(c.ok());
    CHECK(contains(c.status(), "127.0.0.1:1"));
    CHECK(contains(c.status(), "init of rank 0 of 2"));
  }
}

TEST_CASE("staging memory is bounded by DCOMM_MAX_STAGING_BYTES, with an error that names it") {
  Config c = test_config();
  c.max_staging_bytes = local_fifo_bytes(c) * 2;  // ring neighbours only
  c.algo[0] = "ring";                             // all_reduce on the ring (the latency algorithms talk to every peer)
  auto comms = Communicator::create_local(4, c);
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& comm) {
    CHECK(comm.staging_bytes() == 2 * local_fifo_bytes(c));
    // The ring runs within the bound...
    std::vector<int32_t> v(100, 1);
    CHECK(comm.all_reduce(std::span(v), ReduceOp::kSum).ok());
    // ...a message to the rank across the ring needs a third link, which the bound refuses.
    int across = (comm.rank() + 2) % 4;
    Status s = comm.send_recv(v.data(), 1, across, v.data() + 1, 1, across, DataType::kInt32);
    CHECK(s.code() == ErrorCode::kOutOfResources);
    CHECK(contains(s, "DCOMM_MAX_STAGING_BYTES"));
  });
}
