// The device communicator's set-up decisions (comm/device_plan.hpp), which every rank must
// make alike: pair paths, channels bounded by residency, FIFO shapes.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include <dcomm/comm/device_plan.hpp>

using namespace dcomm;

namespace {
DeviceRankFacts gpu(const char* bus, int sms, int per_sm, int requested = 0) {
  DeviceRankFacts f;
  std::strncpy(f.bus_id, bus, sizeof f.bus_id - 1);
  f.sms = sms;
  f.resident_per_sm = per_sm;
  f.requested_channels = requested;
  f.p2p_channels = 2;
  f.nslots = 4;
  f.slot_bytes = 256 << 10;
  f.threads = 512;
  return f;
}
}  // namespace

TEST_CASE("a pair talks through host memory on both ends when either end asks for it") {
  const int n = 3;
  // Rank 0 can reach rank 1's GPU but rank 1 cannot reach rank 0's (peer access one way);
  // rank 2 has DCOMM_CUDA_P2P_DISABLE=1 (host memory towards everyone).
  std::vector<uint8_t> wants(n * n, 0);
  wants[1 * n + 0] = 1;
  wants[2 * n + 0] = wants[2 * n + 1] = 1;
  auto agreed = agree_pair_paths(wants, n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      CAPTURE(a);
      CAPTURE(b);
      CHECK(agreed[static_cast<size_t>(a * n + b)] == agreed[static_cast<size_t>(b * n + a)]);  // both ends alike
    }
  CHECK(agreed[0 * n + 1] == 1);  // the one-way pair: host on both ends
  CHECK(agreed[0 * n + 2] == 1);
  CHECK(agreed[1 * n + 2] == 1);
  CHECK(agreed[0 * n + 0] == 0);
  std::vector<uint8_t> none(n * n, 0);
  for (uint8_t v : agree_pair_paths(none, n)) CHECK(v == 0);
}

TEST_CASE("channels: by the multiprocessors per rank, never more than can be resident at once, spare ones aside") {
  // 132 SMs keep 16 spare (an eighth): 116 for the path's blocks.
  CHECK(spare_sms(132) == 16);
  CHECK(spare_sms(8) == 2);
  CHECK(spare_sms(2) == 0);
  // Two ranks on one 132-SM GPU, one resident block per SM: 58 channels each.
  std::vector<DeviceRankFacts> two = {gpu("0000:01", 132, 1), gpu("0000:01", 132, 1)};
  CHECK(agree_device_channels(two) == 58);
  // One rank: the arena's bound.
  CHECK(agree_device_channels({gpu("0000:01", 132, 2)}) == 64);
  // Four ranks sharing it: 29 each, 116 blocks resident and 16 SMs left for other kernels
  // (all 132 taken, one copy kernel of the caller's would leave a ring waiting for ever).
  std::vector<DeviceRankFacts> four(4, gpu("0000:01", 132, 1));
  CHECK(agree_device_channels(four) == 29);
  CHECK(agree_device_channels(four) * 4 <= 132 - spare_sms(132));
  // DCOMM_CUDA_CHANNELS=64 on four ranks at one block an SM: 64 x 4 = 256 blocks would not be
  // resident together and the rings would wait on each other for ever.
  std::vector<DeviceRankFacts> greedy(4, gpu("0000:01", 132, 1, 64));
  std::string why;
  const int c = agree_device_channels(greedy, &why);
  CHECK(c * 4 <= 132 - spare_sms(132));
  CHECK(c == 29);
  CHECK(why.find("resident") != std::string::npos);
  // Three blocks an SM fit: the request stands.
  std::vector<DeviceRankFacts> fits(4, gpu("0000:01", 132, 3, 64));
  CHECK(agree_device_channels(fits) == 64);
  // Different GPUs: the smallest bound over them, so the FIFO layout agrees.
  std::vector<DeviceRankFacts> mixed = {gpu("0000:01", 132, 1), gpu("0000:02", 20, 1), gpu("0000:02", 20, 1)};
  CHECK(agree_device_channels(mixed) == 9);  // (20 - 2 spare) / 2
  // Ranks asking for different counts: the smallest request, the same everywhere.
  std::vector<DeviceRankFacts> asks = {gpu("0000:01", 132, 4, 8), gpu("0000:02", 132, 4, 5)};
  CHECK(agree_device_channels(asks) == 5);
  // A GPU reporting no residency still gets one channel at least.
  std::vector<DeviceRankFacts> odd = {gpu("0000:01", 0, 0)};
  CHECK(agree_device_channels(odd) == 1);
}

TEST_CASE("send/recv grids: an all-to-all of every rank sharing one GPU is resident at once, a larger group refused") {
  for (int n : {2, 4, 6, 8}) {
    CAPTURE(n);
    std::vector<DeviceRankFacts> ranks(static_cast<size_t>(n), gpu("0000:01", 132, 1));
    const DeviceLaunchPlan plan = agree_device_plan(ranks);
    CHECK(plan.p2p_channels >= 1);
    CHECK(plan.p2p_channels <= 2);  // DCOMM_CUDA_P2P_CHANNELS
    const int lanes = 2 * n;        // a send and a receive lane for every rank, itself included
    const long long all_ranks = static_cast<long long>(n) * lanes * plan.p2p_channels;
    if (n <= 6) {
      // Every rank's whole all-to-all grid together within the GPU, spare SMs aside.
      CHECK(check_p2p_grid(lanes, plan, 0).ok());
      CHECK(all_ranks <= 132 - spare_sms(132));
    } else {
      // 8 ranks x 16 lanes cannot all be resident on 116 SMs: refused, naming the sizes.
      Status s = check_p2p_grid(lanes, plan, 3);
      CHECK(s.code() == ErrorCode::kOutOfResources);
      CHECK_MESSAGE(s.message().find("send/recv group on rank 3: 16 lanes") != std::string::npos, s.message());
      CHECK_MESSAGE(s.message().find("split the group") != std::string::npos, s.message());
    }
  }
  // Six ranks: without the bound, 2 channels a lane would need 6 x 12 x 2 = 144 blocks on 132 SMs.
  std::vector<DeviceRankFacts> six(6, gpu("0000:01", 132, 1));
  CHECK(agree_device_plan(six).p2p_channels == 1);
  // Two ranks keep the two channels asked for.
  std::vector<DeviceRankFacts> pair(2, gpu("0000:01", 132, 1));
  CHECK(agree_device_plan(pair).p2p_channels == 2);
  // Asked for none (the default), a lane gets what an all-to-all of every rank leaves it: two
  // ranks on 116 usable SMs hold 58 blocks each, 4 lanes: 14 a lane.
  for (auto& f : pair) f.p2p_channels = 0;
  CHECK(agree_device_plan(pair).p2p_channels == 14);
  CHECK(check_p2p_grid(4, agree_device_plan(pair), 0).ok());
  CHECK(check_p2p_grid(5, agree_device_plan(pair), 0).code() == ErrorCode::kOutOfResources);
  for (auto& f : six) f.p2p_channels = 0;
  CHECK(agree_device_plan(six).p2p_channels == 1);
}

TEST_CASE("ranks with different FIFO settings are refused, naming both") {
  std::vector<DeviceRankFacts> f = {gpu("0000:01", 132, 1), gpu("0000:01", 132, 1)};
  CHECK(check_device_shapes(f, 0).ok());
  f[1].slot_bytes = 4096;
  Status s = check_device_shapes(f, 0);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_MESSAGE(s.message().find("rank 1 set DCOMM_CUDA_SLOTS=4 DCOMM_CUDA_SLOT_BYTES=4096") != std::string::npos,
                s.message());
}
