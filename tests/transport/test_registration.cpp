// The registration cache (transport/registration.hpp) with a registrar that counts: what it
// registers, serves again, evicts and refuses, and that a range mapped anew at the same address
// is never served its old registration (page frames from /proc/self/pagemap). The real
// registrar (ibv_reg_mr) runs in scripts/rdma-vm.sh's guest (test_collectives' verbs cases).
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cerrno>
#include <set>
#include <vector>

#include <dcomm/transport/registration.hpp>

using namespace dcomm;

namespace {
// Registers by handing out numbered handles; refuses ranges of `refuse_from` bytes and more.
struct Registrar {
  std::set<uintptr_t> live;
  uintptr_t next = 1;
  size_t refuse_from = SIZE_MAX;
  RegistrationCache make(size_t capacity, bool checked) {
    return RegistrationCache(
        [this](void*, size_t bytes, int, MemoryKind) -> void* {
          if (bytes >= refuse_from) return errno = ENOMEM, nullptr;
          live.insert(next);
          return reinterpret_cast<void*>(next++);
        },
        [this](void* h) { CHECK(live.erase(reinterpret_cast<uintptr_t>(h)) == 1); }, capacity, checked);
  }
};
}  // namespace

TEST_CASE("registration cache: a range inside a registered one is served it; the LRU evicts past the bound") {
  Registrar reg;
  const bool checked = PageIdentity::available();
  std::vector<std::vector<char>> bufs(4, std::vector<char>(1 << 16, 1));
  {
    RegistrationCache cache = reg.make(2, checked);
    auto a = cache.acquire(bufs[0].data(), bufs[0].size(), 1);
    REQUIRE(a.ok());
    auto inside = cache.acquire(bufs[0].data() + 100, 1000, 1);
    REQUIRE(inside.ok());
    CHECK(*inside == *a);                                           // one region, held twice
    auto wider = cache.acquire(bufs[0].data(), bufs[0].size(), 3);  // more access: a region of its own
    REQUIRE(wider.ok());
    CHECK(*wider != *a);
    for (auto* r : {*a, *inside, *wider}) cache.release(r);
    if (!checked) {
      MESSAGE("page frames are hidden from this process: regions live only while held");
      CHECK(reg.live.empty());
      return;
    }
    CHECK(reg.live.size() == 2);
    // Two more buffers, each used once, then the first again: the bound is 2.
    for (int i : {1, 2}) {
      auto r = cache.acquire(bufs[static_cast<size_t>(i)].data(), bufs[static_cast<size_t>(i)].size(), 1);
      REQUIRE(r.ok());
      cache.release(*r);
    }
    CHECK(reg.live.size() == 2);
    CHECK(cache.evictions() == 2);
    const size_t registered = cache.registrations();
    auto recent = cache.acquire(bufs[2].data(), bufs[2].size(), 1);  // the most recent: still there
    REQUIRE(recent.ok());
    CHECK(cache.registrations() == registered);
    // Held regions are not evicted, whatever the bound.
    auto b0 = cache.acquire(bufs[0].data(), bufs[0].size(), 1);
    auto b3 = cache.acquire(bufs[3].data(), bufs[3].size(), 1);
    REQUIRE((b0.ok() && b3.ok()));
    CHECK(reg.live.size() == 3);
    for (auto* r : {*recent, *b0, *b3}) cache.release(r);
    CHECK(reg.live.size() == 2);
    // Kept regions (a link's FIFOs) are not counted against the bound.
    REQUIRE(cache.keep(bufs[1].data(), bufs[1].size(), 1).ok());
    CHECK(reg.live.size() == 3);
  }
  CHECK(reg.live.empty());  // the cache deregisters everything when it goes
}

TEST_CASE("registration cache: a buffer freed and mapped again at the same address gets a new registration") {
  if (!PageIdentity::available()) {
    MESSAGE("page frames are hidden from this process (no CAP_SYS_ADMIN): nothing is cached, nothing to check");
    return;
  }
  Registrar reg;
  RegistrationCache cache = reg.make(8, true);
  const size_t n = 1 << 20;
  char* p = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 1, n);
  auto first = cache.acquire(p, n, 1);
  REQUIRE(first.ok());
  void* old = (*first)->handle;
  cache.release(*first);
  auto hit = cache.acquire(p + 4096, n / 2, 1);
  REQUIRE(hit.ok());
  CHECK((*hit)->handle == old);
  cache.release(*hit);
  // A device registration pins the old pages, so a new mapping never gets them: moving the old
  // mapping away (its pages stay alive) and mapping afresh at the address does the same here.
  void* away = mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(away != MAP_FAILED);
  void* moved = mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, away);
  REQUIRE(moved == away);
  REQUIRE(mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p);
  std::memset(p, 2, n);
  auto fresh = cache.acquire(p, n, 1);
  REQUIRE(fresh.ok());
  CHECK((*fresh)->handle != old);
  CHECK(cache.stale() == 1);
  CHECK(reg.live.size() == 1);  // the stale region was deregistered
  cache.release(*fresh);
  munmap(p, n);
  munmap(moved, n);
}

TEST_CASE("registration cache: a registration the device refuses is an error naming why; nothing is left") {
  Registrar reg;
  reg.refuse_from = 1 << 20;
  RegistrationCache cache = reg.make(4, PageIdentity::available());
  std::vector<char> big(1 << 20);
  auto r = cache.acquire(big.data(), big.size(), 1);
  REQUIRE(!r.ok());
  CHECK(r.status().message().find(std::strerror(ENOMEM)) != std::string::npos);
  CHECK(cache.live() == 0);
}

TEST_CASE("registration cache: regions are cached by memory kind; device memory is not checked by its pages") {
  Registrar reg;
  RegistrationCache cache = reg.make(4, PageIdentity::available());
  std::vector<char> buf(1 << 16, 1);
  auto dev = cache.acquire(buf.data(), buf.size(), 1, MemoryKind::kDevice);
  REQUIRE(dev.ok());
  auto host = cache.acquire(buf.data(), buf.size(), 1);  // the same range as host memory: its own region
  REQUIRE(host.ok());
  CHECK(*host != *dev);
  cache.release(*host);
  cache.release(*dev);
  auto again = cache.acquire(buf.data(), buf.size(), 1, MemoryKind::kDevice);  // cached even unchecked
  REQUIRE(again.ok());
  CHECK(cache.registrations() == 2);
  cache.release(*again);
}
