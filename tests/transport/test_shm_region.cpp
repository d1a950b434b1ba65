// Shared-memory regions (transport/shm.hpp), as the FIFOs and the device path's pinned host
// arena use them: created in DCOMM_SHM_DIR with their pages reserved, opened by a peer at the
// same size, the name kept for several readers or dropped for one, removed with its creator.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <dcomm/transport/shm.hpp>

using namespace dcomm;

namespace {
bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}
}  // namespace

TEST_CASE("shm region: a peer sees the creator's bytes; the creator's mapping removes the file") {
  const std::string dir = "/dev/shm";
  const std::string path = dir + "/" + detail::unique_shm_name("test-region");
  {
    auto mine = detail::create_shm_region(path, 1 << 20, dir, "a test region");
    REQUIRE(mine.ok());
    std::memcpy(mine->get(), "hello", 6);
    {
      // Several readers: the name stays while they open it.
      auto a = detail::open_shm_region(path, 1 << 20, /*unlink_now=*/false, "test region", "same sizes?");
      auto b = detail::open_shm_region(path, 1 << 20, /*unlink_now=*/false, "test region", "same sizes?");
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      CHECK(std::strcmp(static_cast<const char*>(b->get()), "hello") == 0);
      std::memcpy(a->get(), "world", 6);
      CHECK(std::strcmp(static_cast<const char*>(mine->get()), "world") == 0);
      CHECK(exists(path));
    }
    // The wrong size names what to check.
    auto wrong = detail::open_shm_region(path, 1 << 21, false, "test region", "do all ranks set the same sizes?");
    REQUIRE_FALSE(wrong.ok());
    CHECK(wrong.status().message().find("do all ranks set the same sizes?") != std::string::npos);
    CHECK(exists(path));
  }
  CHECK_FALSE(exists(path));  // gone with its creator
}

TEST_CASE("shm region: one reader drops the name at once; a file name that exists is refused") {
  const std::string dir = "/dev/shm";
  const std::string path = dir + "/" + detail::unique_shm_name("test-region");
  auto mine = detail::create_shm_region(path, 4096, dir, "a test region");
  REQUIRE(mine.ok());
  CHECK_FALSE(detail::create_shm_region(path, 4096, dir, "a test region").ok());  // O_EXCL
  auto peer = detail::open_shm_region(path, 4096, /*unlink_now=*/true, "test region", "same sizes?");
  REQUIRE(peer.ok());
  CHECK_FALSE(exists(path));
  CHECK_FALSE(detail::open_shm_region(path, 4096, true, "test region", "same sizes?").ok());
}
