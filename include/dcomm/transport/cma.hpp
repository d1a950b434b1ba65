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

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
inline constexpr uint64_t kProbeMagic = 0x64636f6d6d434d41ull;  // "dcommCMA"
// A word every process holds at a known address, for peers to test that they can read us.
inline const volatile uint64_t& cma_probe_word() {
  static const volatile uint64_t word = kProbeMagic;
  return word;
}
}  // namespace detail

// Copies `bytes` from address `src` in process `pid` (or this process when same_process).
inline Status read_process_memory(int pid, bool same_process, void* dst, uint64_t src, size_t bytes) {
  if (same_process) {
    if (bytes) std::memmove(dst, reinterpret_cast<const void*>(src), bytes);
    return {};
  }
  char* out = static_cast<char*>(dst);
  while (bytes > 0) {
    size_t n = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    iovec local{out, n};
    iovec remote{reinterpret_cast<void*>(src), n};
    ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return make_error(ErrorCode::kPeerFailure, "reading ", n, " bytes from pid ", pid,
                        " with process_vm_readv failed: ", got < 0 ? std::strerror(errno) : "nothing read");
    }
    out += got, src += static_cast<uint64_t>(got), bytes -= static_cast<size_t>(got);
  }
  return {};
}

// Copies `bytes` from `src` here to address `dst` in process `pid` (or this process).
inline Status write_process_memory(int pid, bool same_process, uint64_t dst, const void* src, size_t bytes) {
  if (same_process) {
    if (bytes) std::memmove(reinterpret_cast<void*>(dst), src, bytes);
    return {};
  }
  const char* in = static_cast<const char*>(src);
  while (bytes > 0) {
    size_t n = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    iovec local{const_cast<char*>(in), n};
    iovec remote{reinterpret_cast<void*>(dst), n};
    ssize_t put = process_vm_writev(pid, &local, 1, &remote, 1, 0);
    if (put <= 0) {
      if (put < 0 && errno == EINTR) continue;
      return make_error(ErrorCode::kPeerFailure, "writing ", n, " bytes to pid ", pid,
                        " with process_vm_writev failed: ", put < 0 ? std::strerror(errno) : "nothing written");
    }
    in += put, dst += static_cast<uint64_t>(put), bytes -= static_cast<size_t>(put);
  }
  return {};
}

// Whether this process can read process `pid`'s probe word at `probe_addr`.
inline bool can_read_process(int pid, bool same_process, uint64_t probe_addr) {
  uint64_t word = 0;
  return read_process_memory(pid, same_process, &word, probe_addr, sizeof word).ok() && word == detail::kProbeMagic;
}

DCOMM_NAMESPACE_END
