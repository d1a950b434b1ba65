// dcomm's libnccl.so.2: one-sided put, signal and wait on windows (NCCL 2.30), over dcomm's
// - on host memory, OneSided (comm/one_sided.hpp): directly within a host, over a TCP socket of
//   its own to other hosts. A put is complete when it returns (the stream is not used, as with
//   every call on host memory); a wait returns once the signals have come, or fails at the
//   communicator's deadline naming the peer.
// - on device memory, DeviceOneSided (comm/device_one_sided.cuh): between GPUs that share
//   memory, on the stream (a copy, then a signal kernel; a wait kernel); a wait that ends at the
//   deadline is reported by ncclCommGetAsyncError.
// ncclSignal and ncclWaitSignal, which name no window, use the device signals once the comm has
// a window on device memory, the host's otherwise (docs/nccl.md).
#include "internal.hpp"

using namespace dcomm_nccl;

namespace {

// The one-sided state of a live communicator, or null (and the last error says why).
OneSided* one_sided(ncclComm* comm, const char* what) {
  if (!comm->one_sided) {
    fail(ncclInvalidUsage, what, ": no window was registered on host memory on this comm (ncclCommWindowRegister)");
    return nullptr;
  }
  return comm->one_sided.get();
}

ncclResult_t reserved_flags(unsigned int flags, const char* what) {
  return flags ? fail(ncclInvalidArgument, what, ": flags ", flags, " are reserved and must be 0") : ncclSuccess;
}

}  // namespace

DCOMM_NCCL_API ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                                           unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclPutSignal"); r != ncclSuccess) return r;
  if (ncclResult_t r = reserved_flags(flags, "ncclPutSignal"); r != ncclSuccess) return r;
  auto type = to_dcomm(datatype);
  if (!type)
    return fail(ncclInvalidArgument, "ncclPutSignal: data type ", static_cast<int>(datatype),
                " is not an ncclDataType_t");
  Window* w = live_window(peerWin, "ncclPutSignal");
  if (!w) return ncclInvalidArgument;
  if (w->comm != comm) return fail(ncclInvalidArgument, "ncclPutSignal: the window belongs to another comm");
  if (count > 0 && !localbuff) return fail(ncclInvalidArgument, "ncclPutSignal: localbuff is NULL (count ", count, ")");
  if (w->device_id >= 0) {
    InCall in(comm);
    return record(comm, dcomm::adapter::device_put(comm->device_windows, localbuff, count * size_of(*type), peer,
                                                   w->device_id, peerWinOffset, sigIdx, ctx, stream)
                            .with_context("ncclPutSignal"));
  }
  if (w->id < 0)
    return fail(ncclInvalidUsage,
                "ncclPutSignal: the window is on device memory of a comm without a GPU; dcomm puts into host memory "
                "there");
  OneSided* o = one_sided(comm, "ncclPutSignal");
  if (!o) return ncclInvalidUsage;
  InCall in(comm);
  return record(
      comm,
      o->put(localbuff, count * size_of(*type), peer, w->id, peerWinOffset, sigIdx, ctx).with_context("ncclPutSignal"));
}

DCOMM_NCCL_API ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                        cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclSignal"); r != ncclSuccess) return r;
  if (ncclResult_t r = reserved_flags(flags, "ncclSignal"); r != ncclSuccess) return r;
  if (comm->device_windows) {
    InCall in(comm);
    return record(
        comm,
        dcomm::adapter::device_signal(comm->device_windows, peer, sigIdx, ctx, stream).with_context("ncclSignal"));
  }
  OneSided* o = one_sided(comm, "ncclSignal");
  if (!o) return ncclInvalidUsage;
  InCall in(comm);
  return record(comm, o->signal(peer, sigIdx, ctx).with_context("ncclSignal"));
}

DCOMM_NCCL_API ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                            cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, "ncclWaitSignal"); r != ncclSuccess) return r;
  if (nDesc < 0 || (nDesc > 0 && !signalDescs))
    return fail(ncclInvalidArgument, "ncclWaitSignal: ", nDesc, " descriptors at ", static_cast<void*>(signalDescs));
  std::vector<OneSided::WaitFor> what;
  for (int i = 0; i < nDesc; ++i)
    what.push_back({signalDescs[i].opCnt, signalDescs[i].peer, signalDescs[i].sigIdx, signalDescs[i].ctx});
  if (comm->device_windows) {  // on the stream: it returns at once
    InCall in(comm);
    return record(
        comm, dcomm::adapter::device_wait_signals(comm->device_windows, what, stream).with_context("ncclWaitSignal"));
  }
  OneSided* o = one_sided(comm, "ncclWaitSignal");
  if (!o) return ncclInvalidUsage;
  return run_waiting(comm, "ncclWaitSignal", [o, what = std::move(what)] { return o->wait(what); });
}

DCOMM_NCCL_NAME(PutSignal)
DCOMM_NCCL_NAME(Signal)
DCOMM_NCCL_NAME(WaitSignal)
