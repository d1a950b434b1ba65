// The host tuning (comm/host_tuning.hpp): what it derives from a measurement, its cache (read
// back on the same host; one written for another host, or unreadable, ignored and why said),
// every rank taking rank 0's values, DCOMM_CMA_BYTES and a program's own value winning, and the
// collectives exact either side of the threshold it chose.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <numeric>

#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {
std::string temp_path(const char* name) { return detail::cat("/tmp/dcomm-test-host-tuning-", getpid(), "-", name); }
}  // namespace

TEST_CASE("host tuning: single copy pays from the syscall's cost times the copy bandwidth, 4 KiB to 1 MiB") {
  CHECK(cma_bytes_for({0.37, 52}) == 16384);  // 19 KB: the nearest power of two
  CHECK(cma_bytes_for({1.0, 40}) == 32768);   // 40 KB
  CHECK(cma_bytes_for({0.05, 10}) == 4096);   // the floor
  CHECK(cma_bytes_for({50, 100}) == size_t{1} << 20);
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
  REQUIRE(write_host_tuning(path, sig, {0.5, 20}).ok());
  auto back = read_host_tuning(path, sig, &why);
  REQUIRE(back);
  CHECK(back->cma_us == doctest::Approx(0.5));
  CHECK(back->copy_gbs == doctest::Approx(20));
  CHECK_FALSE(read_host_tuning(path, sig + " (elsewhere)", &why));
  CHECK(why.find("another host or kernel") != std::string::npos);
  std::ofstream(path) << "dcomm-host-tuning\nhost " << sig << "\ncma_us lots\n";
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
