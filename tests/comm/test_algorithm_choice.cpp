#include <doctest/doctest.h>

#include <dcomm/algo/exchange.hpp>
#include <dcomm/algo/p2p.hpp>
#include <dcomm/comm/algorithm_choice.hpp>

using namespace dcomm;

TEST_CASE("algorithm choice: direct for small all_reduce, single copy where measured faster, ring otherwise") {
  Config
      c;  // defaults: direct <= 4 KiB, single copy from 16 KiB (all_gather/broadcast), from 1 MiB (all_reduce, reduce_scatter; below 24 MiB out of place unless registered)
  auto pick = [&](OpKind k, size_t bytes, int ranks, bool single_copy, size_t eb = 4, bool in_place = false) {
    return choose_algorithm({k, bytes / eb, eb, ranks, in_place}, c, single_copy).algorithm;
  };
  CHECK(pick(OpKind::kAllReduce, 8, 2, false) == Algorithm::kDirect);
  CHECK(pick(OpKind::kAllReduce, 4096, 2, false) ==
        Algorithm::kDirect);  // measured on 2 ranks; the model weighs it on more
  CHECK(pick(OpKind::kAllReduce, 8192, 2, false) == Algorithm::kRing);
  CHECK(pick(OpKind::kAllReduce, 8, 9, false) == Algorithm::kRecursiveDoubling);  // direct stops at 8 ranks
  CHECK(pick(OpKind::kAllReduce, 8, 1, false) == Algorithm::kRing);
  CHECK(pick(OpKind::kAllReduce, 4 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllReduce, 4 << 20, 2, false) == Algorithm::kRing);
  // from DCOMM_CMA_OUT_OF_PLACE_BYTES: single copy only if every output is from mem_alloc
  CHECK(pick(OpKind::kAllReduce, c.cma_out_of_place_bytes - 64, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllReduce, c.cma_out_of_place_bytes, 2, true) == Algorithm::kSingleCopyIfRegistered);
  // reduce_scatter's size is its input: twice its output on 2 ranks
  CHECK(pick(OpKind::kReduceScatter, c.cma_out_of_place_bytes / 2 - 64, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduceScatter, c.cma_out_of_place_bytes / 2, 2, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kAllReduce, 64 << 20, 2, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kAllReduce, 64 << 20, 2, true, 4, true) == Algorithm::kSingleCopy);  // unless in place
  CHECK(pick(OpKind::kAllGather, 1 << 20, 4, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllGather, 1 << 10, 4, true) != Algorithm::kSingleCopy);  // below DCOMM_CMA_BYTES
  CHECK(pick(OpKind::kBroadcast, 1 << 20, 2, true) == Algorithm::kSingleCopy);
  // all_gather's reads are its blocks (pick's count is all_gather's block): from DCOMM_CMA_BYTES
  // a block (2 x it on 2 ranks); with more ranks than cores, all_gather and broadcast take single
  // copy from 2 x load x DCOMM_CMA_BYTES of the whole.
  CHECK(pick(OpKind::kAllGather, c.cma_bytes - 64, 2, true) != Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllGather, c.cma_bytes, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kBroadcast, c.cma_bytes, 2, true) == Algorithm::kSingleCopy);
  auto pick_loaded = [&](OpKind k, size_t bytes, double load) {
    const size_t per_rank = k == OpKind::kAllGather ? 8 : 1;  // all_gather's size is its whole output
    return choose_algorithm({k, bytes / 4 / per_rank, 4, 8, false}, c, true, LinkModel::for_load(load)).algorithm;
  };
  for (OpKind k : {OpKind::kAllGather, OpKind::kBroadcast}) {
    const size_t unloaded = k == OpKind::kAllGather ? 8 * c.cma_bytes : c.cma_bytes;  // 8 blocks
    CHECK(pick_loaded(k, unloaded, 1) == Algorithm::kSingleCopy);
    CHECK(pick_loaded(k, unloaded - 64, 1) != Algorithm::kSingleCopy);
    for (int load : {2, 4}) {
      CHECK(pick_loaded(k, c.cma_bytes, load) != Algorithm::kSingleCopy);
      CHECK(pick_loaded(k, 2 * load * c.cma_bytes - 64, load) != Algorithm::kSingleCopy);
      CHECK(pick_loaded(k, 2 * load * c.cma_bytes, load) == Algorithm::kSingleCopy);
    }
  }
  CHECK(pick(OpKind::kReduceScatter, 1 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduceScatter, 64 << 20, 2, true) == Algorithm::kSingleCopyIfRegistered);
  c.cma_out_of_place_bytes = 16 << 20;  // the threshold moves with its variable
  CHECK(pick(OpKind::kAllReduce, 32 << 20, 2, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kAllReduce, 8 << 20, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduceScatter, 256 << 10, 2, true) == Algorithm::kRing);  // 512 KiB input
  // reduce has a single-copy threshold of its own (DCOMM_CMA_REDUCE_ROOT_BYTES), and counts as
  // out of place (its ranks may not see in place alike): from DCOMM_CMA_OUT_OF_PLACE_BYTES only
  // if registered
  c.cma_reduce_bytes = 64 << 10;  // neither all_reduce's nor reduce_scatter's moves it
  c.cma_reduce_scatter_bytes = 32 << 10;
  c.cma_reduce_root_bytes = 256 << 10;
  CHECK(pick(OpKind::kReduce, c.cma_reduce_root_bytes - 64, 2, true) == Algorithm::kRing);
  CHECK(pick(OpKind::kReduce, c.cma_reduce_root_bytes, 2, true) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kReduce, c.cma_out_of_place_bytes, 2, true, 4, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kReduce, c.cma_reduce_root_bytes, 2, false) == Algorithm::kRing);
  CHECK(pick(OpKind::kReduceScatter, c.cma_reduce_scatter_bytes, 2, true) == Algorithm::kSingleCopy);
  c.cma_bytes = 0;  // 0 turns single copy off
  CHECK(pick(OpKind::kAllGather, 1 << 20, 4, true) != Algorithm::kSingleCopy);
}

// Out of place, reductions go through the kernel below DCOMM_CMA_OUT_OF_PLACE_BYTES x 2 / ranks
// (the ranks' buffers together in the last-level cache), and up to kMaxTunedLoad ranks a core.
TEST_CASE("out-of-place single copy through the kernel: up to 2 ranks a core, below the cap scaled by the ranks") {
  Config c;
  c.cma_reduce_bytes = c.cma_reduce_root_bytes = 256 << 10;
  auto pick = [&](OpKind k, size_t bytes, int ranks, double load, bool in_place = false) {
    const size_t count = bytes / 4 / (k == OpKind::kReduceScatter ? static_cast<size_t>(ranks) : 1);
    return choose_algorithm({k, count, 4, ranks, in_place}, c, true, LinkModel::for_load(load)).algorithm;
  };
  CHECK(out_of_place_through_kernel(c, 2) == c.cma_out_of_place_bytes);
  CHECK(out_of_place_through_kernel(c, 4) == c.cma_out_of_place_bytes / 2);
  const size_t cap4 = out_of_place_through_kernel(c, 4);
  for (OpKind k : {OpKind::kAllReduce, OpKind::kReduce}) {
    CAPTURE(to_string(k));
    CHECK(pick(k, 256 << 10, 4, 2) == Algorithm::kSingleCopy);  // 4 ranks on 2 cores
    CHECK(pick(k, (256 << 10) - 64, 4, 2) != Algorithm::kSingleCopy);
    CHECK(pick(k, cap4 - 64, 4, 2) == Algorithm::kSingleCopy);
    CHECK(pick(k, cap4, 4, 2) == Algorithm::kSingleCopyIfRegistered);
    CHECK(pick(k, cap4 - 64, 4, 1) == Algorithm::kSingleCopy);  // 4 ranks on 4 cores: the same cap
  }
  // Over 2 ranks a core all_reduce learns from the descriptors whether to map or stage; a
  // reduce takes the chain at once.
  CHECK(pick(OpKind::kAllReduce, 1 << 20, 8, 4) == Algorithm::kSingleCopyIfRegistered);  // 8 ranks on 2 cores
  CHECK(pick(OpKind::kAllReduce, 1 << 20, 6, 3) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kReduce, 1 << 20, 8, 4) == Algorithm::kRing);
  CHECK(pick(OpKind::kReduce, 1 << 20, 6, 3) == Algorithm::kRing);
  CHECK(pick(OpKind::kReduce, (256 << 10) - 64, 8, 4) != Algorithm::kRing);  // below the threshold: the cost model's
  CHECK(pick(OpKind::kAllReduce, 1 << 20, 8, 4, true) == Algorithm::kSingleCopy);  // in place it stays ahead
}

// The host tuning's run of sizes where single copy is ahead (comm/tuning.hpp's SizeWalk): through
// the kernel in [from, until), in place and out of place; from `until` only with every buffer
// from mem_alloc, which single copy reaches without the kernel.
TEST_CASE("single copy through the kernel up to where the host tuning found it behind again, in and out of place") {
  Config c;
  c.cma_reduce_bytes = 64 << 10, c.cma_reduce_until_bytes = 256 << 10;
  c.cma_reduce_scatter_bytes = 32 << 10, c.cma_reduce_scatter_until_bytes = 1 << 20;
  c.cma_reduce_root_bytes = 16 << 10, c.cma_reduce_root_until_bytes = 512 << 10;
  auto pick = [&](OpKind k, size_t bytes, bool in_place) {
    const size_t count = bytes / 4 / (k == OpKind::kReduceScatter ? 2 : 1);
    return choose_algorithm({k, count, 4, 2, in_place}, c, true).algorithm;
  };
  const struct {
    OpKind kind;
    size_t from, until;
  } runs[] = {{OpKind::kAllReduce, 64 << 10, 256 << 10},
              {OpKind::kReduceScatter, 32 << 10, 1 << 20},
              {OpKind::kReduce, 16 << 10, 512 << 10}};
  for (const auto& r : runs)
    for (bool in_place : {false, true}) {
      CAPTURE(to_string(r.kind));
      CAPTURE(in_place);
      CHECK(pick(r.kind, r.from - 64, in_place) != Algorithm::kSingleCopy);
      CHECK(pick(r.kind, r.from - 64, in_place) != Algorithm::kSingleCopyIfRegistered);
      CHECK(pick(r.kind, r.from, in_place) == Algorithm::kSingleCopy);
      CHECK(pick(r.kind, r.until - 64, in_place) == Algorithm::kSingleCopy);
      CHECK(pick(r.kind, r.until, in_place) == Algorithm::kSingleCopyIfRegistered);
      CHECK(pick(r.kind, 64 << 20, in_place) == Algorithm::kSingleCopyIfRegistered);
    }
  // Behind through the last size timed: from = until, no size through the kernel.
  c.cma_reduce_until_bytes = c.cma_reduce_bytes;
  CHECK(pick(OpKind::kAllReduce, c.cma_reduce_bytes, true) == Algorithm::kSingleCopyIfRegistered);
  CHECK(pick(OpKind::kAllReduce, c.cma_reduce_bytes - 64, true) == Algorithm::kRing);
  // The defaults: no bound but DCOMM_CMA_OUT_OF_PLACE_BYTES out of place.
  const Config d;
  CHECK(d.cma_reduce_until_bytes == kNoUpperBound);
  CHECK(choose_algorithm({OpKind::kAllReduce, size_t{256} << 20, 4, 2, true}, d, true).algorithm ==
        Algorithm::kSingleCopy);
}

// all_gather's and broadcast's runs of single copy (comm/tuning.hpp's walks), where measured; else
// DCOMM_CMA_BYTES's rule.
TEST_CASE("all_gather and broadcast: single copy in the run the host tuning found, else by DCOMM_CMA_BYTES") {
  Config c;
  auto pick = [&](OpKind k, size_t bytes, double load = 1) {
    const size_t count = bytes / 4 / (k == OpKind::kAllGather ? 2 : 1);  // bytes: all_gather's output
    return choose_algorithm({k, count, 4, 2, false}, c, true, LinkModel::for_load(load)).algorithm;
  };
  // Not measured: from DCOMM_CMA_BYTES a block (all_gather), or of the whole (broadcast).
  CHECK(c.cma_all_gather_bytes == kNotMeasured);
  CHECK(c.cma_broadcast_bytes == kNotMeasured);
  CHECK(pick(OpKind::kAllGather, 2 * c.cma_bytes) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kAllGather, 2 * c.cma_bytes - 64) != Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kBroadcast, c.cma_bytes) == Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kBroadcast, c.cma_bytes - 64) != Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kBroadcast, size_t{256} << 20) == Algorithm::kSingleCopy);
  // Measured: in [from, until) only, whatever the load, up to the largest size the walk timed.
  c.cma_all_gather_bytes = 64 << 10, c.cma_all_gather_until_bytes = 256 << 10;
  c.cma_broadcast_bytes = 2 << 20, c.cma_broadcast_until_bytes = kNoUpperBound;
  for (double load : {1.0, 2.0}) {
    CAPTURE(load);
    CHECK(pick(OpKind::kAllGather, (64 << 10) - 64, load) != Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kAllGather, 64 << 10, load) == Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kAllGather, (256 << 10) - 64, load) == Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kAllGather, 256 << 10, load) != Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kAllGather, 2 << 20, load) != Algorithm::kSingleCopy);         // the last size timed
    CHECK(pick(OpKind::kAllGather, (2 << 20) + 64, load) == Algorithm::kSingleCopy);  // above: the rule
    CHECK(pick(OpKind::kAllGather, size_t{64} << 20, load) == Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kBroadcast, (2 << 20) - 64, load) != Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kBroadcast, 2 << 20, load) == Algorithm::kSingleCopy);
    CHECK(pick(OpKind::kBroadcast, size_t{256} << 20, load) == Algorithm::kSingleCopy);
  }
  c.cma_broadcast_bytes = 0;  // never (the tuning's walk times the FIFO algorithms so)
  CHECK(pick(OpKind::kBroadcast, 1 << 20) != Algorithm::kSingleCopy);
  CHECK(pick(OpKind::kBroadcast, 4 << 20) == Algorithm::kSingleCopy);  // above the walk: the rule
}

// all_reduce's run of recursive doubling (comm/tuning.hpp's walk), where measured; else the cost
// model's choice, which rates it far behind the ring in cache.
TEST_CASE("all_reduce: recursive doubling in the run the host tuning found, up to its walk's last size") {
  Config c;
  c.direct_bytes = 0;  // the run alone
  auto pick = [&](size_t bytes, int ranks = 4, double load = 2, int hosts = 1) {
    return choose_algorithm({OpKind::kAllReduce, bytes / 4, 4, ranks, false, hosts}, c, true,
                            LinkModel::for_load(load));
  };
  // Not measured: the cost model, which keeps it off in cache (3.5x the ring's predicted time at
  // 32 KiB on 4 ranks at 2 a core).
  REQUIRE(c.recursive_doubling_bytes == kNotMeasured);
  for (size_t bytes : {size_t{16} << 10, size_t{64} << 10, size_t{512} << 10})
    CHECK(pick(bytes).algorithm != Algorithm::kRecursiveDoubling);
  // Measured: in [from, until) only, at every load and rank count up to the walk's last size.
  c.recursive_doubling_bytes = 32 << 10, c.recursive_doubling_until_bytes = 128 << 10;
  for (auto [ranks, load] : {std::pair{4, 2.0}, std::pair{2, 1.0}, std::pair{3, 1.5}, std::pair{8, 1.0}}) {
    CAPTURE(ranks);
    CHECK(pick((32 << 10) - 64, ranks, load).algorithm != Algorithm::kRecursiveDoubling);
    const Choice in = pick(32 << 10, ranks, load);
    CHECK(in.algorithm == Algorithm::kRecursiveDoubling);
    CHECK(std::string(in.reason) == "measured");
    CHECK(pick((128 << 10) - 64, ranks, load).algorithm == Algorithm::kRecursiveDoubling);
    CHECK(pick(128 << 10, ranks, load).algorithm != Algorithm::kRecursiveDoubling);
  }
  // Behind where timed: never up to the walk's last size, even where the model would take it
  // (one host whose steps cost much, little bytes: 8 ranks at 8 a core, 64 bytes).
  c.recursive_doubling_bytes = 0;
  const Choice small = pick(64, 8, 8);
  CHECK(small.algorithm != Algorithm::kRecursiveDoubling);
  c.recursive_doubling_bytes = kNotMeasured;
  CHECK(pick(64, 8, 8).algorithm == Algorithm::kRecursiveDoubling);  // the model's own choice there
  // Above the walk's last size, and over several hosts (never timed): the cost model's choice.
  c.recursive_doubling_bytes = 16 << 10, c.recursive_doubling_until_bytes = kNoUpperBound;
  Config model;
  model.direct_bytes = 0;
  auto model_pick = [&](size_t bytes, int hosts) {
    return choose_algorithm({OpKind::kAllReduce, bytes / 4, 4, 4, false, hosts}, model, true, LinkModel::for_load(2))
        .algorithm;
  };
  CHECK(pick(kFifoWalkLast).algorithm == Algorithm::kRecursiveDoubling);
  CHECK(model_pick(kFifoWalkLast, 1) != Algorithm::kRecursiveDoubling);
  CHECK(pick(kFifoWalkLast + 64).algorithm == model_pick(kFifoWalkLast + 64, 1));
  CHECK(pick(64 << 10, 4, 2, 2).algorithm == model_pick(64 << 10, 2));
  // Other collectives never take it from this run.
  CHECK(choose_algorithm({OpKind::kReduceScatter, 16 << 10, 4, 4, false}, c, true).algorithm !=
        Algorithm::kRecursiveDoubling);
}

TEST_CASE("direct reduce_scatter and all_gather: one exchange of blocks up to DCOMM_DIRECT_BYTES in all, 3-8 ranks") {
  Config c;
  // bytes: the whole buffer (all_gather's output, reduce_scatter's input), as nccl-tests' size
  auto pick = [&](OpKind k, size_t bytes, int ranks, double load = 1) {
    return choose_algorithm({k, bytes / 4 / static_cast<size_t>(ranks), 4, ranks, false}, c, false,
                            LinkModel::for_load(load))
        .algorithm;
  };
  for (OpKind k : {OpKind::kAllGather, OpKind::kReduceScatter}) {
    CAPTURE(to_string(k));
    for (int ranks : {3, 4, 8}) {
      CAPTURE(ranks);
      const size_t row = 4 * static_cast<size_t>(ranks);  // one float per rank
      const size_t largest = c.direct_bytes / row * row;  // the most whole rows within the threshold
      for (double load : {1.0, 4.0}) {
        CHECK(pick(k, row, ranks, load) == Algorithm::kDirect);
        CHECK(pick(k, largest, ranks, load) == Algorithm::kDirect);
        CHECK(pick(k, largest + row, ranks, load) != Algorithm::kDirect);
      }
    }
    CHECK(pick(k, 64, 2) == Algorithm::kRing);        // on two ranks the ring is the same one exchange
    CHECK(pick(k, 16 * 9, 9) != Algorithm::kDirect);  // direct stops at 8 ranks
    c.direct_bytes = 0;                               // 0 turns it off
    CHECK(pick(k, 64, 4) != Algorithm::kDirect);
    c.direct_bytes = Config{}.direct_bytes;
  }
  c.algo = *parse_algo("direct");  // forced: a call too large for one slot per block is not direct
  CHECK(pick(OpKind::kAllGather, 8192, 4) == Algorithm::kDirect);
  CHECK(pick(OpKind::kAllGather, 1 << 20, 4) != Algorithm::kDirect);
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

TEST_CASE("streaming stores from where the host's buffers of a call reach 4 x DCOMM_STREAM_BYTES") {
  Config c;
  const size_t s = c.stream_bytes, f = 4;  // float32 counts
  // 2 ranks' all_reduce: its output of DCOMM_STREAM_BYTES itself, not one element less.
  CHECK(stream_output({OpKind::kAllReduce, s / f, f, 2, false}, c));
  CHECK_FALSE(stream_output({OpKind::kAllReduce, s / f - 1, f, 2, false}, c));
  // 8 ranks on the host: a quarter of it; 8 on each of 2 hosts, the same; one on each of 8: twice it.
  CHECK(stream_output({OpKind::kAllReduce, s / 4 / f, f, 8, false}, c));
  CHECK_FALSE(stream_output({OpKind::kAllReduce, s / 4 / f - 1, f, 8, false}, c));
  CHECK(stream_output({OpKind::kAllReduce, s / 4 / f, f, 16, false, 2}, c));
  CHECK_FALSE(stream_output({OpKind::kAllReduce, s / 4 / f, f, 8, false, 8}, c));
  CHECK_FALSE(stream_output({OpKind::kAllReduce, 2 * s / f - 1, f, 8, false, 8}, c));
  CHECK(stream_output({OpKind::kAllReduce, 2 * s / f, f, 8, false, 8}, c));
  // all_gather counts its input block and output: 2 ranks, 1.5 x the output on each.
  CHECK_FALSE(stream_output({OpKind::kAllGather, s / 2 / f, f, 2, false}, c));  // output s: 3s of buffers
  CHECK(stream_output({OpKind::kAllGather, s / f, f, 2, false}, c));            // output 2s: 6s
  // reduce_scatter: the input (ranks x the output) and the output; 4 ranks, input s: 5s.
  CHECK(stream_output({OpKind::kReduceScatter, s / 4 / f, f, 4, false}, c));
  CHECK_FALSE(stream_output({OpKind::kReduceScatter, s / 8 / f, f, 4, false}, c));
  // broadcast's receivers write their buffers only, in place too.
  CHECK(buffers_leave_cache({OpKind::kBroadcast, s / 2 / f, f, 8, true}, c));
  CHECK_FALSE(buffers_leave_cache({OpKind::kBroadcast, s / 2 / f - 1, f, 8, true}, c));
  CHECK(host_buffer_bytes({OpKind::kAllReduce, 1000, f, 4, true}) == 4 * 4000);  // in place: one buffer
}

TEST_CASE("DCOMM_ALGO: names per collective, bare names where they apply, errors that name the entry") {
  auto all = parse_algo("tree");
  REQUIRE(all.ok());
  CHECK((*all)[0] == "tree");  // all_reduce
  CHECK((*all)[1].empty());    // reduce_scatter has no tree
  CHECK((*all)[3] == "tree");  // broadcast
  CHECK((*all)[4] == "tree");  // reduce
  auto some = parse_algo("all_reduce:rabenseifner;reduce_scatter:halving_doubling,broadcast:ring");
  REQUIRE(some.ok());
  CHECK((*some)[0] == "rabenseifner");
  CHECK((*some)[1] == "halving_doubling");
  CHECK((*some)[2].empty());
  CHECK((*some)[3] == "ring");
  auto bad = parse_algo("reduce_scatter:tree");
  CHECK(bad.status().code() == ErrorCode::kInvalidArgument);
  CHECK(bad.status().message().find("'tree' is not an algorithm of reduce_scatter") != std::string::npos);
  CHECK(parse_algo("nonsense").status().message().find("'nonsense' names no collective") != std::string::npos);
  CHECK(parse_algo("").ok());

  Config c;
  c.algo = *some;
  auto pick = [&](OpKind k, size_t bytes, int ranks, bool single_copy = false) {
    return choose_algorithm({k, bytes / 4, 4, ranks, false}, c, single_copy);
  };
  CHECK(pick(OpKind::kAllReduce, 8, 4).algorithm == Algorithm::kRabenseifner);  // forced beats direct
  CHECK(std::string(pick(OpKind::kAllReduce, 8, 4).reason) == "forced");
  CHECK(pick(OpKind::kReduceScatter, 1 << 20, 3, true).algorithm == Algorithm::kHalvingDoubling);  // beats single copy
  c.algo[0] = "direct";  // cannot run 1 MiB: the automatic choice instead
  CHECK(pick(OpKind::kAllReduce, 1 << 20, 4).algorithm != Algorithm::kDirect);
  c.algo[0] = "single_copy";  // not possible without cross-memory attach
  CHECK(pick(OpKind::kAllReduce, 1 << 20, 4, false).algorithm != Algorithm::kSingleCopy);
}

TEST_CASE("cost model: latency algorithms for small messages on many ranks, bandwidth ones for large") {
  Config c;
  c.direct_bytes = 0;
  auto pick = [&](OpKind k, size_t bytes, int ranks) {
    return choose_algorithm({k, bytes / 4, 4, ranks, false}, c, false).algorithm;
  };
  CHECK(pick(OpKind::kAllReduce, 8, 8) == Algorithm::kRecursiveDoubling);
  CHECK(pick(OpKind::kAllReduce, 8, 16) == Algorithm::kRecursiveDoubling);
  CHECK(pick(OpKind::kAllReduce, 256 << 20, 8) != Algorithm::kRecursiveDoubling);  // log p x the bytes
  CHECK(pick(OpKind::kAllGather, 64, 8) == Algorithm::kHalvingDoubling);
  CHECK(pick(OpKind::kBroadcast, 64, 16) == Algorithm::kTree);
  CHECK(pick(OpKind::kBroadcast, 256 << 20, 4) == Algorithm::kRing);  // the chain moves each byte once per rank
  // Tree latency grows as log n, the ring's as n.
  LinkModel m;
  auto at = [&](Algorithm a, int n) { return predict_us(a, {OpKind::kAllReduce, 1, 4, n, false}, m); };
  CHECK(at(Algorithm::kRing, 1024) / at(Algorithm::kRing, 32) > 30);
  CHECK(at(Algorithm::kTree, 1024) / at(Algorithm::kTree, 32) < 2.1);
  CHECK(at(Algorithm::kRecursiveDoubling, 1024) / at(Algorithm::kRecursiveDoubling, 32) < 2.1);
}

TEST_CASE("cost model across hosts: hierarchical when hosts hold several ranks each") {
  Config c;
  LinkModel m;
  auto pick = [&](size_t bytes, int ranks, int hosts) {
    return choose_algorithm({OpKind::kAllReduce, bytes / 4, 4, ranks, false, hosts}, c, false, m).algorithm;
  };
  // 8 ranks per host. dcomm-sim agrees: at 64 KiB hierarchical 341 us, the ring 395; at 1 MiB the
  // ring 2,084, hierarchical 3,110 (the ring crosses the network on 8 of its 64 links).
  CHECK(pick(64 << 10, 64, 8) == Algorithm::kHierarchical);
  CHECK(pick(1 << 20, 64, 8) == Algorithm::kRing);
  CHECK(pick(8, 64, 8) == Algorithm::kRecursiveDoubling);  // latency: log2(64) network steps
  CHECK(pick(1 << 30, 64, 8) == Algorithm::kRing);         // bandwidth: one network crossing per host
  CHECK(pick(1 << 20, 16, 2) == Algorithm::kHierarchical);
  CHECK(pick(64 << 20, 8, 8) != Algorithm::kHierarchical);  // one rank per host: nothing to gain
  CHECK(pick(64 << 20, 8, 1) != Algorithm::kHierarchical);  // one host
  // One host's ranks across the network cost more than the same ranks on one host.
  CallShape one{OpKind::kAllReduce, 1 << 20, 4, 16, false, 1}, two = one;
  two.hosts = 2;
  CHECK(predict_us(Algorithm::kRing, two, m) > predict_us(Algorithm::kRing, one, m));
}

TEST_CASE("choice cache: a shape seen before is not weighed again; another shape, or a cleared cache, is") {
  ChoiceCache cache;
  int weighed = 0;
  auto get = [&](CallShape s, Algorithm a) {
    return cache
        .get(s,
             [&] {
               ++weighed;
               return ChosenShape{Choice{a, "test"}, Duel()};
             })
        .choice;
  };
  const CallShape ar{OpKind::kAllReduce, 2, 4, 2, false};
  CHECK(get(ar, Algorithm::kDirect).algorithm == Algorithm::kDirect);
  CHECK(get(ar, Algorithm::kRing).algorithm == Algorithm::kDirect);  // cached: not weighed again
  CHECK(weighed == 1);
  // Each field of the shape tells shapes apart.
  for (CallShape other :
       {CallShape{OpKind::kBroadcast, 2, 4, 2, false}, CallShape{OpKind::kAllReduce, 3, 4, 2, false},
        CallShape{OpKind::kAllReduce, 2, 8, 2, false}, CallShape{OpKind::kAllReduce, 2, 4, 3, false},
        CallShape{OpKind::kAllReduce, 2, 4, 2, true}, CallShape{OpKind::kAllReduce, 2, 4, 2, false, 2}})
    CHECK(get(other, Algorithm::kRing).algorithm == Algorithm::kRing);
  CHECK(weighed == 7);
  // Shapes that share a slot replace each other, and each is weighed again when it returns.
  for (size_t count = 0; count < 1000; ++count)
    CHECK(get({OpKind::kAllGather, count, 4, 2, false}, count % 2 ? Algorithm::kRing : Algorithm::kSingleCopy)
              .algorithm == (count % 2 ? Algorithm::kRing : Algorithm::kSingleCopy));
  cache.clear();
  weighed = 0;
  CHECK(get(ar, Algorithm::kTree).algorithm == Algorithm::kTree);
  CHECK(weighed == 1);
  // A loop that alternates shapes differing in one field only keeps both cached: each field
  // reaches the slot, not just the comparison.
  for (CallShape other :
       {CallShape{OpKind::kAllReduce, 2, 4, 2, true}, CallShape{OpKind::kAllReduce, 2, 2, 2, false},
        CallShape{OpKind::kAllReduce, 2, 4, 4, false}, CallShape{OpKind::kAllReduce, 2, 4, 2, false, 2}}) {
    cache.clear();
    weighed = 0;
    for (int i = 0; i < 4; ++i) {
      get(ar, Algorithm::kTree);
      get(other, Algorithm::kRing);
    }
    CHECK(weighed == 2);
  }
}

// One list (core/algorithms.hpp) says which algorithm runs which collective: what DCOMM_ALGO
// may force and what the cost model weighs all come from it, and the measured choices too.
TEST_CASE("algorithms for collectives: forcing, the cost model and the measured choices read one list") {
  const OpKind kinds[] = {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kBroadcast,
                          OpKind::kReduce};
  Config c;
  for (int k = 0; k < 5; ++k) {
    CAPTURE(k);
    for (Algorithm a : kForcibleAlgorithms) CHECK(algo_valid_for(to_string(a), k) == runs(a, kinds[k]));
    for (int ranks : {2, 8, 64})
      for (size_t count : {size_t{2}, size_t{1} << 20}) {
        const CallShape shape{kinds[k], count, 4, ranks, false, ranks / 2};
        for (Algorithm a : candidates(shape, c, true)) CHECK(runs(a, kinds[k]));
        for (bool single_copy : {false, true}) CHECK(runs(choose_algorithm(shape, c, single_copy).algorithm, kinds[k]));
      }
  }
  CHECK(runs(Algorithm::kTree, OpKind::kBroadcast));
  CHECK(runs(Algorithm::kSingleCopy, OpKind::kReduce));
  CHECK_FALSE(runs(Algorithm::kHalvingDoubling, OpKind::kAllReduce));
  CHECK_FALSE(algo_valid_for("ordered", 0));  // internal: DCOMM_DETERMINISTIC chooses it
  CHECK(runs(Algorithm::kOrdered, OpKind::kReduce));
}

TEST_CASE(
    "an all-to-all's messages pull from DCOMM_CMA_BYTES with more ranks than cores; others from the scaled value") {
  Config c;
  c.cma_bytes = 16384;
  LinkModel link;
  link.load = 4;  // 4 ranks a core: the host tuning does not time this shape
  const size_t cma = c.cma_bytes, scaled = oversubscribed_threshold(cma, link.load);
  REQUIRE(scaled > cma);
  const PullRule rule = pull_rule(c, 4, link);
  std::vector<float> send(4 * scaled), recv(4 * scaled);
  // Sizes either side of each threshold: an all-to-all's blocks of `elems` floats.
  for (size_t bytes : {cma - 4, cma, scaled - 4, scaled}) {
    const size_t elems = bytes / sizeof(float);
    auto a2a = equal_exchange_ops(Exchange::kAllToAll, 1, 4, 0, send.data(), recv.data(), elems, DataType::kFloat32);
    REQUIRE(a2a.ok());
    REQUIRE(a2a->size() == 8);  // a send and a receive per rank, its own block a pair too
    for (const P2POp& op : *a2a) {
      CAPTURE(op.peer);
      CAPTURE(bytes);
      CHECK(op.all_to_all == (op.peer != 1));  // its own block is a local copy
      CHECK(rule.pulls(op) == (bytes >= (op.peer != 1 ? cma : scaled)));
      CHECK_FALSE(PullRule{}.pulls(op));  // no single copy on this host
    }
    auto gather = equal_exchange_ops(Exchange::kGather, 0, 4, 0, send.data(), recv.data(), elems, DataType::kFloat32);
    REQUIRE(gather.ok());
    for (const P2POp& op : *gather) CHECK(rule.pulls(op) == (bytes >= scaled));
    CHECK(rule.pulls(P2POp::send(send.data(), elems, DataType::kFloat32, 2)) == (bytes >= scaled));
  }
  c.cma_bytes = 0;  // DCOMM_CMA_BYTES=0: none
  for (bool all_to_all : {false, true}) {
    P2POp op = P2POp::send(send.data(), scaled, DataType::kFloat32, 2);
    op.all_to_all = all_to_all;
    CHECK_FALSE(pull_rule(c, 4, link).pulls(op));
  }
}

TEST_CASE("a message pulls where all_gather's walk timed single copy ahead for blocks of its size") {
  std::vector<char> buf(kCopyWalkLast);
  const auto pulls = [&](const PullRule& rule, size_t bytes, bool all_to_all) {
    P2POp op = P2POp::send(buf.data(), bytes, DataType::kUint8, 1);
    op.all_to_all = all_to_all;
    return rule.pulls(op);
  };
  Config c;
  c.cma_bytes = 16384;
  const LinkModel link;
  for (bool all_to_all : {false, true}) {
    CAPTURE(all_to_all);
    // 2 ranks, a run with no end from 512 KiB: blocks from 256 KiB, and DCOMM_CMA_BYTES's rule
    // above 1 MiB (an all_gather of 2 MiB, the walk's last).
    c.cma_all_gather_bytes = 512u << 10, c.cma_all_gather_until_bytes = kNoUpperBound;
    PullRule two = pull_rule(c, 2, link);
    CHECK_FALSE(pulls(two, c.cma_bytes, all_to_all));  // the rule's size, but in the walk's sizes
    CHECK_FALSE(pulls(two, (256u << 10) - 1, all_to_all));
    CHECK(pulls(two, 256u << 10, all_to_all));
    CHECK(pulls(two, 1u << 20, all_to_all));
    CHECK(pulls(two, (1u << 20) + 1, all_to_all));
    // 3 ranks, a run [96 KiB, 1 MiB): blocks [32 KiB, 349,526 bytes) (3 x that is 1,048,578),
    // then none up to 699,050 bytes (3 x 699,051 is over 2 MiB), then the rule.
    c.cma_all_gather_bytes = 96u << 10, c.cma_all_gather_until_bytes = 1u << 20;
    PullRule three = pull_rule(c, 3, link);
    CHECK_FALSE(pulls(three, (32u << 10) - 1, all_to_all));
    CHECK(pulls(three, 32u << 10, all_to_all));
    CHECK(pulls(three, 349525, all_to_all));
    CHECK_FALSE(pulls(three, 349526, all_to_all));
    CHECK_FALSE(pulls(three, 699050, all_to_all));
    CHECK(pulls(three, 699051, all_to_all));
    // None up to 2 MiB (a run starting and ending at the walk's last).
    c.cma_all_gather_bytes = c.cma_all_gather_until_bytes = kCopyWalkLast;
    PullRule none = pull_rule(c, 4, link);
    CHECK_FALSE(pulls(none, 512u << 10, all_to_all));
    CHECK(pulls(none, (512u << 10) + 1, all_to_all));
    // Not measured: the rule.
    c.cma_all_gather_bytes = kNotMeasured, c.cma_all_gather_until_bytes = kNoUpperBound;
    CHECK_FALSE(pulls(pull_rule(c, 2, link), c.cma_bytes - 1, all_to_all));
    CHECK(pulls(pull_rule(c, 2, link), c.cma_bytes, all_to_all));
  }
}

TEST_CASE("duel: a trial after the gap, the last calls of each side timed, the gap doubled by a loss, reset by a win") {
  CHECK_FALSE(Duel().active());
  CHECK(Duel().next(Algorithm::kRing) == Algorithm::kRing);
  Duel idle;
  for (int i = 0; i < 2 * Duel::kLastGap; ++i) {  // no rival: never a trial, no call timed
    CHECK_FALSE(idle.timed());
    CHECK_FALSE(idle.record(1.0));
  }
  Algorithm chosen = Algorithm::kRing;
  Duel d(Algorithm::kSingleCopy);
  REQUIRE(d.active());
  // One trial after `gap` calls of the choice: call i takes i + 1 us but for a preempted one
  // (1e6 us) among each side's timed calls, so the fastest say which calls were timed: the
  // choice's last kTimed, and the rival's but its first, whose time (1 us) would be the fastest.
  auto trial = [&](int gap) {
    REQUIRE(d.gap() == gap);
    for (int i = 0; i < gap; ++i) {
      CHECK(d.next(chosen) == chosen);
      CHECK(d.timed() == (i >= gap - Duel::kTimed));  // only those read the clock
      CHECK_FALSE(d.record(i == gap - 2 ? 1e6 : i + 1));
    }
    for (int i = 0; i <= Duel::kTimed; ++i) {
      CHECK(d.next(chosen) == d.rival());
      CHECK(d.timed() == (i > 0));
      CHECK(d.record(i == 0 ? 1 : i == 1 ? 1e6 : gap + i + 1) == (i == Duel::kTimed));  // ends at its last call
    }
    CHECK(d.fastest()[0] == gap - Duel::kTimed + 1);  // call gap - kTimed (0-based), the first timed
    CHECK(d.fastest()[1] == gap + 3);                 // the rival's third call
  };
  trial(Duel::kFirstGap);
  CHECK_FALSE(d.decide({100, 95}, chosen));  // 0.95 of the time: within kMargin, no switch
  CHECK(chosen == Algorithm::kRing);
  trial(2 * Duel::kFirstGap);
  CHECK_FALSE(d.decide({100, 100 * Duel::kMargin}, chosen));  // exactly at the margin: not under it
  for (int gap = 4 * Duel::kFirstGap; gap < Duel::kLastGap; gap *= 2) {
    trial(gap);
    CHECK_FALSE(d.decide({100, 300}, chosen));
  }
  trial(Duel::kLastGap);
  CHECK_FALSE(d.decide({100, 300}, chosen));
  trial(Duel::kLastGap);               // no further than kLastGap
  CHECK(d.decide({100, 89}, chosen));  // under 0.9: the two trade places, the gap starts again
  CHECK(chosen == Algorithm::kSingleCopy);
  CHECK(d.rival() == Algorithm::kRing);
  trial(Duel::kFirstGap);
  CHECK(d.decide({50, 20}, chosen));  // and back
  CHECK(chosen == Algorithm::kRing);
  CHECK(d.gap() == Duel::kFirstGap);
}

TEST_CASE("duel rival: single copy against the FIFO algorithm it would run without, where the walks time them") {
  Config c;
  c.cma_bytes = 16384;
  const LinkModel link;
  const size_t big = 1 << 20;
  const CallShape gather{OpKind::kAllGather, big / 4 / 2, 4, 2, false};
  const Algorithm fifo = choose_algorithm(gather, c, /*single_copy=*/false, link).algorithm;
  REQUIRE(fifo != Algorithm::kSingleCopy);
  CHECK(duel_rival(gather, c, true, link, Algorithm::kSingleCopy) == fifo);
  for (OpKind kind : {OpKind::kAllGather, OpKind::kBroadcast, OpKind::kAllReduce, OpKind::kReduceScatter}) {
    CAPTURE(to_string(kind));
    const bool per_rank = kind == OpKind::kAllGather || kind == OpKind::kReduceScatter;
    const size_t count = kDuelFirst / 4 / (per_rank ? 2 : 1);  // bytes() is kDuelFirst
    const CallShape at{kind, count, 4, 2, false}, below{kind, count - 1, 4, 2, false};
    REQUIRE(at.bytes() == kDuelFirst);
    CHECK(duel_rival(at, c, true, link, Algorithm::kRing) == Algorithm::kSingleCopy);
    CHECK_FALSE(duel_rival(below, c, true, link, Algorithm::kRing));  // under the walks' first size
    CHECK_FALSE(duel_rival(at, c, false, link, Algorithm::kRing));    // no single copy on this host
    // deferred to the buffers: against what runs without single copy
    CHECK(duel_rival(at, c, true, link, Algorithm::kSingleCopyIfRegistered) ==
          choose_algorithm(at, c, /*single_copy=*/false, link).algorithm);
    CallShape two_hosts = at;
    two_hosts.hosts = 2;
    CHECK_FALSE(duel_rival(two_hosts, c, true, link, Algorithm::kRing));
    Config off = c;
    off.duel = false;  // DCOMM_DUEL=0
    CHECK_FALSE(duel_rival(at, off, true, link, Algorithm::kRing));
    Config forced = c;
    forced.algo[static_cast<size_t>(algo_index(kind))] = "ring";  // DCOMM_ALGO names it
    CHECK_FALSE(duel_rival(at, forced, true, link, Algorithm::kRing));
    Config ordered = c;
    ordered.deterministic = true;
    CHECK(duel_rival(at, ordered, true, link, Algorithm::kRing).has_value() == !has_reduction(kind));
  }
  CHECK_FALSE(duel_rival({OpKind::kReduce, big, 4, 2, false}, c, true, link, Algorithm::kRing));  // not walked
}
