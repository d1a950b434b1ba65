// The memory of a peer on this host, for the single-copy paths (algo/single_copy.hpp): its
// buffers reached by plain loads and stores where this process maps them (a thread of this
// process; a dcomm::mem_alloc block of another), else by cross-memory attach. Only used when
// the communicator found cross-memory attach working between every pair. Errors name the peer.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/reduce/copy.hpp"
#include "dcomm/transport/cma.hpp"
#include "dcomm/transport/mem_alloc.hpp"

DCOMM_NAMESPACE_BEGIN

// Where `bytes` at `p` lie when they are in one of this process's dcomm::mem_alloc blocks: what
// a peer passes back to view() to reach them through a mapping. Empty (fd < 0) otherwise.
inline RegionRef local_region(const void* p, size_t bytes) { return detail::RegionRegistry::instance().find(p, bytes); }

// A block of this rank's memory that its peers on the host map (dcomm::mem_alloc): where a
// single-copy collective stages a buffer that is not itself from mem_alloc, so the peers read it
// with plain loads instead of through the kernel. Grown on demand; freed with its owner.
class StagingBlock {
 public:
  StagingBlock() = default;
  StagingBlock(const StagingBlock&) = delete;
  StagingBlock& operator=(const StagingBlock&) = delete;
  ~StagingBlock() { release(); }

  // At least `bytes` of the block (its contents are not kept when it grows).
  Result<char*> reserve(size_t bytes) {
    if (bytes <= bytes_) return base_;
    release();
    auto p = mem_alloc(bytes);
    if (!p.ok()) return p.status();
    base_ = static_cast<char*>(*p);
    bytes_ = bytes;
    region_ = local_region(base_, bytes_);
    return base_;
  }
  const RegionRef& region() const { return region_; }
  size_t bytes() const { return bytes_; }
  void release() {
    if (base_) (void)mem_free(base_);
    base_ = nullptr;
    bytes_ = 0;
    region_ = {};
  }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  RegionRef region_;
};

class PeerMemory {
 public:
  // same_process: the peer is a thread of this process (its addresses are ours).
  PeerMemory(const PeerInfo* info, bool same_process) : info_(info), same_process_(same_process) {}

  // This process's address for `bytes` at address `remote` in the peer's memory, where plain
  // loads and stores reach it: always for a thread of this process; for a process when the
  // buffer is in one of its dcomm::mem_alloc allocations (`region`). Null otherwise.
  char* view(const RegionRef& region, uint64_t remote, size_t bytes) {
    if (same_process_) return reinterpret_cast<char*>(remote);
    if (region.fd < 0) return nullptr;
    if (!regions_) regions_ = std::make_unique<RemoteRegions>(info_->pid);
    return regions_->translate(region, remote, bytes);
  }

  bool same_process() const { return same_process_; }

  // Copies `bytes` from address `src` in the peer's memory (single-copy paths; only used when
  // the communicator found cross-memory attach working between every pair): by plain loads
  // where view() allows, else by cross-memory attach. Plain stores stream past the cache when
  // `stream` is set (the caller fences before another thread reads `dst`).
  Status read(void* dst, uint64_t src, size_t bytes, const RegionRef& region = {}, bool stream = false) {
    if (const char* v = view(region, src, bytes)) {
      if (stream) copy_bytes(dst, v, bytes, true);
      else if (bytes) std::memmove(dst, v, bytes);
      return {};
    }
    return read_process_memory(info_->pid, false, dst, src, bytes).with_context([&] {
      return detail::cat("single-copy read from ", info_->describe());
    });
  }

  // Copies `bytes` from `src` here to address `dst` in the peer's memory (same conditions).
  // Plain stores stream past the cache when `stream` is set (the caller fences before telling
  // the peer).
  Status write(uint64_t dst, const void* src, size_t bytes, const RegionRef& region = {}, bool stream = false) {
    if (char* v = view(region, dst, bytes)) {
      copy_bytes(v, src, bytes, stream);
      return {};
    }
    return write_process_memory(info_->pid, false, dst, src, bytes).with_context([&] {
      return detail::cat("single-copy write to ", info_->describe());
    });
  }

 private:
  const PeerInfo* info_;
  bool same_process_;
  std::unique_ptr<RemoteRegions> regions_;  // the peer's allocations mapped here, made on first use
};

DCOMM_NAMESPACE_END
