// dcomm's libnccl.so.2: one-sided put, signal and wait on windows (NCCL 2.30). dcomm's windows
// have no one-sided path yet (docs/nccl.md): each call says so, and ncclCommQueryProperties
// reports hostRmaSupport false, as NCCL does where it has none.
#include "internal.hpp"

using namespace dcomm_nccl;

namespace {
ncclResult_t no_rma(const char* what) {
  return fail(ncclInvalidUsage, what,
              " is not supported by dcomm yet (one-sided window access; use ncclSend/ncclRecv)");
}
}  // namespace

DCOMM_NCCL_API ncclResult_t pncclPutSignal(const void*, size_t, ncclDataType_t, int, ncclWindow_t, size_t, int, int,
                                           unsigned int, ncclComm_t, cudaStream_t) {
  return no_rma("ncclPutSignal");
}
DCOMM_NCCL_API ncclResult_t pncclSignal(int, int, int, unsigned int, ncclComm_t, cudaStream_t) {
  return no_rma("ncclSignal");
}
DCOMM_NCCL_API ncclResult_t pncclWaitSignal(int, ncclWaitSignalDesc_t*, ncclComm_t, cudaStream_t) {
  return no_rma("ncclWaitSignal");
}

DCOMM_NCCL_NAME(PutSignal)
DCOMM_NCCL_NAME(Signal)
DCOMM_NCCL_NAME(WaitSignal)
