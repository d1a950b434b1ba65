// dcomm's libnccl.so.2: memory, registration, windows, suspend/resume and memory statistics.
#include "internal.hpp"

using namespace dcomm_nccl;

DCOMM_NCCL_API ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = nullptr;
  if (size == 0) return ncclSuccess;
  if (have_gpu()) {
    cudaError_t e = cudaMalloc(ptr, size);
    if (e != cudaSuccess) return fail(ncclUnhandledCudaError, "ncclMemAlloc(", size, "): ", cudaGetErrorString(e));
    return ncclSuccess;
  }
  auto p = dcomm::mem_alloc(size);
  if (!p.ok()) return fail(p.status().with_context("ncclMemAlloc"));
  *ptr = *p;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  if (have_gpu()) {
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess) return fail(ncclUnhandledCudaError, "ncclMemFree: ", cudaGetErrorString(e));
    return ncclSuccess;
  }
  dcomm::Status s = dcomm::mem_free(ptr);
  return s.ok() ? ncclSuccess : fail(s.with_context("ncclMemFree"));
}

// Registration: dcomm registers what it sends on first use, so these hand out handles only.
namespace {
struct Registration {
  void* buff;
  size_t size;
};
}  // namespace

DCOMM_NCCL_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  if (ncclResult_t r = usable(comm, "ncclCommRegister"); r != ncclSuccess) return r;
  if (!handle) return fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
  *handle = new Registration{buff, size};
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  if (ncclResult_t r = check_comm(comm, "ncclCommDeregister"); r != ncclSuccess) return r;
  delete static_cast<Registration*>(handle);
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                    int winFlags) {
  if (ncclResult_t r = usable(comm, "ncclCommWindowRegister"); r != ncclSuccess) return r;
  if (!win) return fail(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  if (size > 0 && !buff) return fail(ncclInvalidArgument, "ncclCommWindowRegister: buff is NULL (size ", size, ")");
  const int known = NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING;
  if (winFlags & ~known)
    return fail(ncclInvalidArgument, "ncclCommWindowRegister: flags ", winFlags,
                " hold bits that are not NCCL_WIN_* flags");
  // Collective, as NCCL's: every rank's part is recorded for one-sided access, on host memory
  // by OneSided, on device memory by DeviceOneSided (the first window of each kind makes its
  // signals, collectively too).
  int id = -1, device_id = -1;
  if (on_device(buff) && comm->device) {
    InCall in(comm);
    if (!comm->device_windows) {
      auto d = dcomm::adapter::device_windows_create(*comm->host, comm->cuda_device, comm->rma_contexts);
      if (!d.ok()) return record(comm, d.status().with_context("ncclCommWindowRegister"));
      comm->device_windows = *d;
    }
    auto made = dcomm::adapter::device_window_register(comm->device_windows, buff, size);
    if (!made.ok()) return record(comm, made.status().with_context("ncclCommWindowRegister"));
    device_id = *made;
  } else if (!on_device(buff)) {
    InCall in(comm);
    if (!comm->one_sided) {
      auto o = OneSided::create(*comm->host, comm->rma_contexts);
      if (!o.ok()) return record(comm, o.status().with_context("ncclCommWindowRegister"));
      comm->one_sided = std::move(*o);
    }
    auto made = comm->one_sided->register_window(buff, size);
    if (!made.ok()) return record(comm, made.status().with_context("ncclCommWindowRegister"));
    id = *made;
  }
  *win = reinterpret_cast<ncclWindow_t>(
      new Window{.comm = comm, .buff = buff, .size = size, .flags = winFlags, .id = id, .device_id = device_id});
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowDeregister"); r != ncclSuccess) return r;
  Window* w = live_window(win, "ncclCommWindowDeregister");
  if (!w) return ncclInvalidArgument;
  if (w->comm != comm) return fail(ncclInvalidArgument, "ncclCommWindowDeregister: the window belongs to another comm");
  // Collective, as NCCL's and MPI_Win_free: once it returns no peer reads or writes this
  // rank's part any more, so the buffer can be freed (a peer reading it through its peer
  // pointer, or a put still arriving, would otherwise touch freed memory).
  // A comm that already failed skips it: its peers may be gone, and none of them waits.
  dcomm::Status done;
  if ((w->id >= 0 || w->device_id >= 0) && ready(comm) == ncclSuccess && comm->async.load() == ncclSuccess &&
      !comm->host->aborted()) {
    InCall in(comm);
    done = comm->host->barrier().with_context("ncclCommWindowDeregister");
  }
  if (w->id >= 0 && comm->one_sided) comm->one_sided->deregister_window(w->id);
  if (w->device_id >= 0) dcomm::adapter::device_window_deregister(comm->device_windows, w->device_id);
  w->magic = 0;
  delete w;
  return record(comm, done);
}

DCOMM_NCCL_API ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  if (ncclResult_t r = check_comm(comm, "ncclWinGetUserPtr"); r != ncclSuccess) return r;
  if (!outUserPtr) return fail(ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  Window* w = live_window(win, "ncclWinGetUserPtr");
  if (!w) return ncclInvalidArgument;
  if (w->comm != comm) return fail(ncclInvalidArgument, "ncclWinGetUserPtr: the window belongs to another comm");
  *outUserPtr = w->buff;
  return ncclSuccess;
}

// Suspend and resume: Communicator::suspend/resume, collective, and DeviceCommunicator's for a
// comm with a GPU (its FIFO arenas, device and pinned host memory). On host memory NCCL's "GPU
// memory" reads as the communicator's own: suspendable, the FIFOs of the links made on first use
// (shared memory, threads), the scratch and the device arenas; persistent, the FIFOs of the TCP,
// UCX and verbs links the proxy moves.
namespace dcomm_nccl {

// As NCCL runs a non-blocking communicator's calls that wait for peers; later calls wait for it
// (usable()).
ncclResult_t run_waiting(ncclComm* c, const char* what, std::function<Status()> op) {
  if (c->blocking) {
    InCall in(c);
    return record(c, op().with_context(what));
  }
  std::lock_guard<std::mutex> lock(c->creator_mu);
  c->background = what;
  c->state.store(ncclInProgress);
  c->creator = std::thread([c, what, op = std::move(op)] {
    InCall in(c);
    Status s = op().with_context(what);
    if (!s.ok()) {
      std::lock_guard<std::mutex> guard(c->mu);
      c->state_error = s.message();
    }
    c->state.store(s.ok() ? ncclSuccess : to_nccl(s));
  });
  return ncclInProgress;
}

}  // namespace dcomm_nccl

DCOMM_NCCL_API ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  if (ncclResult_t r = usable(comm, "ncclCommSuspend"); r != ncclSuccess) return r;
  if (flags & ~NCCL_SUSPEND_MEM)
    return fail(ncclInvalidArgument, "ncclCommSuspend: flags ", flags, " hold bits that are not NCCL_SUSPEND_*");
  if (comm->host->suspended()) return fail(ncclInvalidUsage, "ncclCommSuspend: the comm is suspended already");
  if (!(flags & NCCL_SUSPEND_MEM)) return ncclSuccess;  // nothing asked to be released
  return run_waiting(comm, "ncclCommSuspend", [comm] {
    DCOMM_RETURN_IF_ERROR(comm->device ? dcomm::adapter::device_suspend(comm->device) : dcomm::Status{});
    return comm->host->suspend();
  });
}

DCOMM_NCCL_API ncclResult_t pncclCommResume(ncclComm_t comm) {
  if (ncclResult_t r = usable(comm, "ncclCommResume"); r != ncclSuccess) return r;
  if (!comm->host->suspended()) return fail(ncclInvalidUsage, "ncclCommResume: the comm is not suspended");
  return run_waiting(comm, "ncclCommResume", [comm] {
    DCOMM_RETURN_IF_ERROR(comm->host->resume());
    return comm->device ? dcomm::adapter::device_resume(comm->device) : dcomm::Status{};
  });
}

DCOMM_NCCL_API ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  if (ncclResult_t r = usable(comm, "ncclCommMemStats"); r != ncclSuccess) return r;
  if (!value) return fail(ncclInvalidArgument, "ncclCommMemStats: value is NULL");
  MemStats m = comm->host->mem_stats();
  if (comm->device) m.suspendable += dcomm::adapter::device_arena_bytes(comm->device);
  switch (stat) {
    case ncclStatGpuMemSuspend: *value = m.suspendable; break;
    case ncclStatGpuMemSuspended: *value = m.suspended ? 1 : 0; break;
    case ncclStatGpuMemPersist: *value = m.persistent; break;
    case ncclStatGpuMemTotal: *value = m.total(); break;
    default:
      return fail(ncclInvalidArgument, "ncclCommMemStats: stat ", static_cast<int>(stat),
                  " is not an ncclCommMemStat_t");
  }
  return ncclSuccess;
}

DCOMM_NCCL_NAME(MemAlloc)
DCOMM_NCCL_NAME(MemFree)
DCOMM_NCCL_NAME(CommRegister)
DCOMM_NCCL_NAME(CommDeregister)
DCOMM_NCCL_NAME(CommWindowRegister)
DCOMM_NCCL_NAME(CommWindowDeregister)
DCOMM_NCCL_NAME(WinGetUserPtr)
DCOMM_NCCL_NAME(CommSuspend)
DCOMM_NCCL_NAME(CommResume)
DCOMM_NCCL_NAME(CommMemStats)
