// Asynchronous calls, several communicators at once, and split.
#include <doctest/doctest.h>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

TEST_CASE("async calls run in order and complete; test() turns true") {
  auto comms = Communicator::create_local(3, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    const int n = 6;
    std::vector<std::vector<int32_t>> bufs(n, std::vector<int32_t>(777));
    std::vector<Work> works;
    for (int k = 0; k < n; ++k) {
      std::fill(bufs[static_cast<size_t>(k)].begin(), bufs[static_cast<size_t>(k)].end(), (c.rank() + 1) * (k + 1));
      works.push_back(c.all_reduce_async(std::span(bufs[static_cast<size_t>(k)]), ReduceOp::kSum));
    }
    // A blocking call queues behind the asynchronous ones.
    std::vector<int32_t> one(5, 1);
    CHECK(c.all_reduce(std::span(one), ReduceOp::kSum).ok());
    CHECK(one[4] == 3);
    for (int k = 0; k < n; ++k) {
      CHECK(works[static_cast<size_t>(k)].wait().ok());
      CHECK(works[static_cast<size_t>(k)].test());
      CHECK(bufs[static_cast<size_t>(k)][776] == 6 * (k + 1));
    }
    std::vector<float> shard(10, static_cast<float>(c.rank())), full(30);
    Work w = c.all_gather_async(std::span(shard), std::span(full));
    CHECK(w.wait_for(std::chrono::seconds(30)).ok());
    CHECK(full[25] == 2.0f);
    CHECK(c.barrier_async().wait().ok());
  });
}

// Every asynchronous variant, queued together and waited at the end, each result exact: a
// broadcast from rank 1, a reduce to rank 2, a reduce_scatter, and a ring shift as one p2p batch.
TEST_CASE("broadcast_async, reduce_async, reduce_scatter_async and p2p_async queue in order and complete") {
  const int n = 3;
  auto comms = Communicator::create_local(n, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<int32_t> bc(1000, r == 1 ? 42 : -1), red_in(1000, r + 1), red_out(1000, -1), rs_in(3 * 500),
        rs_out(500, -1), mine(700, r), theirs(700, -1);
    for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<int32_t>(i) + r;
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::vector<Work> works;
    works.push_back(c.broadcast_async(bc.data(), bc.data(), bc.size(), DataType::kInt32, 1));
    works.push_back(c.reduce_async(red_in.data(), red_out.data(), red_in.size(), DataType::kInt32, ReduceOp::kSum, 2));
    works.push_back(
        c.reduce_scatter_async(rs_in.data(), rs_out.data(), rs_out.size(), DataType::kInt32, ReduceOp::kSum));
    works.push_back(c.p2p_async({P2POp::send(mine.data(), mine.size(), DataType::kInt32, right),
                                 P2POp::recv(theirs.data(), theirs.size(), DataType::kInt32, left)}));
    for (Work& w : works) CHECK(w.wait().ok());
    CHECK(bc[999] == 42);
    if (r == 2) CHECK(red_out[5] == 1 + 2 + 3);
    else CHECK(red_out[5] == -1);  // written on the root only
    // Rank r's block of the sum: element r*500 + i summed over ranks = 3(r*500 + i) + 0 + 1 + 2.
    CHECK(rs_out[7] == 3 * (r * 500 + 7) + 3);
    CHECK(theirs[699] == left);
  });
}

TEST_CASE("two communicators used at once by the same threads") {
  auto a = Communicator::create_local(4, test_config());
  auto b = Communicator::create_local(4, test_config());
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      Communicator& ca = *(*a)[static_cast<size_t>(r)];
      Communicator& cb = *(*b)[static_cast<size_t>(r)];
      for (int it = 0; it < 20; ++it) {
        std::vector<int64_t> x(300, r), y(50, 10 * r);
        Work wa = ca.all_reduce_async(std::span(x), ReduceOp::kMax);
        Status sb = cb.all_reduce(std::span(y), ReduceOp::kSum);
        wrong += !wa.wait().ok() || !sb.ok() || x[299] != 3 || y[49] != 60;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("split by (color, key) as MPI_Comm_split") {
  auto comms = Communicator::create_local(5, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    int color = c.rank() == 4 ? -1 : c.rank() % 2;  // rank 4 opts out
    auto sub = c.split(color, -c.rank());           // reverse order inside each color
    REQUIRE(sub.ok());
    // The parent still works after the split, with every rank in it.
    std::vector<int32_t> p(1, 1);
    CHECK(c.all_reduce(std::span(p), ReduceOp::kSum).ok());
    CHECK(p[0] == 5);
    if (color < 0) {
      CHECK(*sub == nullptr);
      return;
    }
    Communicator& s = **sub;
    CHECK(s.size() == 2);
    // colors {0: ranks 0, 2}, {1: ranks 1, 3}; key -rank puts the higher old rank first.
    CHECK(s.rank() == (c.rank() < 2 ? 1 : 0));
    std::vector<int32_t> v(3, c.rank());
    CHECK(s.all_reduce(std::span(v), ReduceOp::kSum).ok());
    CHECK(v[0] == (color == 0 ? 0 + 2 : 1 + 3));
  });
}

TEST_CASE("local rank and host grouping: threads share one host") {
  auto comms = Communicator::create_local(3, test_config());
  REQUIRE(comms.ok());
  for (auto& c : *comms) {
    CHECK(c->local_size() == 3);
    CHECK(c->local_rank() == c->rank());
    CHECK(c->same_host((c->rank() + 1) % 3));
    CHECK(std::string(c->transport_to((c->rank() + 1) % 3)) == "inproc");
    CHECK(std::string(c->transport_to(c->rank())) == "self");
    CHECK(std::string(c->transport_to(7)) == "none");
    CHECK(c->peer(-1).rank == -1);
    CHECK_FALSE(c->same_host(3));
    CHECK(c->peer(2).pid == static_cast<int>(getpid()));
  }
}
