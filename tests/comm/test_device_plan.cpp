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

TEST_CASE("channels: by the multiprocessors per rank, never more than can be resident at once") {
  // Two ranks on one 132-SM GPU, one resident block per SM: 66 channels each.
  std::vector<DeviceRankFacts> two = {gpu("0000:01", 132, 1), gpu("0000:01", 132, 1)};
  CHECK(agree_device_channels(two) == 64);  // the arena's bound
  // Four ranks sharing it: 33 each, all 132 blocks resident.
  std::vector<DeviceRankFacts> four(4, gpu("0000:01", 132, 1));
  CHECK(agree_device_channels(four) == 33);
  // DCOMM_CUDA_CHANNELS=64 on four ranks at 1024 threads (one block an SM): 64 x 4 = 256
  // blocks would not be resident together and the rings would wait on each other for ever.
  std::vector<DeviceRankFacts> greedy(4, gpu("0000:01", 132, 1, 64));
  std::string why;
  const int c = agree_device_channels(greedy, &why);
  CHECK(c * 4 <= 132);
  CHECK(c == 33);
  CHECK(why.find("resident") != std::string::npos);
  // Two blocks an SM fit: the request stands.
  std::vector<DeviceRankFacts> fits(4, gpu("0000:01", 132, 2, 64));
  CHECK(agree_device_channels(fits) == 64);
  // Different GPUs: the smallest bound over them, so the FIFO layout agrees.
  std::vector<DeviceRankFacts> mixed = {gpu("0000:01", 132, 1), gpu("0000:02", 20, 1), gpu("0000:02", 20, 1)};
  CHECK(agree_device_channels(mixed) == 10);
  // Ranks asking for different counts: the smallest request, the same everywhere.
  std::vector<DeviceRankFacts> asks = {gpu("0000:01", 132, 4, 8), gpu("0000:02", 132, 4, 5)};
  CHECK(agree_device_channels(asks) == 5);
  // A GPU reporting no residency still gets one channel at least.
  std::vector<DeviceRankFacts> odd = {gpu("0000:01", 0, 0)};
  CHECK(agree_device_channels(odd) == 1);
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
