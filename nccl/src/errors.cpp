// dcomm's libnccl.so.2: results and errors. A failing call names what is wrong in this
// thread's last error (ncclGetLastError); a failure once data may have moved ends the
// communicator, and ncclCommGetAsyncError reports it.
#include "internal.hpp"

namespace dcomm_nccl {

thread_local std::string t_last_error;

ncclResult_t to_nccl(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kOk: return ncclSuccess;
    case ErrorCode::kInvalidArgument: return ncclInvalidArgument;
    case ErrorCode::kUnsupported: return ncclInvalidUsage;
    case ErrorCode::kTimeout:
    case ErrorCode::kPeerFailure:
    case ErrorCode::kAborted: return ncclRemoteError;
    case ErrorCode::kInternal: return ncclInternalError;
    case ErrorCode::kSystemError:
    case ErrorCode::kOutOfResources:
      return s.message().find("cuda") != std::string::npos || s.message().find("CUDA") != std::string::npos
                 ? ncclUnhandledCudaError
                 : ncclSystemError;
  }
  return ncclInternalError;
}

ncclResult_t fail(const Status& s) {
  t_last_error = s.message();
  DCOMM_LOG(kWarn, kSubsysColl, -1, "NCCL API: ", s.message());
  return to_nccl(s);
}

}  // namespace dcomm_nccl

using namespace dcomm_nccl;

DCOMM_NCCL_API const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the dcomm developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "operation timed out";
    default: return "unknown result code";
  }
}

DCOMM_NCCL_API const char* pncclGetLastError(ncclComm_t comm) {
  if (t_last_error.empty() && comm && comm->magic == kCommMagic) {
    std::lock_guard<std::mutex> lock(comm->mu);
    return comm->state_error.c_str();
  }
  return t_last_error.c_str();
}

DCOMM_NCCL_API void pncclResetDebugInit() {}
DCOMM_NCCL_API void ncclResetDebugInitInternal() {}

DCOMM_NCCL_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (ncclResult_t r = check_comm(comm, "ncclCommGetAsyncError"); r != ncclSuccess) return r;
  if (!asyncError) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  const int state = comm->state.load();
  if (state == ncclSuccess && comm->revoked.load()) {  // quiescent once its calls have ended (NCCL 2.30)
    *asyncError = comm->in_calls.load() > 0 ? ncclInProgress : ncclSuccess;
    return ncclSuccess;
  }
  if (state != ncclSuccess) {
    *asyncError = static_cast<ncclResult_t>(state);
    if (state != ncclInProgress) t_last_error = comm->state_error;
    return ncclSuccess;
  }
  if (comm->device && comm->async.load() == ncclSuccess) {
    dcomm::Status s = dcomm::adapter::device_error(comm->device);
    if (s.ok() && comm->device_windows) s = dcomm::adapter::device_windows_error(comm->device_windows);
    if (!s.ok()) record(comm, s);
  }
  *asyncError = static_cast<ncclResult_t>(comm->async.load());
  if (*asyncError != ncclSuccess) {
    std::lock_guard<std::mutex> lock(comm->mu);
    t_last_error = comm->state_error;
  }
  return ncclSuccess;
}

DCOMM_NCCL_NAME(GetErrorString)
DCOMM_NCCL_NAME(GetLastError)
DCOMM_NCCL_NAME(ResetDebugInit)
DCOMM_NCCL_NAME(CommGetAsyncError)
