// Memory the GPUs of one host share, for the device path's FIFOs (comm/device_comm.cuh). It
// hands out addresses a kernel can use and moves no bytes itself:
//   - an arena of device memory, which another GPU reaches through peer access (NVLink or
//     PCIe): the plain pointer for a rank of this process, a CUDA IPC handle for another;
//   - when some pair has no peer access, an arena of pinned host memory that every GPU maps:
//     a shared-memory file created as transport/shm.hpp creates its FIFOs (in DCOMM_SHM_DIR,
//     its pages reserved, so a full /dev/shm fails set-up instead of raising SIGBUS later),
//     registered with CUDA as mapped memory.
// A rank publishes where its arenas are (ArenaAddress, a plain struct swapped as bytes) and
// each peer maps them from that. Teardown takes two steps, because CUDA leaves freeing memory
// that another process still maps undefined: close_peers() on every rank, then, once all have
// (the ranks meet in between), release().
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/shm.hpp"

DCOMM_NAMESPACE_BEGIN

// Where one rank's arenas are, as its peers need to know.
struct ArenaAddress {
  int has_host = 0;
  cudaIpcMemHandle_t ipc{};  // set when some peer is in another process
  uint64_t device = 0;       // the device arena's pointer value, for ranks of the same process
  uint64_t host = 0;         // the host arena's pointer value in its owner's process
  char shm_path[256] = {};   // the host arena's file
};

// An arena as this rank's kernels address it (host: null when the owner has none).
struct ArenaView {
  char* device = nullptr;
  char* host = nullptr;
};

// The CUDA device with PCI bus id `bus_id` (-1 when this process cannot see it), and whether
// `device` can reach its memory through peer access.
inline int device_by_bus_id(const char* bus_id, int device, bool* can_access) {
  int other = -1, can = 0;
  *can_access = false;
  if (cudaDeviceGetByPCIBusId(&other, bus_id) != cudaSuccess) other = -1;
  else if (other != device && cudaDeviceCanAccessPeer(&can, device, other) == cudaSuccess) *can_access = can != 0;
  cudaGetLastError();  // neither answer is an error of the caller's
  return other;
}

// Peer access from the current device to `peer_device` (nothing when it is already on).
inline Status enable_peer_access(int peer_device) {
  cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
  cudaGetLastError();
  if (e == cudaErrorPeerAccessAlreadyEnabled) return {};
  return cuda_status(e, detail::cat("cudaDeviceEnablePeerAccess to CUDA device ", peer_device));
}

class CudaArenas {
 public:
  // mismatch: what to check when a peer's host arena has another size than this rank's.
  explicit CudaArenas(const char* mismatch) : mismatch_(mismatch) {}
  ~CudaArenas() {
    close_peers();
    release();
  }
  CudaArenas(const CudaArenas&) = delete;
  CudaArenas& operator=(const CudaArenas&) = delete;

  // This rank's arenas of `bytes` each, zeroed, on the current device: device memory (with an
  // IPC handle when `ipc`), and pinned host memory in `shm_dir` when `host`. `*out` says where.
  // The zeroing goes on `stream`, waited for here (not the whole GPU's work).
  Status create(size_t bytes, bool ipc, bool host, const std::string& shm_dir, int rank, cudaStream_t stream,
                ArenaAddress* out) {
    bytes_ = bytes;
    *out = ArenaAddress{};
    DCOMM_RETURN_IF_ERROR(
        cuda_status(cudaMalloc(&device_, bytes), detail::cat("cudaMalloc of ", bytes, " bytes of FIFOs")));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(device_, 0, bytes, stream), "cudaMemsetAsync"));
    if (ipc) DCOMM_RETURN_IF_ERROR(cuda_status(cudaIpcGetMemHandle(&out->ipc, device_), "cudaIpcGetMemHandle"));
    out->device = reinterpret_cast<uintptr_t>(device_);
    if (host) {
      detail::sweep_dead_shm(shm_dir);
      const std::string path = detail::cat(shm_dir, "/", detail::unique_shm_name(detail::cat("cuda", rank)));
      if (path.size() >= sizeof out->shm_path)
        return invalid_argument("DCOMM_SHM_DIR '", shm_dir, "' is too long for the device arena's file name");
      auto m = detail::create_shm_region(path, bytes, shm_dir, "the device path's pinned host FIFOs");
      if (!m.ok()) return m.status();
      DCOMM_RETURN_IF_ERROR(register_host(m->get(), path));
      host_ = m->get();
      host_map_.emplace(std::move(*m));  // zeroed: a fresh file
      std::snprintf(out->shm_path, sizeof out->shm_path, "%s", path.c_str());
      out->has_host = 1;
      out->host = reinterpret_cast<uintptr_t>(host_);
    }
    return cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize (arena zeroing)");
  }

  // Bytes of this rank's own arenas now (device and pinned host memory): what release() frees.
  size_t held_bytes() const { return (device_ ? bytes_ : 0) + (host_ ? bytes_ : 0); }
  // This rank's own arenas.
  Result<ArenaView> own() const {
    ArenaView v{static_cast<char*>(device_), nullptr};
    if (host_) DCOMM_RETURN_IF_ERROR(device_pointer(host_, &v.host));
    return v;
  }

  // Peer `peer`'s arenas, from the address it published: the same pointers when it is in this
  // process (its host arena is registered here already), else through its IPC handle and a
  // mapping of its host arena's file.
  Result<ArenaView> map_peer(const ArenaAddress& a, bool same_process, int peer) {
    ArenaView v;
    if (same_process) {
      v.device = reinterpret_cast<char*>(static_cast<uintptr_t>(a.device));
      if (a.has_host)
        DCOMM_RETURN_IF_ERROR(device_pointer(reinterpret_cast<void*>(static_cast<uintptr_t>(a.host)), &v.host));
      return v;
    }
    void* p = nullptr;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaIpcOpenMemHandle(&p, a.ipc, cudaIpcMemLazyEnablePeerAccess),
                                      detail::cat("cudaIpcOpenMemHandle of rank ", peer, "'s FIFOs")));
    opened_ipc_.push_back(p);
    v.device = static_cast<char*>(p);
    if (a.has_host) {
      auto m = detail::open_shm_region(a.shm_path, bytes_, /*unlink_now=*/false, "device-path host arena", mismatch_);
      if (!m.ok()) return m.status();
      DCOMM_RETURN_IF_ERROR(register_host(m->get(), a.shm_path));
      void* hp = m->get();
      peer_hosts_.push_back(std::move(*m));
      DCOMM_RETURN_IF_ERROR(device_pointer(hp, &v.host));
    }
    return v;
  }

  // Ends this rank's mappings of its peers' arenas.
  void close_peers() {
    for (void* p : opened_ipc_) cudaIpcCloseMemHandle(p);
    opened_ipc_.clear();
    for (auto& m : peer_hosts_) cudaHostUnregister(m.get());
    peer_hosts_.clear();
  }
  // Frees this rank's arenas (its host arena's file goes with them).
  void release() {
    if (host_) cudaHostUnregister(host_);
    host_ = nullptr;
    host_map_.reset();
    if (device_) cudaFree(device_);
    device_ = nullptr;
  }

 private:
  // Mapped and pinned for every device (a peer's arena too: its GPU may differ from the owner's).
  Status register_host(void* p, const std::string& path) const {
    return cuda_status(cudaHostRegister(p, bytes_, cudaHostRegisterMapped | cudaHostRegisterPortable),
                       detail::cat("cudaHostRegister of ", path));
  }
  static Status device_pointer(void* host, char** out) {
    return cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(out), host, 0), "cudaHostGetDevicePointer");
  }

  const char* mismatch_;
  size_t bytes_ = 0;
  void* device_ = nullptr;
  void* host_ = nullptr;                        // this rank's host arena (registered)
  std::optional<detail::ShmMapping> host_map_;  // its mapping; removes its file
  std::vector<void*> opened_ipc_;               // the peers' device arenas, in other processes
  std::vector<detail::ShmMapping> peer_hosts_;  // the peers' host arenas mapped here
};

DCOMM_NAMESPACE_END
