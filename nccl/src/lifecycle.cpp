// dcomm's libnccl.so.2: unique ids, creation (blocking, non-blocking, in a group), split,
// shrink and grow, finalize, destroy and abort, and what a communicator answers about itself.
#include <chrono>
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "env_map.hpp"
#include "internal.hpp"

namespace dcomm_nccl {
namespace {

constexpr char kIdMagic[4] = {'d', 'c', 'n', '1'};

struct Options {
  bool blocking = true;
  std::string name;
  int rma_contexts = 1;  // numRmaCtx (2.30): the one-sided contexts
};

ncclResult_t read_config(const ncclConfig_t* config, Options* out) {
  if (!config) return ncclSuccess;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  // Callers built against older headers pass a smaller struct: read only what they passed.
  size_t size = config->size;
  if (size < offsetof(ncclConfig_t, blocking) + sizeof(int) || config->magic != 0xcafebeef)
    return fail(ncclInvalidArgument, "ncclConfig_t was not set up with NCCL_CONFIG_INITIALIZER (size ", size,
                ", magic ", config->magic, ")");
  std::memcpy(&c, config, std::min(size, sizeof c));
  if (c.blocking != NCCL_CONFIG_UNDEF_INT) {
    if (c.blocking != 0 && c.blocking != 1)
      return fail(ncclInvalidArgument, "ncclConfig_t.blocking is ", c.blocking, ", not 0 or 1");
    out->blocking = c.blocking == 1;
  }
  if (size >= offsetof(ncclConfig_t, commName) + sizeof(char*) && c.commName) out->name = c.commName;
  if (size >= offsetof(ncclConfig_t, numRmaCtx) + sizeof(int) && c.numRmaCtx != NCCL_CONFIG_UNDEF_INT) {
    if (c.numRmaCtx < 1 || c.numRmaCtx > 64)
      return fail(ncclInvalidArgument, "ncclConfig_t.numRmaCtx is ", c.numRmaCtx, ", not 1 to 64");
    out->rma_contexts = c.numRmaCtx;
  }
  return ncclSuccess;
}

int current_device() {
  int dev = -1;
  if (have_gpu() && cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = -1;
  }
  return dev;
}

// The PCI address of CUDA device `device` (the host communicator orders ranks by it), empty
// without one.
std::string pci_address(int device) {
  char bus_id[32] = {};
  if (device < 0 || cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return bus_id;
}

// After the host communicator exists: the device communicator when there is a GPU.
void finish_creation(ncclComm* c, Result<std::unique_ptr<Communicator>> host) {
  Status s = host.status();
  if (s.ok()) c->host = std::move(*host);
  if (s.ok() && c->host && c->cuda_device >= 0) {
    cudaSetDevice(c->cuda_device);
    auto d = adapter::device_create(*c->host, c->cuda_device);
    if (d.ok()) c->device = *d;
    else s = d.status();
  }
  if (s.ok() && c->host)
    DCOMM_LOG(kInfo, kSubsysInit, c->host->rank(), "NCCL API: comm ", static_cast<void*>(c), " rank ", c->host->rank(),
              " of ", c->host->size(), c->device ? " on CUDA device " : " on host memory",
              c->device ? std::to_string(c->cuda_device) : std::string());
  c->state_error = s.message();
  c->state.store(s.ok() ? ncclSuccess : to_nccl(s));
}

// A new communicator created by `create` now, in the group, or (non-blocking) in the background.
ncclResult_t start_creation(ncclComm_t* out, const Options& opt, int device,
                            std::function<Result<std::unique_ptr<Communicator>>()> create) {
  auto* c = new ncclComm;
  c->blocking = opt.blocking;
  c->name = opt.name;
  c->rma_contexts = opt.rma_contexts;
  c->cuda_device = device;
  *out = c;
  auto work = [c, create = std::move(create)] { finish_creation(c, create()); };
  if (t_group.depth > 0) {
    t_group.creations.push_back({c, std::move(work)});
    return ncclSuccess;
  }
  if (!opt.blocking) {
    c->creator = std::thread(std::move(work));
    return ncclInProgress;
  }
  work();
  if (c->state.load() != ncclSuccess) return fail(static_cast<ncclResult_t>(c->state.load()), c->state_error);
  return ncclSuccess;
}

// ncclUniqueId: the magic, the nonce, the job secret, the port and the host of the store.
void pack_id(const UniqueId& id, ncclUniqueId* out) {
  std::memset(out, 0, sizeof *out);
  char* p = out->internal;
  std::memcpy(p, kIdMagic, 4);
  std::memcpy(p + 4, &id.nonce, 8);
  std::memcpy(p + 12, id.secret.key.data(), JobSecret::kBytes);
  const uint16_t port = static_cast<uint16_t>(id.address.port);
  std::memcpy(p + 12 + JobSecret::kBytes, &port, 2);
  std::strncpy(p + 14 + JobSecret::kBytes, id.address.host.c_str(), NCCL_UNIQUE_ID_BYTES - 15 - JobSecret::kBytes);
}
constexpr size_t kIdHostBytes = NCCL_UNIQUE_ID_BYTES - 15 - JobSecret::kBytes;

Result<UniqueId> unpack_id(const ncclUniqueId& in) {
  const char* p = in.internal;
  if (std::memcmp(p, kIdMagic, 4) != 0)
    return invalid_argument("the ncclUniqueId was not made by dcomm's ncclGetUniqueId (or was not passed on whole)");
  UniqueId id;
  std::memcpy(&id.nonce, p + 4, 8);
  std::memcpy(id.secret.key.data(), p + 12, JobSecret::kBytes);
  id.secret.set = true;
  uint16_t port = 0;
  std::memcpy(&port, p + 12 + JobSecret::kBytes, 2);
  const char* host = p + 14 + JobSecret::kBytes;
  id.address = {std::string(host, strnlen(host, kIdHostBytes)), port};
  return id;
}

// Rank `rank` of a new communicator of `nranks` on this thread's CUDA device: at init, or a new
// process joining a grow (ncclCommGrow with comm NULL).
ncclResult_t start_rank(ncclComm_t* out, const Options& opt, int nranks, const UniqueId& id, int rank, bool joins) {
  const int device = current_device();
  return start_creation(
      out, opt, device,
      [rank, nranks, id, joins, bus_id = pci_address(device)]() -> Result<std::unique_ptr<Communicator>> {
        auto config = Config::from_env();
        if (!config.ok()) return config.status();
        config->device = bus_id;
        return joins ? Communicator::join(rank, nranks, id, *config) : Communicator::init(rank, nranks, id, *config);
      });
}

ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId& commId, int rank, ncclConfig_t* config,
                       const char* what) {
  if (!comm) return fail(ncclInvalidArgument, what, ": comm is NULL");
  *comm = nullptr;
  if (nranks < 1) return fail(ncclInvalidArgument, what, ": nranks ", nranks, " is not positive");
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, what, ": rank ", rank, " is out of range for ", nranks, " ranks");
  Options opt;
  if (ncclResult_t r = read_config(config, &opt); r != ncclSuccess) return r;
  auto id = unpack_id(commId);
  if (!id.ok()) return fail(id.status());
  return start_rank(comm, opt, nranks, *id, rank, /*joins=*/false);
}

}  // namespace
}  // namespace dcomm_nccl

using namespace dcomm_nccl;

__attribute__((constructor)) static void dcomm_nccl_load() {
  for (const std::string& line : map_nccl_environment()) DCOMM_LOG(kInfo, kSubsysInit, -1, "NCCL API: ", line);
}

DCOMM_NCCL_API ncclResult_t pncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclGetUniqueId(ncclUniqueId* out) {
  if (!out) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  // DCOMM_COMM_ID (or NCCL_COMM_ID): the store at that address.
  const std::string at = dcomm::env_or("DCOMM_COMM_ID");
  auto id = [&]() -> dcomm::Result<dcomm::UniqueId> {
    if (at.empty()) return dcomm::UniqueId::create();
    auto addr = dcomm::parse_address(at);
    if (!addr.ok()) return addr.status().with_context("DCOMM_COMM_ID (or NCCL_COMM_ID)");
    return dcomm::UniqueId::create_at(*addr);
  }();
  if (!id.ok()) return fail(id.status().with_context("ncclGetUniqueId"));
  if (id->address.host.size() >= kIdHostBytes)
    return fail(ncclInternalError, "ncclGetUniqueId: the host name '", id->address.host,
                "' does not fit an ncclUniqueId");
  pack_id(*id, out);
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                    ncclConfig_t* config) {
  return init_rank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
}

DCOMM_NCCL_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
}

DCOMM_NCCL_API ncclResult_t pncclCommInitRankScalable(ncclComm_t* comm, int nranks, int myrank, int nId,
                                                      ncclUniqueId* commIds, ncclConfig_t* config) {
  if (nId < 1 || !commIds) return fail(ncclInvalidArgument, "ncclCommInitRankScalable: nId ", nId, " ids at ", commIds);
  return init_rank(comm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");  // one store serves all
}

DCOMM_NCCL_API ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms) return fail(ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
  if (ndev < 1) return fail(ncclInvalidArgument, "ncclCommInitAll: ndev ", ndev, " is not positive");
  auto local = dcomm::Communicator::create_local(ndev);
  if (!local.ok()) return fail(local.status().with_context("ncclCommInitAll"));
  std::vector<ncclComm*> made;
  auto set = std::make_shared<LocalSet>();
  set->size = static_cast<size_t>(ndev);
  for (int i = 0; i < ndev; ++i) {
    auto* c = new ncclComm;
    c->local_set = set;
    c->cuda_device = have_gpu() ? (devlist ? devlist[i] : i) : -1;
    made.push_back(c);
  }
  run_each(made.size(), [&](size_t i) {
    finish_creation(made[i], std::move((*local)[i]));
    return ncclSuccess;
  });
  for (int i = 0; i < ndev; ++i) comms[i] = made[static_cast<size_t>(i)];
  for (ncclComm* c : made)
    if (c->state.load() != ncclSuccess)
      return fail(static_cast<ncclResult_t>(c->state.load()), "ncclCommInitAll: ", c->state_error);
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                           ncclConfig_t* config) {
  if (ncclResult_t r = usable(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: color ", color, " is negative and not NCCL_SPLIT_NOCOLOR");
  Options opt;
  opt.blocking = comm->blocking;
  opt.rma_contexts = comm->rma_contexts;
  if (ncclResult_t r = read_config(config, &opt); r != ncclSuccess) return r;
  auto split = [comm, color, key] {
    InCall in(comm);
    return comm->host->split(color == NCCL_SPLIT_NOCOLOR ? -1 : color, key);
  };
  if (color != NCCL_SPLIT_NOCOLOR) return start_creation(newcomm, opt, comm->cuda_device, std::move(split));
  // Ranks with no color take part in the split too and get NULL (at the group's end when
  // grouped; at once otherwise, also for a non-blocking comm).
  *newcomm = nullptr;
  if (t_group.depth > 0) {
    ncclComm* none = t_group.discarded.emplace_back(new ncclComm).get();
    t_group.creations.push_back({none, [none, split] { finish_creation(none, split()); }});
    return ncclSuccess;
  }
  dcomm::Status s = split().status();
  return s.ok() ? ncclSuccess : record(comm, s);
}

// Revoke, shrink and grow: the host communicator's (comm/membership.hpp); a device communicator
// is made over the new one as at init, and the parent's kernels end through its watchdog.
namespace {
Options options_of(ncclComm* comm) {
  Options opt;
  opt.blocking = comm->blocking;
  opt.rma_contexts = comm->rma_contexts;
  return opt;
}
}  // namespace

DCOMM_NCCL_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (ncclResult_t r = usable(comm, "ncclCommRevoke"); r != ncclSuccess) return r;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(ncclInvalidArgument, "ncclCommRevoke: revokeFlags ", revokeFlags, " is not NCCL_REVOKE_DEFAULT (0)");
  comm->host->revoke();
  comm->revoked.store(true);
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (ncclResult_t r = usable(comm, "ncclCommShrink"); r != ncclSuccess) return r;
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommShrink: newcomm is NULL");
  *newcomm = nullptr;
  if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
    return fail(ncclInvalidArgument, "ncclCommShrink: ", excludeRanksCount, " excluded ranks at ",
                static_cast<void*>(excludeRanksList));
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return fail(ncclInvalidArgument, "ncclCommShrink: shrinkFlags ", shrinkFlags,
                " is neither NCCL_SHRINK_DEFAULT nor NCCL_SHRINK_ABORT");
  Options opt = options_of(comm);
  if (ncclResult_t r = read_config(config, &opt); r != ncclSuccess) return r;
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  const ShrinkMode mode = shrinkFlags == NCCL_SHRINK_ABORT ? ShrinkMode::kAbort : ShrinkMode::kDefault;
  // Default mode: a call still running on this rank (a non-blocking comm's) is refused at once.
  if (mode == ShrinkMode::kDefault && comm->in_calls.load() > 0)
    return fail(ncclInvalidUsage,
                "ncclCommShrink: a call is still in flight on this comm; wait for it, or pass "
                "NCCL_SHRINK_ABORT");
  return start_creation(newcomm, opt, comm->cuda_device, [comm, excluded, mode] {
    InCall in(comm);
    return comm->host->shrink(excluded, mode);
  });
}

DCOMM_NCCL_API ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  if (ncclResult_t r = usable(comm, "ncclCommGetUniqueId"); r != ncclSuccess) return r;
  if (!uniqueId) return fail(ncclInvalidArgument, "ncclCommGetUniqueId: uniqueId is NULL");
  auto id = comm->host->grow_id();
  if (!id.ok()) return record(comm, id.status().with_context("ncclCommGetUniqueId"));
  pack_id(*id, uniqueId);
  return ncclSuccess;
}

// Existing ranks: comm, rank -1, the id on the one that made it (NULL elsewhere). New ranks: comm
// NULL, the id, their rank (from the old size up).
DCOMM_NCCL_API ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                                          ncclComm_t* newcomm, ncclConfig_t* config) {
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommGrow: newcomm is NULL");
  *newcomm = nullptr;
  std::optional<UniqueId> id;
  if (uniqueId) {
    auto unpacked = unpack_id(*uniqueId);
    if (!unpacked.ok()) return fail(unpacked.status().with_context("ncclCommGrow"));
    id = *unpacked;
  }
  if (comm) {
    if (ncclResult_t r = usable(comm, "ncclCommGrow"); r != ncclSuccess) return r;
    if (rank != -1)
      return fail(ncclInvalidArgument, "ncclCommGrow: rank ", rank, " on an existing rank (pass -1: it keeps its own)");
    Options opt = options_of(comm);
    if (ncclResult_t r = read_config(config, &opt); r != ncclSuccess) return r;
    return start_creation(newcomm, opt, comm->cuda_device, [comm, nRanks, id] {
      InCall in(comm);
      return comm->host->grow(nRanks, id ? &*id : nullptr);
    });
  }
  if (!id) return fail(ncclInvalidArgument, "ncclCommGrow: a new rank (comm NULL) needs the uniqueId");
  if (rank < 0 || rank >= nRanks)
    return fail(ncclInvalidArgument, "ncclCommGrow: rank ", rank, " is out of range for ", nRanks, " ranks");
  Options opt;
  if (ncclResult_t r = read_config(config, &opt); r != ncclSuccess) return r;
  return start_rank(newcomm, opt, nRanks, *id, rank, /*joins=*/true);
}

DCOMM_NCCL_API ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = usable(comm, "ncclCommFinalize"); r != ncclSuccess) return r;
  // Host calls are complete when they return; device ones are ordered on their streams, and
  // the device communicator's destruction waits for them.
  if (comm->device) return record(comm, dcomm::adapter::device_error(comm->device));
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (ncclResult_t r = check_comm(comm, "ncclCommDestroy"); r != ncclSuccess) return r;
  if (comm->local_set && comm->device) {
    std::vector<ncclComm*> all;
    {
      std::lock_guard<std::mutex> lock(comm->local_set->mu);
      comm->local_set->destroyed.push_back(comm);
      if (comm->local_set->destroyed.size() < comm->local_set->size) return ncclSuccess;
      all.swap(comm->local_set->destroyed);
    }
    run_each(all.size(), [&](size_t i) {
      delete all[i];
      return ncclSuccess;
    });
    return ncclSuccess;
  }
  delete comm;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (ncclResult_t r = check_comm(comm, "ncclCommAbort"); r != ncclSuccess) return r;
  // Inside a group it takes effect now, and the group forgets this communicator's calls.
  for (auto it = t_group.calls.begin(); it != t_group.calls.end();)
    it = it->first == comm ? t_group.calls.erase(it) : it + 1;
  ready(comm);
  if (comm->device) dcomm::adapter::device_abort(comm->device, "ncclCommAbort");
  else if (comm->host && !comm->host->aborted()) comm->host->abort("ncclCommAbort");
  // Calls still running on other threads now fail fast; wait for them to leave.
  while (comm->in_calls.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  delete comm;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (ncclResult_t r = usable(comm, "ncclCommCount"); r != ncclSuccess) return r;
  if (!count) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
  *count = comm->size();
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = usable(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
  *rank = comm->rank();
  return ncclSuccess;
}

// -1 for a communicator of a process without a GPU (host memory only).

DCOMM_NCCL_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (ncclResult_t r = usable(comm, "ncclCommCuDevice"); r != ncclSuccess) return r;
  if (!device) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
  *device = comm->cuda_device;
  return ncclSuccess;
}

// Device memory from cudaMalloc; without a GPU, host memory from dcomm's mem_alloc (which the
// host path reads in a single copy between local ranks).

// ncclCommQueryProperties (nccl_device/core.h): its struct, as NCCL 2.30 lays it out; a caller
// built against another header passes its own size, and only that much is written.
namespace {
struct Properties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType;  // ncclGinType_t: NCCL_GIN_TYPE_NONE (0)
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
};
static_assert(sizeof(Properties) == 56 && offsetof(Properties, hostRmaSupport) == 44);
}  // namespace

DCOMM_NCCL_API ncclResult_t pncclCommQueryProperties(ncclComm_t comm, void* props) {
  if (ncclResult_t r = usable(comm, "ncclCommQueryProperties"); r != ncclSuccess) return r;
  auto* in = static_cast<Properties*>(props);
  if (!in) return fail(ncclInvalidArgument, "ncclCommQueryProperties: props is NULL");
  if (in->magic != NCCL_API_MAGIC || in->size < offsetof(Properties, rank))
    return fail(ncclInvalidArgument, "ncclCommQueryProperties: props was not set up with ",
                "NCCL_COMM_PROPERTIES_INITIALIZER (size ", in->size, ", magic ", in->magic, ")");
  Properties out{};
  out.size = in->size;
  out.magic = in->magic;
  out.version = in->version;
  out.rank = comm->rank();
  out.nRanks = comm->size();
  out.cudaDev = comm->cuda_device;
  out.nvmlDev = comm->cuda_device;
  out.nLsaTeams = 0;          // no device API: no load/store-accessible teams to hand out
  out.hostRmaSupport = true;  // ncclPutSignal/ncclSignal/ncclWaitSignal on host memory, within a host
  std::memcpy(props, &out, std::min(in->size, sizeof out));
  return ncclSuccess;
}

DCOMM_NCCL_NAME(GetVersion)
DCOMM_NCCL_NAME(GetUniqueId)
DCOMM_NCCL_NAME(CommInitRankConfig)
DCOMM_NCCL_NAME(CommInitRank)
DCOMM_NCCL_NAME(CommInitRankScalable)
DCOMM_NCCL_NAME(CommInitAll)
DCOMM_NCCL_NAME(CommSplit)
DCOMM_NCCL_NAME(CommShrink)
DCOMM_NCCL_NAME(CommRevoke)
DCOMM_NCCL_NAME(CommGetUniqueId)
DCOMM_NCCL_NAME(CommGrow)
DCOMM_NCCL_NAME(CommQueryProperties)
DCOMM_NCCL_NAME(CommFinalize)
DCOMM_NCCL_NAME(CommDestroy)
DCOMM_NCCL_NAME(CommAbort)
DCOMM_NCCL_NAME(CommCount)
DCOMM_NCCL_NAME(CommUserRank)
DCOMM_NCCL_NAME(CommCuDevice)
