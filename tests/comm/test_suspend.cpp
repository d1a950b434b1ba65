// suspend() and resume(): the memory mem_stats() calls suspendable is released on every rank
// and comes back on resume; calls in between fail clearly and abort nothing; the links the
// proxy moves (TCP) are kept and counted persistent. Threads as ranks over each transport.
#include <doctest/doctest.h>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {

// Every rank sends to and receives from every other: connects every link.
Status exchange_all(Communicator& c, std::vector<int32_t>& out) {
  std::vector<P2POp> ops;
  static thread_local std::vector<int32_t> mine;
  mine.assign(1, c.rank() + 1);
  out.assign(static_cast<size_t>(c.size()), 0);
  for (int p = 0; p < c.size(); ++p)
    if (p != c.rank()) {
      ops.push_back(P2POp::send(mine.data(), 1, DataType::kInt32, p));
      ops.push_back(P2POp::recv(&out[static_cast<size_t>(p)], 1, DataType::kInt32, p));
    }
  return c.p2p(std::move(ops));
}

void suspend_resume(TransportChoice transport) {
  const int n = 3;
  auto comms = Communicator::create_local(n, test_config(transport));
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    std::vector<int32_t> got;
    for (int round = 0; round < 2; ++round) {  // twice: the second suspension connects under a new epoch
      REQUIRE(exchange_all(c, got).ok());
      CHECK(got[static_cast<size_t>((c.rank() + 1) % n)] == (c.rank() + 1) % n + 1);
      const MemStats before = c.mem_stats();
      CHECK_FALSE(before.suspended);
      if (transport == TransportChoice::kTcp) CHECK(before.persistent > 0);
      else CHECK(before.suspendable > 0);

      REQUIRE(c.suspend().ok());
      const MemStats during = c.mem_stats();
      CHECK(during.suspended);
      CHECK(during.suspendable == 0);
      CHECK(during.persistent == before.persistent);
      std::vector<float> x(64, 1.0f);
      Status refused = c.all_reduce(std::span(x), ReduceOp::kSum);
      CHECK(refused.code() == ErrorCode::kUnsupported);
      CHECK(refused.message().find("suspended") != std::string::npos);
      CHECK(c.suspend().code() == ErrorCode::kUnsupported);  // twice is an error, not a hang

      REQUIRE(c.resume().ok());
      CHECK_FALSE(c.aborted());
      CHECK(c.resume().code() == ErrorCode::kUnsupported);
      CHECK(c.mem_stats().total() == before.total() - before.suspendable + c.mem_stats().suspendable);
      REQUIRE(c.all_reduce(std::span(x), ReduceOp::kSum).ok());
      CHECK(x[63] == static_cast<float>(n));
    }
  });
}

}  // namespace

TEST_CASE("suspend and resume between threads") { suspend_resume(TransportChoice::kInproc); }
TEST_CASE("suspend and resume over shared memory") { suspend_resume(TransportChoice::kShm); }
TEST_CASE("suspend and resume keeps TCP's proxied links") { suspend_resume(TransportChoice::kTcp); }
