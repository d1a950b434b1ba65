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

// Every enum value, struct size and ncclConfig_t offset both NCCL 2.28 and 2.30 declare, in one
// order for every header. Four of them change with the version (kVersioned below).
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

// What NCCL 2.30 adds: result, flags, the config's new fields, the memory statistics and the
// wait descriptor.
#define DCOMM_NCCL_ABI_FACTS_2_30(F)                                                                     \
  F(ncclTimeout) F(NCCL_WIN_STRICT_ORDERING) F(NCCL_SUSPEND_MEM) F(NCCL_API_MAGIC)                        \
  F(ncclStatGpuMemSuspend) F(ncclStatGpuMemSuspended) F(ncclStatGpuMemPersist) F(ncclStatGpuMemTotal)     \
  F(sizeof(ncclCommMemStat_t)) F(sizeof(ncclWaitSignalDesc_t)) F(offsetof(ncclWaitSignalDesc_t, opCnt))  \
  F(offsetof(ncclWaitSignalDesc_t, peer)) F(offsetof(ncclWaitSignalDesc_t, sigIdx))                      \
  F(offsetof(ncclWaitSignalDesc_t, ctx)) F(offsetof(ncclConfig_t, graphUsageMode))                       \
  F(offsetof(ncclConfig_t, numRmaCtx)) F(offsetof(ncclConfig_t, maxP2pPeers))                            \
  F(offsetof(ncclConfig_t, graphStreamOrdering)) F(config_initializer_graphUsageMode)
// clang-format on

// The facts of DCOMM_NCCL_ABI_FACTS that differ between 2.28 and 2.30 by NCCL's own rules.
inline const char* const kVersioned[] = {"NCCL_VERSION_CODE", "ncclNumResults", "sizeof(ncclConfig_t)",
                                         "config_initializer_version"};

#define DCOMM_NCCL_ABI_COLLECT(x) facts.push_back({#x, static_cast<long long>(x)});

std::vector<AbiFact> toolkit_abi_facts();  // 2.28.9: DCOMM_NCCL_ABI_FACTS
std::vector<AbiFact> dcomm_abi_facts();    // DCOMM_NCCL_ABI_FACTS, then DCOMM_NCCL_ABI_FACTS_2_30
std::vector<AbiFact> newest_abi_facts();   // 2.30.7 alike; empty when its header was not found
// A header's functions, each taken through the program's link to libnccl.so.2.
std::vector<std::pair<const char*, void*>> toolkit_functions();
std::vector<std::pair<const char*, void*>> newest_functions();
