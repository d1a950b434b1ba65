// The double binary tree (algo/tree_collectives.hpp) on threads as ranks, through the host
// executor (prims/peer_prims.hpp) and real FIFOs.
#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

// The double tree lets one tree run up to slots-1 slices ahead of the other at a rank
// (algo/tree_collectives.hpp): with the shallowest FIFOs allowed (3 slots) and the default (8),
// over buffers of many slices, on world sizes where ranks are interior in one tree, in both,
// or share a parent across the trees, every element is exact and nothing waits for ever.
TEST_CASE("double tree: trees running ahead of each other through FIFOs of 3 and 8 slots stay exact") {
  for (int slots : {3, 8}) {
    for (int size : {3, 4, 5, 6, 7, 9, 12, 16, 23}) {
      CAPTURE(slots);
      CAPTURE(size);
      Config config = test_config();
      config.slots = slots;
      auto forced = parse_algo("double_tree");
      REQUIRE(forced.ok());
      config.algo = *forced;
      auto comms = Communicator::create_local(size, config);
      REQUIRE(comms.ok());
      const size_t count = 40 * config.slot_bytes / 4 + 13;  // 40 slices and a bit per tree
      std::atomic<size_t> wrong{0};
      on_ranks(*comms, [&](Communicator& c) {
        std::vector<int32_t> in(count), out(count, -1);
        for (size_t i = 0; i < count; ++i)
          in[i] = static_cast<int32_t>((c.rank() + 1) * 7 + static_cast<int>(i % 1000));
        Status s = c.all_reduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
        CHECK_MESSAGE(s.ok(), s.message());
        const int n = c.size();
        for (size_t i = 0; i < count; ++i)
          wrong += out[i] != static_cast<int32_t>(7 * n * (n + 1) / 2 + n * static_cast<int>(i % 1000));
      });
      CHECK(wrong == 0);
    }
  }
}
