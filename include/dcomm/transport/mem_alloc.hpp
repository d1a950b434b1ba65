// Memory that peers on the same host can map: dcomm::mem_alloc / mem_free, as ncclMemAlloc.
//
// Each allocation is its own memfd (asked for transparent huge pages where the kernel offers
// them for shared memory: /sys/kernel/mm/transparent_hugepage/shmem_enabled). The file opens
// with one page of header (magic, owner's address of the user area, size, a generation number
// unique in this process) and the user area follows, page-aligned. When a collective's buffer
// lies inside an allocation, its descriptor carries the allocation's fd and generation; a
// peer process opens /proc/<pid>/fd/<fd> (the same permission cross-memory attach needs),
// maps the file once, checks the header, and from then on reads and writes that buffer with
// plain loads and stores: no system call and no page pinning per call.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

// Where a buffer lives, as a peer needs to map it: fd < 0 means "not in a dcomm allocation".
struct RegionRef {
  int32_t fd = -1;
  uint32_t reserved = 0;
  uint64_t generation = 0;
};

namespace detail {
inline constexpr uint64_t kRegionMagic = 0x64636f6d6d4d454dull;  // "dcommMEM"
inline constexpr size_t kRegionHeaderBytes = 4096;

struct RegionHeader {
  uint64_t magic;
  uint64_t owner_base;  // the owner's address of the user area
  uint64_t bytes;       // the user area's size
  uint64_t generation;
};

struct OwnedRegion {
  int fd;
  size_t bytes;  // user area
  uint64_t generation;
  void* mapping;  // header + user area
};

class RegionRegistry {
 public:
  static RegionRegistry& instance() {
    static RegionRegistry r;
    return r;
  }

  Result<void*> allocate(size_t bytes) {
    if (bytes == 0) return invalid_argument("mem_alloc: size is 0");
    const long page = sysconf(_SC_PAGESIZE);
    const size_t user = (bytes + static_cast<size_t>(page) - 1) / static_cast<size_t>(page) * static_cast<size_t>(page);
    const size_t total = kRegionHeaderBytes + user;
    int fd = memfd_create("dcomm-mem", MFD_CLOEXEC);
    if (fd < 0) return make_error(ErrorCode::kOutOfResources, "mem_alloc: memfd_create failed: ", std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      int e = errno;
      ::close(fd);
      return make_error(ErrorCode::kOutOfResources, "mem_alloc: cannot size a ", bytes,
                        "-byte region: ", std::strerror(e));
    }
    void* m = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error(ErrorCode::kOutOfResources, "mem_alloc: cannot map ", bytes, " bytes: ", std::strerror(e));
    }
    madvise(m, total, MADV_HUGEPAGE);  // a hint: ignored where shared memory gets no huge pages
    char* base = static_cast<char*>(m) + kRegionHeaderBytes;
    const uint64_t gen = next_generation_.fetch_add(1) + 1;
    *static_cast<RegionHeader*>(m) = {kRegionMagic, reinterpret_cast<uint64_t>(base), user, gen};
    std::lock_guard<std::mutex> lock(mu_);
    regions_[reinterpret_cast<uintptr_t>(base)] = {fd, user, gen, m};
    return static_cast<void*>(base);
  }

  Status release(void* p) {
    if (!p) return {};
    OwnedRegion r;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
      if (it == regions_.end())
        return invalid_argument("mem_free: ", p, " was not returned by mem_alloc (or was freed already)");
      r = it->second;
      regions_.erase(it);
    }
    munmap(r.mapping, kRegionHeaderBytes + r.bytes);
    ::close(r.fd);
    return {};
  }

  // The allocation holding [p, p + bytes) whole, if any.
  RegionRef find(const void* p, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.upper_bound(at);
    if (it == regions_.begin()) return {};
    --it;
    if (at + bytes > it->first + it->second.bytes) return {};
    return {it->second.fd, 0, it->second.generation};
  }

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, OwnedRegion> regions_;  // by the user area's address
  std::atomic<uint64_t> next_generation_{0};
};
}  // namespace detail

// Allocates `bytes` (rounded up to pages) that the single-copy collectives let peers on this
// host read and write directly. Free with mem_free. Any buffer works with every collective;
// these just move faster between processes.
inline Result<void*> mem_alloc(size_t bytes) { return detail::RegionRegistry::instance().allocate(bytes); }
inline Status mem_free(void* p) { return detail::RegionRegistry::instance().release(p); }

// A peer's allocations, mapped here (one per peer process; LRU-bounded). Not thread-safe: one
// per PeerPort, used by the thread that runs the communicator's operations.
class RemoteRegions {
 public:
  explicit RemoteRegions(int pid) : pid_(pid) {}
  RemoteRegions(const RemoteRegions&) = delete;
  RemoteRegions& operator=(const RemoteRegions&) = delete;
  ~RemoteRegions() {
    for (auto& m : maps_) munmap(m.mapping, kHeader + m.bytes);
  }

  // This process's address for the peer's `remote` .. +bytes in allocation `ref`, or null when
  // it is not in one or cannot be mapped (the caller falls back to cross-memory attach).
  char* translate(const RegionRef& ref, uint64_t remote, size_t bytes) {
    if (ref.fd < 0) return nullptr;
    Mapped* m = lookup(ref);
    if (!m || remote < m->owner_base || remote + bytes > m->owner_base + m->bytes) return nullptr;
    return m->local_base + (remote - m->owner_base);
  }

  size_t mapped() const { return maps_.size(); }

 private:
  static constexpr size_t kHeader = detail::kRegionHeaderBytes;
  static constexpr size_t kMaxMaps = 64;
  struct Mapped {
    int32_t fd;
    uint64_t generation, owner_base, bytes;
    char* local_base;
    void* mapping;
    uint64_t last_use;
  };

  Mapped* lookup(const RegionRef& ref) {
    ++clock_;
    for (auto& m : maps_)
      if (m.fd == ref.fd && m.generation == ref.generation) {
        m.last_use = clock_;
        return &m;
      }
    return map(ref);
  }

  Mapped* map(const RegionRef& ref) {
    // A mapping under the same fd with another generation is of a file the owner has freed.
    std::erase_if(maps_, [&](const Mapped& m) {
      if (m.fd == ref.fd) munmap(m.mapping, kHeader + m.bytes);
      return m.fd == ref.fd;
    });
    std::string path = "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(ref.fd);
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st {};
    void* m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > kHeader)
      m = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) return nullptr;
    const auto* h = static_cast<const detail::RegionHeader*>(m);
    if (h->magic != detail::kRegionMagic || h->generation != ref.generation ||
        h->bytes + kHeader != static_cast<uint64_t>(st.st_size)) {
      munmap(m, static_cast<size_t>(st.st_size));  // the fd now names another file: freed since
      return nullptr;
    }
    if (maps_.size() >= kMaxMaps) evict_oldest();
    DCOMM_LOG(kTrace, kSubsysTransport, -1, "mapped ", h->bytes, " bytes of mem_alloc memory of pid ", pid_, " (fd ",
              ref.fd, ")");
    maps_.push_back({ref.fd, ref.generation, h->owner_base, h->bytes, static_cast<char*>(m) + kHeader, m, clock_});
    return &maps_.back();
  }

  void evict_oldest() {
    auto oldest = maps_.begin();
    for (auto it = maps_.begin(); it != maps_.end(); ++it)
      if (it->last_use < oldest->last_use) oldest = it;
    munmap(oldest->mapping, kHeader + oldest->bytes);
    maps_.erase(oldest);
  }

  int pid_;
  uint64_t clock_ = 0;
  std::vector<Mapped> maps_;
};

DCOMM_NAMESPACE_END
