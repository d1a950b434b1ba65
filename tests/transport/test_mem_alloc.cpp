#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>

#include <dcomm/transport/mem_alloc.hpp>

using namespace dcomm;

TEST_CASE("mem_alloc: page-aligned memory the registry finds by address, freed once") {
  auto p = mem_alloc(10000);
  REQUIRE(p.ok());
  char* base = static_cast<char*>(*p);
  CHECK(reinterpret_cast<uintptr_t>(base) % 4096 == 0);
  std::memset(base, 7, 10000);
  auto& reg = detail::RegionRegistry::instance();
  RegionRef whole = reg.find(base, 10000);
  CHECK(whole.fd >= 0);
  CHECK(reg.find(base + 100, 50).generation == whole.generation);
  CHECK(reg.find(base, 12288).fd >= 0);  // rounded up to pages
  CHECK(reg.find(base, 12289).fd < 0);   // runs past the end
  int stack_value = 0;
  CHECK(reg.find(&stack_value, sizeof stack_value).fd < 0);
  CHECK(mem_free(base).ok());
  CHECK(reg.find(base, 1).fd < 0);
  Status again = mem_free(base);
  CHECK(again.code() == ErrorCode::kInvalidArgument);
  CHECK(again.message().find("not returned by mem_alloc") != std::string::npos);
  CHECK(mem_alloc(0).status().code() == ErrorCode::kInvalidArgument);
  CHECK(mem_free(nullptr).ok());
}

TEST_CASE("mem_alloc: a peer's view maps the same pages, and a freed fd's new file is mapped afresh") {
  auto p = mem_alloc(1 << 20);
  REQUIRE(p.ok());
  char* base = static_cast<char*>(*p);
  auto& reg = detail::RegionRegistry::instance();
  RegionRef ref = reg.find(base, 1 << 20);
  RemoteRegions peer(getpid());  // this process, seen as a peer would see it: through /proc
  char* alias = peer.translate(ref, reinterpret_cast<uint64_t>(base) + 4096, 100);
  REQUIRE(alias != nullptr);
  CHECK(alias != base + 4096);  // another mapping...
  alias[0] = 42;                // ...of the same pages
  CHECK(base[4096] == 42);
  CHECK(peer.translate(ref, reinterpret_cast<uint64_t>(base), (1 << 20) + 1) == nullptr);  // past the end
  CHECK(peer.translate(RegionRef{}, reinterpret_cast<uint64_t>(base), 1) == nullptr);
  CHECK(peer.mapped() == 1);

  REQUIRE(mem_free(base).ok());
  auto q = mem_alloc(1 << 20);  // most likely the same fd number, certainly a new generation
  REQUIRE(q.ok());
  RegionRef ref2 = reg.find(*q, 1);
  CHECK(ref2.generation != ref.generation);
  char* alias2 = peer.translate(ref2, reinterpret_cast<uint64_t>(*q), 1);
  REQUIRE(alias2 != nullptr);
  static_cast<char*>(*q)[0] = 9;
  CHECK(alias2[0] == 9);
  CHECK(peer.mapped() == (ref2.fd == ref.fd ? 1u : 2u));  // a stale mapping under the same fd is dropped
  CHECK(mem_free(*q).ok());
}
