// The host tuning (comm/host_tuning.hpp): what it derives from a measurement, its cache (read
// back on the same host; one written for another host, or unreadable, ignored and why said),
// every rank taking rank 0's values, DCOMM_CMA_BYTES and a program's own value winning, and the
// collectives exact either side of the threshold it chose; the thresholds of a shape
// (comm/tuning.hpp): their walks up the sizes, measured at a set-up, cached by shape, and exact
// either side.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <utility>
#include <vector>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {
std::string temp_path(const char* name) { return detail::cat("/tmp/dcomm-test-host-tuning-", getpid(), "-", name); }

// The shape tests' configuration: the default FIFO slots, as a shape is measured with them.
Config shape_config() {
  Config config;
  config.timeout = std::chrono::seconds(20);
  return config;
}

// The 2-threads line of the cache at `path`, as it is now.
ShapeTuning cached_line(const std::string& path) {
  std::string why;
  auto cached = read_host_tuning(path, host_signature(), &why);
  REQUIRE_MESSAGE(cached, why);
  REQUIRE(cached->for_shape("2-threads"));
  return *cached->for_shape("2-threads");
}

// A cache at `path` for this host with `line` its only shape, and nothing of it in this
// process's memory: the next set-up reads it.
void write_line(const std::string& path, const ShapeTuning& line) {
  auto host = measure_host();
  REQUIRE_MESSAGE(host.ok(), host.status().message());
  REQUIRE(write_host_tuning(path, host_signature(), {host->cma_us, host->copy_gbs, {line}}).ok());
  detail::host_tuning_memo().known.reset();
}
}  // namespace

TEST_CASE("host tuning: single copy pays from the syscall's cost times the copy bandwidth, 4 KiB to 1 MiB") {
  CHECK(cma_bytes_for({0.37, 52, {}}) == 16384);  // 19 KB: the nearest power of two
  CHECK(cma_bytes_for({1.0, 40, {}}) == 32768);   // 40 KB
  CHECK(cma_bytes_for({0.05, 10, {}}) == 4096);   // the floor
  CHECK(cma_bytes_for({50, 100, {}}) == size_t{1} << 20);
  auto m = measure_host();
  REQUIRE_MESSAGE(m.ok(), m.status().message());
  CHECK(m->cma_us > 0);
  CHECK(m->copy_gbs > 0);
}

TEST_CASE(
    "host tuning cache: read back on this host; another host's, an unreadable one and none are refused, saying why") {
  const std::string path = temp_path("cache"), sig = host_signature();
  std::remove(path.c_str());
  std::string why;
  CHECK_FALSE(read_host_tuning(path, sig, &why));
  CHECK(why.find("no cache") != std::string::npos);
  REQUIRE(write_host_tuning(path, sig, {0.5, 20, {}}).ok());
  auto back = read_host_tuning(path, sig, &why);
  REQUIRE(back);
  CHECK(back->cma_us == doctest::Approx(0.5));
  CHECK(back->copy_gbs == doctest::Approx(20));
  CHECK_FALSE(read_host_tuning(path, sig + " (elsewhere)", &why));
  CHECK(why.find("another host or kernel") != std::string::npos);
  std::ofstream(path) << "dcomm-host-tuning\nhost " << sig << "\ncma_us lots\n";
  CHECK_FALSE(read_host_tuning(path, sig, &why));
  CHECK(why.find("unreadable") != std::string::npos);
  ShapeTuning two{"2-processes"}, four{"4-threads"};
  two.all_reduce = 32768, two.reduce_scatter = 2097152, two.direct = 8192, two.reduce = 131072;
  two.all_gather = 16384, two.broadcast = 2097152, two.all_reduce_until = 262144, two.reduce_scatter_until = 2097152;
  two.reduce_until = kNoUpperBound, two.all_gather_until = 131072, two.broadcast_until = kNoUpperBound, two.tries = 2;
  two.recursive_doubling = 32768, two.recursive_doubling_until = 131072, two.pace_ns = 16250;
  four.all_reduce = 65536, four.reduce_scatter = 1048576, four.direct = 2048, four.reduce = 65536;
  four.all_reduce_next = 524288, four.reduce_next = 16384, four.all_gather_next = 65536, four.tries = 1;
  four.recursive_doubling = 16384, four.recursive_doubling_next = 262144;
  REQUIRE(write_host_tuning(path, sig, {0.5, 20, {two, four}}).ok());
  back = read_host_tuning(path, sig, &why);
  REQUIRE(back);
  REQUIRE(back->for_shape("2-processes"));
  CHECK(back->for_shape("2-processes")->all_reduce == 32768);
  CHECK(back->for_shape("2-processes")->reduce_scatter == 2097152);
  CHECK(back->for_shape("4-threads")->all_reduce == 65536);
  CHECK(back->for_shape("2-processes")->direct == 8192);
  CHECK(back->for_shape("2-processes")->reduce == 131072);
  CHECK(back->for_shape("2-processes")->all_reduce_until == 262144);
  CHECK(back->for_shape("2-processes")->reduce_scatter_until == 2097152);
  CHECK(back->for_shape("2-processes")->reduce_until == kNoUpperBound);
  CHECK(back->for_shape("4-threads")->all_reduce_until == 0);      // not known
  CHECK(back->for_shape("4-threads")->all_reduce_next == 524288);  // where a later set-up goes on
  CHECK(back->for_shape("4-threads")->reduce_scatter_next == 0);
  CHECK(back->for_shape("4-threads")->reduce_next == 16384);
  CHECK(back->for_shape("2-processes")->all_gather == 16384);
  CHECK(back->for_shape("2-processes")->all_gather_until == 131072);
  CHECK(back->for_shape("2-processes")->broadcast == 2097152);
  CHECK(back->for_shape("2-processes")->broadcast_until == kNoUpperBound);
  CHECK(back->for_shape("4-threads")->all_gather == 0);
  CHECK(back->for_shape("4-threads")->all_gather_next == 65536);
  CHECK(back->for_shape("4-threads")->broadcast_next == 0);
  CHECK(back->for_shape("2-processes")->recursive_doubling == 32768);
  CHECK(back->for_shape("2-processes")->recursive_doubling_until == 131072);
  CHECK(back->for_shape("2-processes")->recursive_doubling_next == 0);
  CHECK(back->for_shape("4-threads")->recursive_doubling == 16384);
  CHECK(back->for_shape("4-threads")->recursive_doubling_until == 0);
  CHECK(back->for_shape("4-threads")->recursive_doubling_next == 262144);
  CHECK(back->for_shape("2-processes")->pace_ns == 16250);
  CHECK(back->for_shape("4-threads")->pace_ns == 0);
  CHECK(back->for_shape("4-threads")->tries == 1);
  CHECK(back->for_shape("2-processes")->tries == 2);
  CHECK_FALSE(back->for_shape("3-threads"));
  std::ofstream(path, std::ios::app) << "shape 8-threads lots 1 1\n";
  CHECK_FALSE(read_host_tuning(path, sig, &why));
  CHECK(why.find("unreadable") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("host tuning: every rank takes rank 0's value; DCOMM_CMA_BYTES and a program's own value win") {
  setenv("DCOMM_HOST_TUNING_CACHE", temp_path("ranks").c_str(), 1);
  const size_t tuned = host_tuning().cma_bytes;
  auto comms = Communicator::create_local(3, test_config());
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  for (auto& c : *comms) CHECK(c->config().cma_bytes == tuned);
  // Either side of the threshold it chose, all_gather and broadcast are exact.
  for (size_t bytes : {tuned - 64, tuned, tuned + 64}) {
    CAPTURE(bytes);
    on_ranks(*comms, [&](Communicator& c) {
      const size_t per = bytes / 3 / 4;
      std::vector<float> mine(per, static_cast<float>(c.rank() + 1)), all(3 * per, 0.0f);
      REQUIRE(c.all_gather(mine.data(), all.data(), per, DataType::kFloat32).ok());
      for (int r = 0; r < 3; ++r) CHECK(all[static_cast<size_t>(r) * per + per - 1] == static_cast<float>(r + 1));
      std::vector<float> b(bytes / 4, static_cast<float>(c.rank()));
      REQUIRE(c.broadcast(b.data(), b.data(), b.size(), DataType::kFloat32, 2).ok());
      CHECK(b.back() == 2.0f);
    });
  }
  setenv("DCOMM_CMA_BYTES", "8K", 1);
  auto with_env = Communicator::create_local(2);
  unsetenv("DCOMM_CMA_BYTES");
  REQUIRE_MESSAGE(with_env.ok(), with_env.status().message());
  for (auto& c : *with_env) CHECK(c->config().cma_bytes == 8192);
  Config own = test_config();
  own.cma_bytes = 1024;
  auto with_own = Communicator::create_local(2, own);
  REQUIRE_MESSAGE(with_own.ok(), with_own.status().message());
  for (auto& c : *with_own) CHECK(c->config().cma_bytes == 1024);
  std::remove(temp_path("ranks").c_str());
  unsetenv("DCOMM_HOST_TUNING_CACHE");
}

TEST_CASE(
    "shape walks: single copy in the run of sizes that starts with two ahead in a row and ends with two behind "
    "(none by 2 MiB: none at all); direct up to the last size of its run ahead") {
  struct Found {
    size_t from, until;
  };
  auto walk = [](size_t k, std::initializer_list<bool> ahead) {
    auto walks = detail::shape_walks(Config{}.slot_bytes);
    for (bool a : ahead) {
      REQUIRE(walks[k].next != 0);
      walks[k].record(a);
    }
    CHECK(walks[k].next == 0);  // done
    return Found{walks[k].found, walks[k].until};
  };
  auto is = [](Found f, size_t from, size_t until) {
    CHECK(f.from == from);
    CHECK(f.until == until);
  };
  const size_t K = 1024, M = K * K;
  // 16 KiB to 2 MiB: 8 sizes
  is(walk(0, {true, true, true, true, true, true, true, true}), 16 * K, kNoUpperBound);
  is(walk(0, {false, true, true, true, false, true, false, false}), 32 * K, M);  // one behind alone is not enough
  is(walk(0, {false, false, true, true, false, false}), 64 * K, 256 * K);        // the AMD EPYC of the notes
  is(walk(1, {false, true, false, true, true, true, true, false}), 128 * K, kNoUpperBound);  // behind once, at 2 MiB
  is(walk(0, {false, false, false, false, false, false, false, false}), 2 * M, 2 * M);       // never ahead: none
  is(walk(1, {false, false, false, false, false, false, false, true}), 2 * M, kNoUpperBound);
  is(walk(3, {false, false, false, false, false, false, true, true}), M, kNoUpperBound);
  CHECK(walk(2, {true, true, true}).from == 16384);   // 4, 8, 16 KiB: the most a direct exchange takes
  CHECK(walk(2, {true, false, false}).from == 4096);  // behind twice at 8 KiB
  CHECK(walk(2, {false, false}).from == 2048);
  CHECK(walk(2, {false, true, true, true}).from == 16384);  // behind once at 4 KiB, ahead when timed again
  CHECK(walk(2, {true, false, true, false, false}).from == 8192);
  // Recursive doubling's, 16 KiB to 512 KiB: before its run starts, where a size ahead meets one
  // behind, the one behind is timed once more; the first size behind after the run starts ends it.
  const size_t rd = detail::kDoublingWalk;
  is(walk(rd, {false, true, false, true, false}), 32 * K, 128 * K);         // 16 KiB again: behind
  is(walk(rd, {false, true, false, false, true, false}), 32 * K, 128 * K);  // 64 KiB again: ahead
  is(walk(rd, {false, false, true, true, false}), 32 * K, 128 * K);         // 32 KiB again: ahead
  is(walk(rd, {true, true, false}), 16 * K, 64 * K);
  is(walk(rd, {true, true, true, false}), 16 * K, 128 * K);  // behind once ends it (single copy's goes on)
  is(walk(rd, {false, false, false, false, false, false}), 512 * K, 512 * K);               // never ahead: none
  is(walk(rd, {false, false, false, false, true, false, false, false}), 512 * K, 512 * K);  // ahead once: none
  is(walk(rd, {false, false, false, false, false, true, false}), 512 * K, kNoUpperBound);   // ahead at the last
  is(walk(0, {false, true, false, true, false, false, false, false}), 2 * M, 2 * M);        // single copy's: none
  auto again = detail::shape_walks(Config{}.slot_bytes)[rd];
  again.record(false);
  again.record(true);
  CHECK(again.next == 16 * K);  // timed once more
  again.end_early();
  CHECK(again.cut == 16 * K);  // a later set-up goes on there
  auto walks = detail::shape_walks(Config{}.slot_bytes);
  walks[0].record(false);
  CHECK(walks[0].next == 32768);
  CHECK(walks[1].next == 16384);                     // each walks on its own
  CHECK(detail::shape_walks(8192)[2].last == 8192);  // direct takes at most a slot
  // The order: the direct exchange's walk, recursive doubling's, then single copy's one after
  // another, each to its end.
  auto order = detail::shape_walks(Config{}.slot_bytes);
  CHECK(detail::next_walk(order) == 2);
  order[2].record(false);  // behind at 4 KiB: timed again
  CHECK(detail::next_walk(order) == 2);
  CHECK(order[2].next == 4096);
  order[2].record(false);                                    // behind again: done
  CHECK(detail::next_walk(order) == detail::kDoublingWalk);  // recursive doubling's, to 512 KiB
  CHECK(order[detail::kDoublingWalk].next == 16384);
  CHECK(order[detail::kDoublingWalk].last == kFifoWalkLast);
  order[detail::kDoublingWalk].next = 0;
  CHECK(detail::next_walk(order) == 0);
  order[0].record(true);
  CHECK(detail::next_walk(order) == 0);  // all_reduce's walk goes on
  order[0].next = 0;
  CHECK(detail::next_walk(order) == 1);
  order[1].next = 0;
  CHECK(detail::next_walk(order) == 3);
  order[3].next = 0;
  CHECK(detail::next_walk(order) == 4);  // all_gather's
  order[4].next = 0;
  CHECK(detail::next_walk(order) == 5);  // broadcast's
  order[5].next = 0;
  CHECK(detail::next_walk(order) == detail::kShapeWalks);
  // A set-up's budget ends the walks: each keeps where it got, and a later set-up goes on there
  // through the cache line's fields.
  auto cut = detail::shape_walks(Config{}.slot_bytes);
  for (bool a : {false, false, true, true, false}) cut[0].record(a);  // a run from 64 KiB; behind at 256 KiB
  for (bool a : {false, true}) cut[1].record(a);                      // ahead at 32 KiB
  cut[3].record(false);
  cut[2].record(true);  // direct ahead at 4 KiB
  for (detail::SizeWalk& w : cut) w.end_early();
  for (const detail::SizeWalk& w : cut) CHECK(w.next == 0);
  CHECK(cut[0].found == 64 * K);
  CHECK(cut[0].until == 0);      // not known
  CHECK(cut[0].cut == 256 * K);  // behind there: timed again, the first of two in a row
  CHECK(cut[1].cut == 32 * K);   // ahead there: the same
  CHECK(cut[3].cut == 32 * K);   // behind at 16 KiB, with no run started: 32 KiB is next
  CHECK(cut[2].found == 0);      // the direct exchange's walk starts again
  CHECK(cut[2].cut == 0);
  ShapeTuning known{"2-processes"};
  known.all_reduce = cut[0].found, known.all_reduce_next = cut[0].cut;
  known.reduce_scatter_next = cut[1].cut, known.reduce_next = cut[3].cut;
  auto later = detail::shape_walks_from(known, Config{}.slot_bytes);
  CHECK(later[2].next == 4096);
  CHECK(later[0].next == 256 * K);
  later[0].record(false);
  later[0].record(false);
  is({later[0].found, later[0].until}, 64 * K, 256 * K);  // as one walk through would have found
  CHECK(later[1].next == 32 * K);
  later[1].record(true);
  later[1].record(true);
  CHECK(later[1].found == 32 * K);
  CHECK(later[3].next == 32 * K);
  CHECK(later[3].found == 0);
  // Known whole: not walked again.
  known.all_reduce_until = 512 * K, known.all_reduce_next = 0, known.direct = 8192, known.reduce = M,
  known.reduce_until = kNoUpperBound, known.reduce_next = 0;
  later = detail::shape_walks_from(known, Config{}.slot_bytes);
  CHECK(later[0].next == 0);
  is({later[0].found, later[0].until}, 64 * K, 512 * K);
  CHECK(later[2].next == 0);
  CHECK(later[2].found == 8192);
  CHECK(later[3].next == 0);
  is({later[3].found, later[3].until}, M, kNoUpperBound);
  CHECK(later[1].next == 32 * K);  // still cut
}

TEST_CASE("shape walks: a round that would pass the budget ends them, a walk's first round weighed by its bytes") {
  const size_t K = 1024;
  SetupFacts facts;
  facts.host_of = {0, 0};
  facts.set_order({0, 1}, 0);
  const double budget = detail::kShapeBudgetUs;
  auto plan_with = [&](std::array<detail::SizeWalk, detail::kShapeWalks>& walks, double elapsed,
                       const detail::RoundCosts& costs) {
    double plan[detail::kShapeWalks + 1] = {};
    detail::plan_round(walks, elapsed, costs, Config{}, facts, plan);
    return std::accumulate(plan, plan + detail::kShapeWalks, 0.0);  // the size timed next (0: none)
  };
  // A set-up's first round goes ahead whatever it costs: every set-up times a size.
  ShapeTuning known{"2-processes"};
  known.all_reduce_next = 2048 * K;  // cut at 2 MiB by an earlier set-up
  known.direct = 16 * K, known.recursive_doubling = 512 * K, known.recursive_doubling_until = 512 * K;
  auto walks = detail::shape_walks_from(known, Config{}.slot_bytes);
  detail::RoundCosts none;
  CHECK(plan_with(walks, 0, none) == 2048 * K);
  // After a round of 512 KiB that took a quarter of the budget, the walk's first round, at 2 MiB
  // (4x the bytes), would pass it: the walks end, and keep where they got.
  detail::RoundCosts costs;
  costs.add(detail::kDoublingWalk, 512 * K, budget / 4);
  CHECK(costs.next_us(0, 2048 * K) == doctest::Approx(budget));
  CHECK(plan_with(walks, 1000, costs) == 0);
  CHECK(walks[0].next == 0);
  CHECK(walks[0].cut == 2048 * K);
  // At 1 MiB it fits.
  known.all_reduce_next = 1024 * K;
  walks = detail::shape_walks_from(known, Config{}.slot_bytes);
  CHECK(plan_with(walks, 1000, costs) == 1024 * K);
  // A walk's later rounds: about twice its last.
  costs.add(0, 1024 * K, budget / 3);
  CHECK(costs.next_us(0, 2048 * K) == doctest::Approx(2 * budget / 3));
  CHECK(costs.largest_bytes == 1024 * K);
  walks[0].record(false);  // 2 MiB next: twice a third of the budget, on top of a third spent
  CHECK(plan_with(walks, budget / 3 + 1000, costs) == 0);
  CHECK(walks[0].cut == 2048 * K);
}

TEST_CASE(
    "shape tuning: measured at the first set-up of a shape, cached, on every rank; variables win; exact either "
    "side") {
  const std::string path = temp_path("crossover");
  std::remove(path.c_str());
  setenv("DCOMM_HOST_TUNING_CACHE", path.c_str(), 1);
  detail::host_tuning_memo().known.reset();  // as in a process that has not set up a communicator yet
  const Config config = shape_config();
  auto comms = Communicator::create_local(2, config);
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  auto line = [&] { return cached_line(path); };
  ShapeTuning measured = line();
  CHECK(measured.tries == 1);
  CHECK(measured.pace_ns > 0);
  // Set-ups of the shape go on measuring what the budget left until it is known whole or they
  // have tried kShapeTries times; from then on they measure nothing. One much slower than the pace
  // the walks began at times nothing; one much faster times all again, at its pace (a loaded host
  // moves it: the test suite runs beside).
  for (int set_ups = 0; !measured.complete() && measured.tries < kShapeTries && set_ups < 4 * kShapeTries; ++set_ups) {
    comms = Communicator::create_local(2, config);
    REQUIRE_MESSAGE(comms.ok(), comms.status().message());
    const ShapeTuning before = measured;
    measured = line();
    const bool went_on = measured.tries == before.tries + 1 && measured.pace_ns == before.pace_ns;
    const bool none = measured.tries == before.tries && measured.pace_ns == before.pace_ns;
    const bool again = measured.tries == 1 && measured.pace_ns < before.pace_ns;
    CHECK((went_on || none || again));
  }
  const ShapeTuning* entry = &measured;
  // Each threshold measured, or 0 where a loaded host ran the set-ups out of their budget first:
  // then the compiled-in value serves.
  const Config d;
  const size_t all_reduce = entry->all_reduce ? entry->all_reduce : d.cma_reduce_bytes;
  const size_t reduce_scatter = entry->reduce_scatter ? entry->reduce_scatter : d.cma_reduce_scatter_bytes;
  const size_t direct = entry->direct ? entry->direct : d.direct_bytes;
  const size_t reduce = entry->reduce ? entry->reduce : d.cma_reduce_root_bytes;
  // Where single copy falls behind again; where not known (0), none.
  auto until = [](size_t measured) { return measured ? measured : kNoUpperBound; };
  const size_t all_reduce_until = until(entry->all_reduce_until);
  const size_t reduce_scatter_until = until(entry->reduce_scatter_until);
  const size_t reduce_until = until(entry->reduce_until);
  // all_gather's and broadcast's: where not known, DCOMM_CMA_BYTES's rule.
  auto copies = [](size_t measured) { return measured ? measured : kNotMeasured; };
  const size_t all_gather = copies(entry->all_gather), broadcast = copies(entry->broadcast);
  const size_t all_gather_until = until(entry->all_gather_until), broadcast_until = until(entry->broadcast_until);
  for (size_t from : {all_gather, broadcast})
    CHECK((from == kNotMeasured || (from >= 16384 && from <= size_t{2} << 20)));
  // recursive doubling's: where not known, the cost model's choice; its walk ends at 512 KiB.
  const size_t doubling = copies(entry->recursive_doubling), doubling_until = until(entry->recursive_doubling_until);
  CHECK((doubling == kNotMeasured || (doubling >= 16384 && doubling <= kFifoWalkLast)));
  CHECK(all_reduce >= 16384);
  CHECK(all_reduce <= size_t{2} << 20);
  CHECK(reduce_scatter >= 16384);
  CHECK(reduce >= 16384);
  CHECK(reduce <= size_t{2} << 20);
  CHECK(direct >= 2048);
  CHECK(direct <= 16384);
  for (auto [from, to] : {std::pair{all_reduce, all_reduce_until}, std::pair{reduce_scatter, reduce_scatter_until},
                          std::pair{reduce, reduce_until}, std::pair{all_gather, all_gather_until},
                          std::pair{broadcast, broadcast_until}, std::pair{doubling, doubling_until}}) {
    if (from == kNotMeasured) continue;  // all_gather's, broadcast's or recursive doubling's, not known
    CHECK(to >= from);                   // equal: the candidate was behind through the last size timed
    CHECK((to == kNoUpperBound || to <= size_t{2} << 20));
  }
  for (auto& c : *comms) {
    CHECK(c->config().cma_reduce_bytes == all_reduce);
    CHECK(c->config().cma_reduce_scatter_bytes == reduce_scatter);
    CHECK(c->config().direct_bytes == direct);
    CHECK(c->config().cma_reduce_root_bytes == reduce);
    CHECK(c->config().cma_reduce_until_bytes == all_reduce_until);
    CHECK(c->config().cma_reduce_scatter_until_bytes == reduce_scatter_until);
    CHECK(c->config().cma_reduce_root_until_bytes == reduce_until);
    CHECK(c->config().cma_all_gather_bytes == all_gather);
    CHECK(c->config().cma_all_gather_until_bytes == all_gather_until);
    CHECK(c->config().cma_broadcast_bytes == broadcast);
    CHECK(c->config().cma_broadcast_until_bytes == broadcast_until);
    CHECK(c->config().recursive_doubling_bytes == doubling);
    CHECK(c->config().recursive_doubling_until_bytes == doubling_until);
  }
  // Either side of what it chose, all_reduce, reduce_scatter and reduce (in and out of place),
  // all_gather and broadcast are exact.
  std::vector<size_t> thresholds = {all_reduce, reduce_scatter, direct, reduce};
  for (size_t t : {all_reduce_until, reduce_scatter_until, reduce_until, all_gather, all_gather_until, broadcast,
                   broadcast_until, doubling, doubling_until})
    if (t != kNoUpperBound && t != kNotMeasured) thresholds.push_back(t);
  for (size_t threshold : thresholds)
    for (size_t bytes : {threshold - 64, threshold, threshold + 64}) {
      CAPTURE(bytes);
      on_ranks(*comms, [&](Communicator& c) {
        const size_t n = bytes / 4 / 2 * 2, per = n / 2;
        const auto r = static_cast<float>(c.rank());
        std::vector<float> in(n), out(n, -1.0f);
        for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) + r;
        REQUIRE(c.all_reduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum).ok());
        CHECK(out[n - 1] == static_cast<float>(2 * ((n - 1) % 1000) + 1));
        REQUIRE(c.all_reduce(in.data(), in.data(), n, DataType::kFloat32, ReduceOp::kSum).ok());
        CHECK(in[n - 1] == static_cast<float>(2 * ((n - 1) % 1000) + 1));
        for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) + r;
        REQUIRE(c.reduce_scatter(in.data(), out.data(), per, DataType::kFloat32, ReduceOp::kSum).ok());
        const size_t last = static_cast<size_t>(c.rank()) * per + per - 1;
        CHECK(out[per - 1] == static_cast<float>(2 * (last % 1000) + 1));
        // reduce: to rank 1 (rank 0 gives no recv; the tuning timed it to rank 0), out of place
        // and in place, every element.
        for (bool in_place : {false, true}) {
          for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) + r;
          std::fill(out.begin(), out.end(), -1.0f);
          float* recv = c.rank() != 1 ? nullptr : in_place ? in.data() : out.data();
          REQUIRE(c.reduce(in.data(), recv, n, DataType::kFloat32, ReduceOp::kSum, 1).ok());
          size_t wrong = 0;
          for (size_t i = 0; recv && i < n; ++i) wrong += recv[i] != static_cast<float>(2 * (i % 1000) + 1);
          CHECK(wrong == 0);
        }
        // all_gather (bytes: its output) and broadcast from rank 1, every element.
        for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) + r;
        std::fill(out.begin(), out.end(), -1.0f);
        REQUIRE(c.all_gather(in.data(), out.data(), per, DataType::kFloat32).ok());
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += out[i] != static_cast<float>((i % per) % 1000 + i / per);
        CHECK(wrong == 0);
        std::fill(out.begin(), out.end(), -1.0f);
        REQUIRE(c.broadcast(in.data(), out.data(), n, DataType::kFloat32, 1).ok());
        wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += out[i] != static_cast<float>(i % 1000 + 1);
        CHECK(wrong == 0);
      });
    }
  // A second set-up of the shape reads it; a variable or the program's own value wins over it.
  CHECK(host_tuning().measured.for_shape("2-threads"));
  setenv("DCOMM_CMA_REDUCE_BYTES", "3M", 1);
  auto with_env = Communicator::create_local(2);  // the configuration from the environment
  unsetenv("DCOMM_CMA_REDUCE_BYTES");
  REQUIRE_MESSAGE(with_env.ok(), with_env.status().message());
  for (auto& c : *with_env) {
    CHECK(c->config().cma_reduce_bytes == size_t{3} << 20);
    CHECK(c->config().cma_reduce_scatter_bytes == size_t{3} << 20);
    CHECK(c->config().cma_reduce_root_bytes == size_t{3} << 20);  // unset, reduce_scatter's
    CHECK(c->config().cma_reduce_until_bytes == kNoUpperBound);   // from the value chosen on
    CHECK(c->config().cma_reduce_root_until_bytes == kNoUpperBound);
  }
  Config own = config;
  own.cma_reduce_scatter_bytes = 5000;
  auto with_own = Communicator::create_local(2, own);
  REQUIRE_MESSAGE(with_own.ok(), with_own.status().message());
  // (as the cache has it now: a set-up much faster than the pace the walks began at, the test
  // suite's load gone, times them all again)
  const ShapeTuning now = line();
  for (auto& c : *with_own) {
    CHECK(c->config().cma_reduce_bytes == (now.all_reduce ? now.all_reduce : d.cma_reduce_bytes));
    CHECK(c->config().cma_reduce_until_bytes == until(now.all_reduce_until));
    CHECK(c->config().cma_reduce_scatter_bytes == 5000);
    CHECK(c->config().cma_reduce_scatter_until_bytes == kNoUpperBound);
  }
  // A communicator made from a tuned one (split here; shrink and grow alike) takes its values and
  // neither measures nor reads: with no cache and nothing in memory, none is written.
  std::remove(path.c_str());
  detail::host_tuning_memo().known.reset();
  on_ranks(*comms, [&](Communicator& c) {
    auto child = c.split(0, c.rank());
    REQUIRE_MESSAGE(child.ok(), child.status().message());
    CHECK((*child)->config().direct_bytes == direct);
    CHECK((*child)->config().cma_reduce_bytes == all_reduce);
    CHECK((*child)->config().cma_reduce_until_bytes == all_reduce_until);
  });
  CHECK_FALSE(std::ifstream(path).good());
  unsetenv("DCOMM_HOST_TUNING_CACHE");
}

TEST_CASE(
    "shape tuning: what an earlier set-up's budget did not reach is measured at a later one, at most kShapeTries "
    "times, keeping what it knew") {
  const std::string path = temp_path("partial");
  setenv("DCOMM_HOST_TUNING_CACHE", path.c_str(), 1);
  const Config config = shape_config();
  // A cache whose 2-threads line does not know reduce_scatter (0), nor where reduce's single copy
  // falls behind, after `tries` set-ups; then a set-up of that shape: the line it leaves, and the
  // reduce_scatter threshold of every rank.
  auto set_up_after = [&](int tries, size_t* threshold) {
    ShapeTuning line{"2-threads"};
    line.all_reduce = 65536, line.direct = 4096, line.reduce = 131072, line.all_reduce_until = 262144;
    line.all_gather = 32768, line.all_gather_until = 262144, line.broadcast = 2 << 20;
    line.broadcast_until = kNoUpperBound, line.reduce_next = 512 * 1024, line.tries = tries;
    write_line(path, line);
    auto comms = Communicator::create_local(2, config);
    REQUIRE_MESSAGE(comms.ok(), comms.status().message());
    for (auto& c : *comms) {
      CHECK(c->config().cma_reduce_bytes == 65536);  // known: kept, not timed again
      CHECK(c->config().direct_bytes == 4096);
      CHECK(c->config().cma_reduce_root_bytes == 131072);
      CHECK(c->config().cma_reduce_until_bytes == 262144);
      CHECK(c->config().cma_all_gather_bytes == 32768);
      CHECK(c->config().cma_all_gather_until_bytes == 262144);
      CHECK(c->config().cma_broadcast_bytes == size_t{2} << 20);
      CHECK(c->config().cma_broadcast_until_bytes == kNoUpperBound);
      CHECK(c->config().cma_reduce_root_until_bytes == (*comms)[0]->config().cma_reduce_root_until_bytes);
      CHECK(c->config().cma_reduce_scatter_bytes == (*comms)[0]->config().cma_reduce_scatter_bytes);
    }
    *threshold = (*comms)[0]->config().cma_reduce_scatter_bytes;
    return cached_line(path);
  };
  size_t threshold = 0;
  // After one try: this set-up measures reduce_scatter, and keeps the rest.
  ShapeTuning after = set_up_after(1, &threshold);
  CHECK(after.tries == 2);
  CHECK(after.all_reduce == 65536);
  CHECK(after.direct == 4096);
  CHECK(after.reduce == 131072);
  CHECK(after.all_reduce_until == 262144);
  CHECK(after.all_gather == 32768);
  CHECK(after.broadcast_until == kNoUpperBound);
  // reduce's walk went on from 512 KiB, where the cache says it was cut: where it ends, or where
  // it was cut again.
  CHECK((after.reduce_until == kNoUpperBound ||
         (after.reduce_until >= 512 * 1024 && after.reduce_until <= size_t{2} << 20)) == (after.reduce_next == 0));
  CHECK((after.reduce_next == 0 || after.reduce_next >= 512 * 1024));
  // Measured, unless this set-up ran out of its budget too (a loaded host): the compiled-in value.
  CHECK(threshold == (after.reduce_scatter ? after.reduce_scatter : Config{}.cma_reduce_scatter_bytes));
  CHECK(threshold >= 16384);
  // After kShapeTries tries, what is not known stays the compiled-in value and is not measured.
  after = set_up_after(kShapeTries, &threshold);
  CHECK(after.tries == kShapeTries);
  CHECK(after.reduce_scatter == 0);
  CHECK(after.reduce_until == 0);
  CHECK(after.reduce_next == 512 * 1024);  // as it was
  CHECK(threshold == Config{}.cma_reduce_scatter_bytes);
  std::remove(path.c_str());
  unsetenv("DCOMM_HOST_TUNING_CACHE");
}

TEST_CASE(
    "shape tuning: a set-up much faster than the pace a shape's walks began at times them all again; one much "
    "slower times nothing") {
  const std::string path = temp_path("pace");
  setenv("DCOMM_HOST_TUNING_CACHE", path.c_str(), 1);
  const Config config = shape_config();
  // A 2-threads line at `pace_ns`, known whole or not, with thresholds no walk finds (a walk's
  // sizes are powers of two); then a set-up of that shape: the line it leaves, and whether every
  // rank took the line's thresholds.
  constexpr size_t kOdd = 3 << 14;
  auto set_up_at = [&](size_t pace_ns, bool whole, int tries, bool* kept) {
    ShapeTuning line{"2-threads"};
    for (const detail::WalkFields& f : detail::kWalkFields) {
      line.*f.found = kOdd;
      if (f.until) line.*f.until = 2 * kOdd;
    }
    line.reduce_scatter = whole ? kOdd : 0;
    line.pace_ns = pace_ns, line.tries = tries;
    write_line(path, line);
    auto comms = Communicator::create_local(2, config);
    REQUIRE_MESSAGE(comms.ok(), comms.status().message());
    *kept = true;
    for (auto& c : *comms)
      *kept = *kept && c->config().cma_reduce_bytes == kOdd && c->config().cma_reduce_until_bytes == 2 * kOdd &&
              c->config().recursive_doubling_bytes == kOdd && c->config().direct_bytes == kOdd;
    return cached_line(path);
  };
  bool kept = false;
  // Known whole, at a pace no set-up is much slower than (1 ns): kept, only the pace timed.
  ShapeTuning after = set_up_at(1, true, 3, &kept);
  CHECK(kept);
  CHECK(after.tries == 3);
  CHECK(after.pace_ns == 1);
  // Not known whole, at that pace: this set-up is much slower, so it times nothing and counts
  // no try.
  after = set_up_at(1, false, 2, &kept);
  CHECK(kept);
  CHECK(after.tries == 2);
  CHECK(after.reduce_scatter == 0);
  // At a pace every set-up is much faster than (1000 s a call), known whole or not: every
  // threshold timed again from the first try, at this set-up's pace.
  for (bool whole : {true, false}) {
    CAPTURE(whole);
    after = set_up_at(size_t{1} << 60, whole, kShapeTries, &kept);
    CHECK_FALSE(kept);
    CHECK(after.tries == 1);
    CHECK(after.pace_ns > 0);
    CHECK(after.pace_ns < size_t{1} << 60);
    CHECK(after.all_reduce != kOdd);
    CHECK(after.direct != kOdd);
  }
  // A line without a pace (written by hand, or before the pace was kept), known whole: read, not
  // timed.
  after = set_up_at(0, true, 1, &kept);
  CHECK(kept);
  CHECK(after.tries == 1);
  CHECK(after.pace_ns == 0);
  std::remove(path.c_str());
  unsetenv("DCOMM_HOST_TUNING_CACHE");
}
