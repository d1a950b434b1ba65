// Reading another process's memory directly (Linux cross-memory attach, process_vm_readv):
// the single-copy path between ranks on one host. A rank publishes the address of its buffer
// and the peer copies straight from it, one copy instead of two through a FIFO, as OpenMPI's
// vader does. Containers often forbid it (seccomp, Yama's ptrace_scope), so each communicator
// probes it at start-up and uses it only when every rank can read every other.
#pragma once

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// Moves `bytes` between `local` here and `remote` in process `pid` with process_vm_readv or
// process_vm_writev (`call`), looping over partial transfers.
template <class Call>
Status cross_memory(int pid, char* local, uint64_t remote, size_t bytes, const char* what, Call call) {
  while (bytes > 0) {
    size_t n = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    iovec l{local, n};
    iovec r{reinterpret_cast<void*>(remote), n};
    ssize_t moved = call(pid, &l, 1, &r, 1, 0);
    if (moved <= 0) {
      if (moved < 0 && errno == EINTR) continue;
      return make_error(ErrorCode::kPeerFailure, what, " ", n, " bytes of pid ", pid,
                        " failed: ", moved < 0 ? std::strerror(errno) : "nothing moved");
    }
    local += moved, remote += static_cast<uint64_t>(moved), bytes -= static_cast<size_t>(moved);
  }
  return {};
}
}  // namespace detail

// Copies `bytes` from address `src` in process `pid` (or this process when same_process).
inline Status read_process_memory(int pid, bool same_process, void* dst, uint64_t src, size_t bytes) {
  if (same_process) {
    if (bytes) std::memmove(dst, reinterpret_cast<const void*>(src), bytes);
    return {};
  }
  return detail::cross_memory(pid, static_cast<char*>(dst), src, bytes, "process_vm_readv of", process_vm_readv);
}

// Copies `bytes` from `src` here to address `dst` in process `pid` (or this process).
inline Status write_process_memory(int pid, bool same_process, uint64_t dst, const void* src, size_t bytes) {
  if (same_process) {
    if (bytes) std::memmove(reinterpret_cast<void*>(dst), src, bytes);
    return {};
  }
  return detail::cross_memory(pid, const_cast<char*>(static_cast<const char*>(src)), dst, bytes, "process_vm_writev of",
                              process_vm_writev);
}

// Whether this process can read process `pid`'s probe word at `probe_addr`.
inline bool can_read_process(int pid, bool same_process, uint64_t probe_addr) {
  uint64_t word = 0;
  return read_process_memory(pid, same_process, &word, probe_addr, sizeof word).ok() && word == detail::kProbeMagic;
}

DCOMM_NAMESPACE_END
