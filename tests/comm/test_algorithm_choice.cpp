#include <doctest/doctest.h>

#include <dcomm/comm/algorithm_choice.hpp>

using namespace dcomm;

TEST_CASE("algorithm choice: direct for small all_reduce, single copy where measured faster, ring otherwise") {
  Config c;  // defaults: direct <= 4 KiB, single copy from 64 KiB (all_gather/broadcast), from 1 MiB (all_reduce, reduce_scatter; below 16 MiB out of place unless registered)
  auto pick = [&](OpKind k, size_t bytes, int ranks, bool single_copy, size_t eb = 4, bool in_place = false) {
    return choose_algorithm({k, bytes / eb, eb, ranks, in_place}, c, single_copy);
  };
  CHECK(pick(OpKind::kAllReduce, 8, 2, false) == Algorithm::kDirect);
  CHECK(pick(OpKind::kAllReduce, 4096, 8, false) == Algorithm::kDirect);
  CHECK(pick(OpKind::kAllReduce, 8192, 2, false) == Algorithm::kRing);
  CHECK(pick(OpKind::kAllReduce, 8, 9, false) == Algorithm::kRing);  // all-peer algorithms stop at 8 ranks
  CHECK(pick(OpKind::kAllReduce, 8, 1, false) == Algorithm::kRing);
  CHECK(pick(OpKind::kAllReduce, 4 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllReduce, 4 << 20, 2, false) == Algorithm::kRing);
  // past the streaming threshold: single copy only if every output is from mem_alloc
  CHECK(pick(OpKind::kAllReduce, 64 << 20, 2, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kAllReduce, 64 << 20, 2, true, 4, true) == Algorithm::kSingleCopy);  // unless in place
  CHECK(pick(OpKind::kAllGather, 1 << 20, 4, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllGather, 1 << 10, 4, true) == Algorithm::kRing);
  CHECK(pick(OpKind::kBroadcast, 1 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduceScatter, 1 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduceScatter, 64 << 20, 2, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kReduceScatter, 256 << 10, 2, true) == Algorithm::kRing);  // 512 KiB input
  CHECK(pick(OpKind::kReduce, 1 << 20, 2, true) == Algorithm::kRing);
  c.cma_bytes = 0;  // 0 turns single copy off
  CHECK(pick(OpKind::kAllGather, 1 << 20, 4, true) == Algorithm::kRing);
}

TEST_CASE("call shape: nccl-tests' size column and streaming of large out-of-place outputs") {
  Config c;
  CallShape ag{OpKind::kAllGather, 1000, 4, 4, false};
  CHECK(ag.bytes() == 16000);
  CHECK(ag.output_bytes() == 16000);
  CallShape rs{OpKind::kReduceScatter, 1000, 4, 4, false};
  CHECK(rs.bytes() == 16000);
  CHECK(rs.output_bytes() == 4000);
  CHECK(stream_output({OpKind::kAllReduce, (32u << 20) / 4, 4, 2, false}, c));
  CHECK_FALSE(stream_output({OpKind::kAllReduce, (32u << 20) / 4, 4, 2, true}, c));  // in place: keep in cache
  CHECK_FALSE(stream_output({OpKind::kAllReduce, 1024, 4, 2, false}, c));
}
