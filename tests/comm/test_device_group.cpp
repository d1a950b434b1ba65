// The device communicator's host-side decisions that no GPU is needed to check: what one
// group launches and in which order (comm/device_group.hpp), a kernel block's report of work
// it cannot run (comm/device_work.hpp), and the staging path's slot lifetime across two
// streams (comm/device_staging.hpp over a recording stub of the stream operations).
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include <dcomm/comm/device_group.hpp>
#include <dcomm/comm/device_staging.hpp>
#include <dcomm/comm/device_work.hpp>

#include "support/ranks.hpp"

using namespace dcomm;

namespace {
DeviceLaunchPlan plan_of(int channels, int p2p_channels, int p2p_blocks) {
  DeviceLaunchPlan p;
  p.channels = channels;
  p.p2p_channels = p2p_channels;
  p.p2p_blocks = p2p_blocks;
  return p;
}
std::vector<LaunchStep::Kind> kinds(const DeviceGroup::Launch& l) {
  std::vector<LaunchStep::Kind> k;
  for (const auto& s : l.steps) k.push_back(s.kind);
  return k;
}
int scratch_a, scratch_b;  // addresses standing for device scratch
}  // namespace

TEST_CASE("a group launches after the previous launch, collectives then send/recv, and frees its scratch after them") {
  DeviceGroup g;
  int stream = 0;
  REQUIRE(g.use_stream("all_reduce", 0, &stream).ok());
  DeviceCollWork w;
  g.add_collective(w, DataType::kFloat32);
  g.keep_scratch(&scratch_a, &stream);  // PreMulSum's scaled input, read by the all_reduce
  g.add_collective(w, DataType::kUint8);
  REQUIRE(g.use_stream("send", 0, &stream).ok());
  REQUIRE(g.add_send_recv({nullptr, 64, 1, 1}));
  REQUIRE(g.add_send_recv({nullptr, 64, 1, 0}));
  g.keep_scratch(&scratch_b, &stream);  // an in-place all-to-all's copy, read by the sends
  DeviceGroup::Launch l = g.close(0, plan_of(8, 2, 16));
  REQUIRE(l.status.ok());
  CHECK(l.stream == &stream);
  using K = LaunchStep;
  CHECK(kinds(l) == std::vector<K::Kind>{K::kWaitPrevious, K::kCollective, K::kCollective, K::kSendRecv,
                                         K::kFreeScratch, K::kFreeScratch, K::kMarkLaunched});
  CHECK(l.steps[1].index == 0);
  CHECK(l.steps[2].index == 1);
  CHECK(l.steps[4].scratch == &scratch_a);
  CHECK(l.steps[5].scratch == &scratch_b);
  CHECK(l.steps[4].stream == &stream);
  CHECK(l.collectives.size() == 2);
  CHECK(l.collectives[1].type == DataType::kUint8);
  CHECK(l.p2p.nitems == 2);
  // Closed: the group is empty again, and a next one may use another stream.
  int other = 0;
  CHECK(g.use_stream("all_reduce", 0, &other).ok());
  DeviceGroup::Launch empty = g.close(0, plan_of(8, 2, 16));
  CHECK(empty.steps.empty());
}

TEST_CASE("a group that fails a check launches nothing, and its scratch is still freed") {
  int s1 = 0, s2 = 0;
  {  // a send to this rank without its receive, after a collective that would have launched
    DeviceGroup g;
    REQUIRE(g.use_stream("all_reduce", 2, &s1).ok());
    g.add_collective(DeviceCollWork{}, DataType::kFloat32);
    g.keep_scratch(&scratch_a, &s1);
    REQUIRE(g.add_send_recv({nullptr, 8, 2, 1}));
    DeviceGroup::Launch l = g.close(2, plan_of(8, 2, 16));
    CHECK(l.status.code() == ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(
        l.status.message().find("send/recv on rank 2: a send to this rank and its receive") != std::string::npos,
        l.status.message());
    CHECK_MESSAGE(l.status.message().find("nothing of the group was launched") != std::string::npos,
                  l.status.message());
    CHECK(kinds(l) == std::vector<LaunchStep::Kind>{LaunchStep::kFreeScratch});
  }
  {  // a group with nothing to launch (calls staged through the host): its scratch is still
     // freed, on the stream the staged copies read it from
    DeviceGroup g;
    g.keep_scratch(&scratch_b, &s2);
    DeviceGroup::Launch l = g.close(0, plan_of(8, 2, 16));
    CHECK(l.status.ok());
    REQUIRE(kinds(l) == std::vector<LaunchStep::Kind>{LaunchStep::kFreeScratch});
    CHECK(l.steps[0].stream == &s2);
  }
  {  // a send/recv grid larger than the rank's share of its GPU
    DeviceGroup g;
    REQUIRE(g.use_stream("send", 0, &s1).ok());
    for (int peer = 1; peer < 6; ++peer) {
      REQUIRE(g.add_send_recv({nullptr, 8, peer, 1}));
      REQUIRE(g.add_send_recv({nullptr, 8, peer, 0}));
    }
    DeviceGroup::Launch l = g.close(0, plan_of(8, 1, 9));  // 10 lanes, 9 blocks
    CHECK(l.status.code() == ErrorCode::kOutOfResources);
    CHECK(l.steps.empty());
  }
  {  // two streams in one group: refused at the second call
    DeviceGroup g;
    REQUIRE(g.use_stream("all_reduce", 1, &s1).ok());
    Status s = g.use_stream("broadcast", 1, &s2);
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(
        s.message().find("broadcast on rank 1: every call of a group must use one stream") != std::string::npos,
        s.message());
  }
}

TEST_CASE("a block given work it cannot run says so, so the host aborts every rank with that reason") {
  DeviceError err;
  DeviceCollWork w;
  w.kind = OpKind::kAllGather;  // a copy-only collective in a float kernel: a launch bug
  w.count = 16;
  w.ctl.error = &err;
  std::vector<float> buf(16);
  w.send = buf.data();
  w.recv = buf.data();
  w.channels = 2;
  coll_block<SerialTeam, float>(SerialTeam{}, w, 1);
  CHECK(err.code == DeviceStatus::kBadWork);
  CHECK(err.channel == 1);
  Status s = device_error_status(err, 3, 0, "none");
  CHECK(s.code() == ErrorCode::kInternal);
  CHECK_MESSAGE(s.message().find("a kernel on rank 3 (CUDA device 0, channel 1) was given work it cannot run") !=
                    std::string::npos,
                s.message());
  // Only the team's first thread writes the report; a good block writes none.
  DeviceError quiet;
  w.ctl.error = &quiet;
  coll_block<SerialTeam, float>(SerialTeam{1, 2}, w, 0);
  CHECK(quiet.code == 0);
  w.kind = OpKind::kAllReduce;
  w.size = 1;
  coll_block<SerialTeam, float>(SerialTeam{}, w, 0);
  CHECK(quiet.code == 0);
  // A send/recv block past its grid (no such lane).
  DeviceP2pWork p;
  p.ctl.error = &quiet;
  p.channels = 2;
  p.nlanes = 1;
  p2p_block(SerialTeam{}, p, 5);
  CHECK(quiet.code == DeviceStatus::kBadWork);
  CHECK(quiet.channel == 1);
}

namespace {
// Stream operations that run nothing until the test says so: each stream's steps queue up in
// order, and run(stream, n) carries out the next n.
struct Recorded {
  static std::map<void*, std::deque<std::function<void()>>> queues;
  static int pinned;
  static Status copy(void* dst, const void* src, size_t bytes, bool, void* stream) {
    queues[stream].push_back([=] { std::memcpy(dst, src, bytes); });
    return {};
  }
  static Status host_func(void* stream, void (*fn)(void*), void* arg) {
    queues[stream].push_back([=] { fn(arg); });
    return {};
  }
  static bool capturing(void*) { return false; }
  static void* alloc_pinned(size_t bytes) {
    ++pinned;
    return std::malloc(bytes);
  }
  static void free_pinned(void* p) { std::free(p); }
  static void run(void* stream, size_t n) {
    auto& q = queues[stream];
    for (size_t i = 0; i < n && !q.empty(); ++i) {
      q.front()();
      q.pop_front();
    }
  }
};
std::map<void*, std::deque<std::function<void()>>> Recorded::queues;
int Recorded::pinned = 0;
}  // namespace

TEST_CASE("staging: a call on another stream never fills a buffer whose copy back has not run") {
  auto comms = Communicator::create_local(1, dcomm_test::test_config());
  REQUIRE(comms.ok());
  Communicator& host = *(*comms)[0];
  std::vector<Status> errors;
  BasicDeviceStaging<Recorded> staging(host, [&](const Status& s) { errors.push_back(s); });
  int stream_a = 0, stream_b = 0;
  std::vector<float> in_a = {1, 2, 3, 4}, out_a(4, -1), in_b = {50, 60, 70, 80}, out_b(4, -1);
  const size_t bytes = in_a.size() * sizeof(float);
  OpDesc a{OpKind::kAllReduce, in_a.data(), out_a.data(), in_a.size(), DataType::kFloat32, ReduceOp::kSum};
  OpDesc b{OpKind::kAllReduce, in_b.data(), out_b.data(), in_b.size(), DataType::kFloat32, ReduceOp::kSum};
  REQUIRE(staging.enqueue(a, bytes, bytes, &stream_a).ok());
  Recorded::run(&stream_a, 2);  // a's copy in and its collective; its copy back has not run
  REQUIRE(staging.enqueue(b, bytes, bytes, &stream_b).ok());
  CHECK(Recorded::pinned == 2);  // b could not take a's buffer
  Recorded::run(&stream_b, 10);  // b runs to its end first
  Recorded::run(&stream_a, 10);
  CHECK(out_a == in_a);  // one rank: the sum is the input
  CHECK(out_b == in_b);
  CHECK(errors.empty());
  // Once a's copy back has run, its buffer serves the next call.
  std::vector<float> out_c(4, -1);
  OpDesc c{OpKind::kAllReduce, in_b.data(), out_c.data(), in_b.size(), DataType::kFloat32, ReduceOp::kSum};
  REQUIRE(staging.enqueue(c, bytes, bytes, &stream_a).ok());
  CHECK(Recorded::pinned == 2);
  Recorded::run(&stream_a, 10);
  CHECK(out_c == in_b);
}
