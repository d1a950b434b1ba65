// dcomm's libnccl.so.2: the device API's host functions (nccl_device/*.h). dcomm has no NCCL
// device API (device-side communicators, GIN, multimem), so a program that needs one gets
// ncclInvalidUsage with the reason; what the host can answer truly, it answers: the teams of a
// communicator, this rank's own window pointer, and a peer's where dcomm mapped it (a window on
// device memory, between GPUs that share memory: comm/device_one_sided.cuh). The LSA team is
// this rank and the rail team the world (NCCL's load/store teams need the device API).
// docs/nccl.md lists each function and what it answers.
#include "internal.hpp"

using namespace dcomm_nccl;

namespace {

ncclResult_t no_device_api(const char* what, const char* needs) {
  return fail(ncclInvalidUsage, what, ": dcomm has no NCCL device API (", needs, ")");
}

struct Team {
  int nRanks, rank, stride;
};

// World rank of `rank` in `team`, from this rank's place in it (NCCL's rule); -1 when outside.
int world_of(const ncclComm* comm, Team team, int rank) {
  if (rank < 0 || rank >= team.nRanks) return -1;
  const int w = comm->rank() + (rank - team.rank) * team.stride;
  return w >= 0 && w < comm->size() ? w : -1;
}

bool live(const ncclComm* comm) { return comm && comm->magic == kCommMagic && comm->host; }

// A pointer into `window` for `rank`: this rank's own memory, or a peer's that dcomm mapped.
ncclResult_t window_pointer(const char* what, ncclWindow_t window, size_t offset, int rank, void** out) {
  if (!out) return fail(ncclInvalidArgument, what, ": outPtr is NULL");
  *out = nullptr;
  Window* w = live_window(window, what);
  if (!w) return ncclInvalidArgument;
  if (offset > w->size)
    return fail(ncclInvalidArgument, what, ": offset ", offset, " is past the window's ", w->size, " bytes");
  if (rank != w->comm->rank() && w->device_id >= 0) {
    *out = dcomm::adapter::device_window_peer_pointer(w->comm->device_windows, rank, w->device_id, offset);
    if (*out) return ncclSuccess;
  }
  if (rank != w->comm->rank())
    return fail(ncclInvalidUsage, what, ": rank ", rank, "'s window is not mapped on rank ", w->comm->rank(),
                w->device_id >= 0 ? " (another host, no peer access, or past its part)"
                                  : " (dcomm maps peers' windows on device memory only)");
  *out = static_cast<char*>(w->buff) + offset;
  return ncclSuccess;
}

}  // namespace

DCOMM_NCCL_API ncclResult_t pncclDevCommCreate(ncclComm_t, const void*, void*) {
  return no_device_api("ncclDevCommCreate", "device-side communicators");
}
DCOMM_NCCL_API ncclResult_t pncclDevCommDestroy(ncclComm_t, const void*) {
  return no_device_api("ncclDevCommDestroy", "device-side communicators");
}
DCOMM_NCCL_API ncclResult_t pncclLsaBarrierCreateRequirement(...) {
  return no_device_api("ncclLsaBarrierCreateRequirement", "device-side barriers");
}
DCOMM_NCCL_API ncclResult_t pncclGinBarrierCreateRequirement(...) {
  return no_device_api("ncclGinBarrierCreateRequirement", "GPU-initiated networking");
}
DCOMM_NCCL_API ncclResult_t pncclGinOutboxCreateRequirement(...) {
  return no_device_api("ncclGinOutboxCreateRequirement", "GPU-initiated networking");
}
DCOMM_NCCL_API ncclResult_t pncclGinInboxA2ACreateRequirement(...) {
  return no_device_api("ncclGinInboxA2ACreateRequirement", "GPU-initiated networking");
}
DCOMM_NCCL_API ncclResult_t pncclLLA2ACreateRequirement(...) {
  return no_device_api("ncclLLA2ACreateRequirement", "device-side all-to-all");
}
DCOMM_NCCL_API int pncclLLA2ACalcSlots(...) { return 0; }

DCOMM_NCCL_API ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t, size_t, void** outPtr) {
  if (outPtr) *outPtr = nullptr;
  return no_device_api("ncclGetLsaMultimemDevicePointer", "multimem (NVLink SHARP) mappings");
}
DCOMM_NCCL_API ncclResult_t pncclGetMultimemDevicePointer(ncclWindow_t, size_t, ...) {
  return no_device_api("ncclGetMultimemDevicePointer", "multimem (NVLink SHARP) mappings");
}
DCOMM_NCCL_API ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** outPtr) {
  return window_pointer("ncclGetPeerDevicePointer", window, offset, peer, outPtr);
}
// The LSA team is this rank alone: LSA rank 0 is this rank.
DCOMM_NCCL_API ncclResult_t pncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** outPtr) {
  Window* w = live_window(window, "ncclGetLsaDevicePointer");
  if (!w) return ncclInvalidArgument;
  return window_pointer("ncclGetLsaDevicePointer", window, offset, lsaRank == 0 ? w->comm->rank() : -1, outPtr);
}

DCOMM_NCCL_API Team pncclTeamWorld(ncclComm_t comm) {
  return live(comm) ? Team{comm->size(), comm->rank(), 1} : Team{0, -1, 0};
}
DCOMM_NCCL_API Team pncclTeamLsa(ncclComm_t comm) { return live(comm) ? Team{1, 0, 1} : Team{0, -1, 0}; }
DCOMM_NCCL_API Team pncclTeamRail(ncclComm_t comm) { return pncclTeamWorld(comm); }
DCOMM_NCCL_API int pncclTeamRankToWorld(ncclComm_t comm, Team team, int rank) {
  return live(comm) ? world_of(comm, team, rank) : -1;
}
DCOMM_NCCL_API int pncclTeamRankToLsa(ncclComm_t comm, Team team, int rank) {
  return live(comm) && world_of(comm, team, rank) == comm->rank() ? 0 : -1;
}

DCOMM_NCCL_NAME(DevCommCreate)
DCOMM_NCCL_NAME(DevCommDestroy)
DCOMM_NCCL_NAME(LsaBarrierCreateRequirement)
DCOMM_NCCL_NAME(GinBarrierCreateRequirement)
DCOMM_NCCL_NAME(GinOutboxCreateRequirement)
DCOMM_NCCL_NAME(GinInboxA2ACreateRequirement)
DCOMM_NCCL_NAME(LLA2ACreateRequirement)
DCOMM_NCCL_NAME(LLA2ACalcSlots)
DCOMM_NCCL_NAME(GetLsaMultimemDevicePointer)
DCOMM_NCCL_NAME(GetMultimemDevicePointer)
DCOMM_NCCL_NAME(GetPeerDevicePointer)
DCOMM_NCCL_NAME(GetLsaDevicePointer)
DCOMM_NCCL_NAME(TeamWorld)
DCOMM_NCCL_NAME(TeamLsa)
DCOMM_NCCL_NAME(TeamRail)
DCOMM_NCCL_NAME(TeamRankToWorld)
DCOMM_NCCL_NAME(TeamRankToLsa)
