// Memory registered with a network device (verbs memory regions), cached by address range.
//
// A registration pins the pages a buffer had when it was registered. A buffer freed and
// allocated again at the same address has new pages, and a cache that served the old region
// would let the device read or write pages the program no longer sees. So a cached region is
// checked each time it is served: the frame numbers of its pages (/proc/self/pagemap), hashed
// when it was registered, must be the same. While the region pins the old pages no new mapping
// can get them, so equal frames mean the same memory. Where pagemap hides frame numbers (a
// process without CAP_SYS_ADMIN), nothing can be checked: a user buffer's region then lives
// only while a transfer holds it (DCOMM_IB_REG_CACHE says which; docs/environment.md).
//
// Regions are held (acquire / release) while a transfer uses them; the least recently used
// regions no transfer holds are deregistered past the capacity (DCOMM_IB_REG_CACHE_ENTRIES).
// Regions kept for the cache's life (a link's FIFOs) are neither checked nor counted.
//
// The cache knows the device only through two functions, so it is written once for any
// registration API (ibv_reg_mr today; ibv_reg_dmabuf_mr for device memory later).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <mutex>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// Where a buffer lives: registration and the send paths take it, so device memory (dmabuf,
// where a GPU and an RDMA device share a host) is a new branch, not a rewrite.
enum class MemoryKind { kHost, kDevice };

// The identity of a range's pages: a hash of their frame numbers, read from /proc/self/pagemap.
class PageIdentity {
 public:
  // Whether this process can read frame numbers (pagemap shows zeros without CAP_SYS_ADMIN).
  static bool available() {
    static const bool yes = [] {
      static volatile char probe[8192];
      probe[4096] = 1;  // a page of our own, present
      return of(const_cast<char*>(probe + 4096), 1) != 0;
    }();
    return yes;
  }
  // 0 when a page is not present or the map cannot be read.
  static uint64_t of(const void* addr, size_t bytes) {
    static const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || bytes == 0) return 0;
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t first = reinterpret_cast<uintptr_t>(addr) / page;
    const uint64_t last = (reinterpret_cast<uintptr_t>(addr) + bytes - 1) / page;
    std::vector<uint64_t> entries(static_cast<size_t>(last - first + 1));
    const size_t want = entries.size() * sizeof(uint64_t);
    if (::pread(fd, entries.data(), want, static_cast<off_t>(first * sizeof(uint64_t))) != static_cast<ssize_t>(want))
      return 0;
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the frame numbers
    for (uint64_t e : entries) {
      const uint64_t pfn = e & ((uint64_t{1} << 55) - 1);
      if (!(e >> 63) || pfn == 0) return 0;
      h = (h ^ pfn) * 1099511628211ull;
    }
    return h;
  }
};

class RegistrationCache {
 public:
  // Registers [addr, addr + bytes) of memory `kind` with `access`: a handle, or null with
  // errno set.
  using RegisterFn = std::function<void*(void* addr, size_t bytes, int access, MemoryKind kind)>;
  using DeregisterFn = std::function<void(void* handle)>;
  struct Region {
    uintptr_t begin = 0, end = 0;
    int access = 0;
    MemoryKind kind = MemoryKind::kHost;
    void* handle = nullptr;
    bool keep = false;    // registered for the cache's life
    bool cached = false;  // stays registered once released (its pages can be checked)
    bool stale = false;   // its pages changed while a transfer held it: goes at release
    int refs = 0;
    uint64_t pages = 0;  // PageIdentity at registration
  };

  // `checked`: user buffers stay cached and are checked at each use (PageIdentity must be
  // available); otherwise each lives only while held.
  RegistrationCache(RegisterFn reg, DeregisterFn dereg, size_t capacity, bool checked)
      : reg_(std::move(reg)), dereg_(std::move(dereg)), capacity_(capacity), checked_(checked) {}
  ~RegistrationCache() {
    for (auto& r : regions_) dereg_(r.handle);
  }
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A region covering [addr, addr + bytes) of `kind` with at least `access`, held until
  // release(). Device memory is not checked by its pages (its registration follows the
  // driver's own invalidation, as dmabuf's does).
  Result<Region*> acquire(void* addr, size_t bytes, int access, MemoryKind kind = MemoryKind::kHost) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto a = reinterpret_cast<uintptr_t>(addr);
    for (auto it = regions_.begin(); it != regions_.end();) {
      if (it->stale || it->kind != kind || a < it->begin || a + bytes > it->end || (it->access & access) != access) {
        ++it;
        continue;
      }
      if (!it->keep && checked_ && kind == MemoryKind::kHost &&
          PageIdentity::of(reinterpret_cast<void*>(it->begin), it->end - it->begin) != it->pages) {
        ++stale_;  // freed and allocated again since: never served
        if (it->refs > 0) {
          it->stale = true, ++it;
        } else {
          dereg_(it->handle);
          it = regions_.erase(it);
        }
        continue;
      }
      regions_.splice(regions_.begin(), regions_, it);  // most recently used first
      ++hits_;
      ++regions_.front().refs;
      return &regions_.front();
    }
    void* handle = reg_(addr, bytes, access, kind);
    if (!handle) return make_error(ErrorCode::kSystemError, std::strerror(errno));
    ++registrations_;
    Region r;
    r.begin = a, r.end = a + bytes, r.access = access, r.kind = kind, r.handle = handle, r.refs = 1;
    r.cached = checked_ || kind == MemoryKind::kDevice;
    r.pages = checked_ && kind == MemoryKind::kHost ? PageIdentity::of(addr, bytes) : 0;
    regions_.push_front(r);
    evict();
    return &regions_.front();
  }
  void release(Region* r) {
    std::lock_guard<std::mutex> lock(mu_);
    if (--r->refs > 0 || r->keep) return;
    if (!r->cached || r->stale) {
      for (auto it = regions_.begin(); it != regions_.end(); ++it)
        if (&*it == r) {
          dereg_(it->handle);
          regions_.erase(it);
          break;
        }
      return;
    }
    evict();
  }
  // A region registered for the cache's life (never checked, evicted or released).
  Result<void*> keep(void* addr, size_t bytes, int access) {
    std::lock_guard<std::mutex> lock(mu_);
    void* handle = reg_(addr, bytes, access, MemoryKind::kHost);
    if (!handle) return make_error(ErrorCode::kSystemError, std::strerror(errno));
    Region r;
    r.begin = reinterpret_cast<uintptr_t>(addr), r.end = r.begin + bytes, r.access = access, r.handle = handle;
    r.keep = true;
    regions_.push_back(r);
    return handle;
  }

  bool checked() const { return checked_; }
  size_t hits() const { return hits_; }
  size_t registrations() const { return registrations_; }
  size_t stale() const { return stale_; }
  size_t evictions() const { return evictions_; }
  // Regions registered now, kept ones included.
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return regions_.size();
  }

 private:
  // Deregisters the least recently used unheld regions past the capacity.
  void evict() {
    size_t cached = 0;
    for (const auto& r : regions_) cached += r.keep ? 0 : 1;
    for (auto it = regions_.end(); cached > capacity_ && it != regions_.begin();) {
      --it;
      if (it->keep || it->refs > 0) continue;
      dereg_(it->handle);
      it = regions_.erase(it);
      --cached, ++evictions_;
    }
  }

  RegisterFn reg_;
  DeregisterFn dereg_;
  size_t capacity_;
  bool checked_;
  mutable std::mutex mu_;
  std::list<Region> regions_;
  size_t hits_ = 0, registrations_ = 0, stale_ = 0, evictions_ = 0;
};

DCOMM_NAMESPACE_END
