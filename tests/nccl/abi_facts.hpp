// The values and layouts one nccl.h defines, collected by a file that includes it: the toolkit's
// (abi_toolkit.cpp) and dcomm's (abi_dcomm.cpp), compared by abi_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

struct AbiFact {
  std::string name;
  long long value;
};

// Every enum value, struct size and ncclConfig_t offset, in one order for both headers.
// clang-format off
#define DCOMM_NCCL_ABI_FACTS(F)                                                                          \
  F(ncclSuccess) F(ncclUnhandledCudaError) F(ncclSystemError) F(ncclInternalError) F(ncclInvalidArgument) \
  F(ncclInvalidUsage) F(ncclRemoteError) F(ncclInProgress) F(ncclNumResults)                              \
  F(ncclInt8) F(ncclChar) F(ncclUint8) F(ncclInt32) F(ncclInt) F(ncclUint32) F(ncclInt64) F(ncclUint64)   \
  F(ncclFloat16) F(ncclHalf) F(ncclFloat32) F(ncclFloat) F(ncclFloat64) F(ncclDouble) F(ncclBfloat16)     \
  F(ncclFloat8e4m3) F(ncclFloat8e5m2) F(ncclNumTypes)                                                     \
  F(ncclSum) F(ncclProd) F(ncclMax) F(ncclMin) F(ncclAvg) F(ncclNumOps) F(ncclMaxRedOp)                    \
  F(ncclScalarDevice) F(ncclScalarHostImmediate)                                                          \
  F(NCCL_VERSION_CODE) F(NCCL_SPLIT_NOCOLOR) F(NCCL_CONFIG_UNDEF_INT) F(NCCL_WIN_COLL_SYMMETRIC)          \
  F(NCCL_WIN_REQUIRED_ALIGNMENT) F(NCCL_CTA_POLICY_DEFAULT) F(NCCL_CTA_POLICY_EFFICIENCY)                  \
  F(NCCL_CTA_POLICY_ZERO) F(NCCL_SHRINK_ABORT)                                                            \
  F(sizeof(ncclUniqueId)) F(sizeof(ncclConfig_t)) F(sizeof(ncclSimInfo_t)) F(sizeof(ncclDataType_t))     \
  F(sizeof(ncclRedOp_t)) F(sizeof(ncclResult_t)) F(sizeof(ncclScalarResidence_t))                         \
  F(offsetof(ncclConfig_t, size)) F(offsetof(ncclConfig_t, magic)) F(offsetof(ncclConfig_t, version))     \
  F(offsetof(ncclConfig_t, blocking)) F(offsetof(ncclConfig_t, cgaClusterSize))                           \
  F(offsetof(ncclConfig_t, minCTAs)) F(offsetof(ncclConfig_t, maxCTAs)) F(offsetof(ncclConfig_t, netName)) \
  F(offsetof(ncclConfig_t, splitShare)) F(offsetof(ncclConfig_t, trafficClass))                           \
  F(offsetof(ncclConfig_t, commName)) F(offsetof(ncclConfig_t, collnetEnable))                            \
  F(offsetof(ncclConfig_t, CTAPolicy)) F(offsetof(ncclConfig_t, shrinkShare))                             \
  F(offsetof(ncclConfig_t, nvlsCTAs)) F(offsetof(ncclConfig_t, nChannelsPerNetPeer))                      \
  F(offsetof(ncclConfig_t, nvlinkCentricSched)) F(offsetof(ncclSimInfo_t, estimatedTime))                 \
  F(config_initializer_magic) F(config_initializer_version) F(config_initializer_blocking)                \
  F(sim_initializer_magic)
// clang-format on

#define DCOMM_NCCL_ABI_COLLECT(x) facts.push_back({#x, static_cast<long long>(x)});

std::vector<AbiFact> toolkit_abi_facts();
std::vector<AbiFact> dcomm_abi_facts();
// The toolkit header's functions, each called through the program's link to libnccl.so.2.
std::vector<std::pair<const char*, void*>> toolkit_functions();
