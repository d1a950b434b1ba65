// The primitives of the device path, written once for the host and the device: the same
// vocabulary as prims/primitives.hpp (send, recv, recv_reduce_send, ...), so the ring and
// chain schedules of algo/ run unchanged inside a CUDA kernel, one thread block per channel.
//
// A DeviceConn is one direction between two ranks on one channel: `nslots` slots of
// `slot_bytes` in the receiver's memory (its GPU's, reached by peer access or CUDA IPC, or
// pinned host memory both GPUs map), and two counters:
//   posted  in the receiver's memory: slots the sender has filled (the sender writes it);
//   freed   in the sender's memory:   slots the receiver has emptied (the receiver writes it).
// A sender may fill slot `step` once step - freed < nslots; a receiver may read it once
// posted > step. `step` (this side's count) lives in the owner's memory and carries over from
// one kernel to the next. Counters are written with release stores after a system-scope fence
// and read with acquire loads, so slot data is visible before its counter moves.
//
// Every wait is one thread of the team polling; it checks the abort flag and the deadline
// every kCheckEvery polls and gives up with kAborted or kTimeout, recording which peer it was
// waiting for. The CPU tests (tests/prims/test_device_prims.cpp) run these with host threads
// as ranks and SerialTeam, the kernels with a CUDA block as the team.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dcomm/core/config.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/reduce/functors.hpp"
#include "dcomm/reduce/packs.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "dcomm's device path needs sm_70 or newer (acquire/release loads and stores, __nanosleep)"
#endif
#if !defined(__CUDA_ARCH__)
#include <chrono>
#include <thread>
#endif

DCOMM_NAMESPACE_BEGIN

struct DeviceConn {
  char* slots = nullptr;
  uint64_t* posted = nullptr;
  uint64_t* freed = nullptr;
  uint64_t* step = nullptr;  // this side's own count (local memory)
  uint32_t nslots = 0;
  uint32_t slot_bytes = 0;
  int peer = -1;  // the rank at the other end, for errors
};

// What a failed device wait leaves for the host to read (host-mapped memory).
struct DeviceError {
  int code = 0;  // DeviceStatus::Code
  int peer = -1;
  int channel = -1;
  int waiting_for_data = 0;  // 1: a receive waited for data; 0: a send waited for room
};

// Per-call control: the abort flag the host sets, the deadline, where errors go.
struct DeviceControl {
  const volatile int* abort = nullptr;
  DeviceError* error = nullptr;
  uint64_t timeout_ns = 0;  // 0: no deadline
  int channel = 0;
};

struct DeviceStatus {
  enum Code : int { kOk = 0, kAborted = 1, kTimeout = 2, kBadWork = 3 };  // kBadWork: a bug in the launch
  int code = kOk;
  DCOMM_HOST_DEVICE bool ok() const { return code == kOk; }
};

namespace detail {
DCOMM_HOST_DEVICE inline uint64_t load_acquire(const uint64_t* p) {
#if defined(__CUDA_ARCH__)
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}
// The abort flag (DeviceControl::abort), which the host raises while a wait polls it: a volatile
// read of mapped host memory on the GPU; an acquire load when host threads run the device
// primitives (ThreadSanitizer saw the plain read race with the raising thread).
DCOMM_HOST_DEVICE inline bool flag_raised(const volatile int* p) {
#if defined(__CUDA_ARCH__)
  return *p != 0;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE) != 0;
#endif
}
// A release store at system scope is cumulative: it publishes every write that happens before
// it, including the other threads' slot writes ordered before it by the team's barrier, so no
// separate fence is needed (one would cost a full system fence per slot).
DCOMM_HOST_DEVICE inline void store_release(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}
DCOMM_HOST_DEVICE inline uint64_t now_ns() {
#if defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
#endif
}
DCOMM_HOST_DEVICE inline void relax() {
#if defined(__CUDA_ARCH__)
  __nanosleep(32);
#else
  std::this_thread::yield();  // host teams are the CPU tests' ranks, often more than cores
#endif
}

// Leaves failure `s` for the host (the first one only; one thread of a team calls it). Plain
// stores, no atomics: the record is in mapped host memory, where GPUs may lack atomics. The
// fields first, then the code; blocks failing together may mix their fields, and any one of
// their reports is true.
DCOMM_HOST_DEVICE inline void record_device_error(const DeviceControl& ctl, DeviceStatus s, int peer, bool for_data) {
  if (!ctl.error || s.ok()) return;
  volatile DeviceError* e = ctl.error;
  if (e->code != 0) return;
  e->peer = peer;
  e->channel = ctl.channel;
  e->waiting_for_data = for_data ? 1 : 0;
#if defined(__CUDA_ARCH__)
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
  e->code = s.code;
}

// Polls until *counter >= want (the first thread of a team); kCheckEvery polls between looks
// at the abort flag and the clock. The poll count is unsigned and wraps: a wait with no
// deadline (timeout 0) may poll for ever, and keeps checking the abort flag. `first_poll`
// lets the tests start the count near its wrap.
DCOMM_HOST_DEVICE inline DeviceStatus wait_counter(const uint64_t* counter, uint64_t want, const DeviceControl& ctl,
                                                   int peer, bool for_data, uint32_t first_poll = 0) {
  constexpr uint32_t kCheckEvery = 256;
  uint64_t deadline = 0;
  for (uint32_t polls = first_poll;; ++polls) {
    if (load_acquire(counter) >= want) return {};
    if (polls % kCheckEvery != kCheckEvery - 1) {
      relax();
      continue;
    }
    DeviceStatus s;
    if (ctl.abort && flag_raised(ctl.abort)) s.code = DeviceStatus::kAborted;
    if (ctl.timeout_ns) {
      if (!deadline) deadline = now_ns() + ctl.timeout_ns;
      else if (now_ns() > deadline) s.code = DeviceStatus::kTimeout;
    }
    if (s.ok()) continue;
    record_device_error(ctl, s, peer, for_data);
    return s;
  }
}
}  // namespace detail

// The primitives over a previous and a next rank (either may be null when unused). T is the
// element type; the op is chosen at run time per slice (one copy of the schedules per type,
// one reduction loop per type and op); divide_by > 0 finalizes kAvg where the host path does.
template <class Team, class T>
class DevicePrims {
 public:
  DCOMM_HOST_DEVICE DevicePrims(const Team& team, const DeviceConn* prev, const DeviceConn* next,
                                const DeviceControl& ctl, ReduceOp op, int divide_by)
      : team_(team), prev_(prev), next_(next), ctl_(ctl), op_(op), divide_by_(divide_by) {}

  DCOMM_HOST_DEVICE size_t slice_elems() const {
    const DeviceConn* c = next_ ? next_ : prev_;
    return c ? c->slot_bytes / sizeof(T) : 1;
  }
  DCOMM_HOST_DEVICE size_t elem_bytes() const { return sizeof(T); }
  DCOMM_HOST_DEVICE size_t chunk_align() const { return detail::kPackBytes / sizeof(T); }

  // dst <- src, on this rank (the one-rank case of every collective).
  DCOMM_HOST_DEVICE DeviceStatus local_copy(void* dst, const void* src, size_t count) {
    team_copy(team_, dst, nullptr, src, count * sizeof(T));
    team_.sync();
    return {};
  }
  // next <- src
  DCOMM_HOST_DEVICE DeviceStatus send(const void* src, size_t count) {
    return with_send([&](char* out) { team_copy(team_, out, nullptr, src, count * sizeof(T)); });
  }
  // dst <- prev
  DCOMM_HOST_DEVICE DeviceStatus recv(void* dst, size_t count) {
    return with_recv([&](const char* in) {
      team_copy(team_, dst, nullptr, in, count * sizeof(T));
      return DeviceStatus{};
    });
  }
  // next <- prev (+) local
  DCOMM_HOST_DEVICE DeviceStatus recv_reduce_send(const void* local, size_t count) {
    return with_recv(
        [&](const char* in) { return with_send([&](char* out) { reduce(out, nullptr, in, local, count, 0); }); });
  }
  // dst <- prev (+) local, finalized
  DCOMM_HOST_DEVICE DeviceStatus recv_reduce_copy(const void* local, void* dst, size_t count) {
    return with_recv([&](const char* in) {
      reduce(dst, nullptr, in, local, count, divide_by_);
      return DeviceStatus{};
    });
  }
  // dst <- prev (+) local, finalized; next <- the same (one pass, two stores)
  DCOMM_HOST_DEVICE DeviceStatus recv_reduce_copy_send(const void* local, void* dst, size_t count) {
    return with_recv(
        [&](const char* in) { return with_send([&](char* out) { reduce(dst, out, in, local, count, divide_by_); }); });
  }
  // dst <- prev; next <- prev
  DCOMM_HOST_DEVICE DeviceStatus recv_copy_send(void* dst, size_t count) {
    return with_recv([&](const char* in) {
      return with_send([&](char* out) { team_copy(team_, dst, out, in, count * sizeof(T)); });
    });
  }
  // dst <- src (skipped in place); next <- src
  DCOMM_HOST_DEVICE DeviceStatus copy_send(const void* src, void* dst, size_t count) {
    return with_send([&](char* out) {
      team_copy(team_, dst == src ? out : dst, dst == src ? nullptr : out, src, count * sizeof(T));
    });
  }

 private:
  DCOMM_HOST_DEVICE void reduce(void* dst, void* dst2, const void* a, const void* b, size_t count, int divide_by) {
    dispatch_op(op_, [&]<class Op>() {
      team_reduce<T, Op>(team_, static_cast<T*>(dst), static_cast<T*>(dst2), static_cast<const T*>(a),
                         static_cast<const T*>(b), count, divide_by);
    });
  }
  // One thread waits; the team learns the outcome through a team-wide vote.
  DCOMM_HOST_DEVICE DeviceStatus team_wait(const uint64_t* counter, uint64_t want, int peer, bool for_data) {
    DeviceStatus s;
    if (team_.thread() == 0) s = detail::wait_counter(counter, want, ctl_, peer, for_data);
    s.code = team_.broadcast(s.code);
    return s;
  }
  template <class Fill>
  DCOMM_HOST_DEVICE DeviceStatus with_send(Fill fill) {
    const DeviceConn& c = *next_;
    const uint64_t step = *c.step;  // every thread reads it; thread 0 moves it after the sync
    DeviceStatus s = team_wait(c.freed, step + 1 > c.nslots ? step + 1 - c.nslots : 0, c.peer, false);
    if (!s.ok()) return s;
    fill(c.slots + (step % c.nslots) * c.slot_bytes);
    team_.sync();
    if (team_.thread() == 0) {
      detail::store_release(c.posted, step + 1);
      *c.step = step + 1;
    }
    team_.sync();
    return {};
  }
  template <class Use>
  DCOMM_HOST_DEVICE DeviceStatus with_recv(Use use) {
    const DeviceConn& c = *prev_;
    const uint64_t step = *c.step;
    DeviceStatus s = team_wait(c.posted, step + 1, c.peer, true);
    if (!s.ok()) return s;
    s = use(c.slots + (step % c.nslots) * c.slot_bytes);
    team_.sync();
    if (team_.thread() == 0 && s.ok()) {
      detail::store_release(c.freed, step + 1);
      *c.step = step + 1;
    }
    team_.sync();
    return s;
  }

  Team team_;
  const DeviceConn* prev_;
  const DeviceConn* next_;
  DeviceControl ctl_;
  ReduceOp op_;
  int divide_by_;
};

DCOMM_NAMESPACE_END
