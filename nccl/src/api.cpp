// dcomm's libnccl.so.2: NCCL 2.28's host API over dcomm's communicators (docs/nccl.md).
//
// Every call checks its arguments first (a bad one fails the call, names what is wrong in
// ncclGetLastError, and sends nothing), then runs: on device memory through dcomm's
// DeviceCommunicator, stream-ordered; on host memory (cudaPointerGetAttributes says so, or
// there is no GPU at all) on the host communicator, complete when the call returns. Inside
// ncclGroupStart/End the calls are kept and run at the outermost end: creations concurrently,
// then each communicator's calls in order (consecutive sends and receives as one batch), one
// thread per communicator when the group spans several.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/adapter/device_glue.hpp>
#include <dcomm/dcomm.hpp>

#include "env_map.hpp"
#include "nccl.h"

#define DCOMM_NCCL_API extern "C" __attribute__((visibility("default")))

namespace dcomm_nccl {
namespace {

using namespace dcomm;
using adapter::DeviceHandle;

constexpr uint64_t kCommMagic = 0x64636f6d6d4e43ull;  // "dcommNC"
constexpr char kIdMagic[4] = {'d', 'c', 'n', '1'};

// ---- the ABI's values in dcomm's terms ----------------------------------------------------

std::optional<DataType> to_dcomm(ncclDataType_t t) {
  static constexpr DataType kTypes[] = {DataType::kInt8,     DataType::kUint8,      DataType::kInt32,
                                        DataType::kUint32,   DataType::kInt64,      DataType::kUint64,
                                        DataType::kFloat16,  DataType::kFloat32,    DataType::kFloat64,
                                        DataType::kBfloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2};
  if (static_cast<int>(t) < 0 || static_cast<int>(t) >= ncclNumTypes) return std::nullopt;
  return kTypes[t];
}

ReduceOp to_dcomm(ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return ReduceOp::kProd;
    case ncclMax: return ReduceOp::kMax;
    case ncclMin: return ReduceOp::kMin;
    case ncclAvg: return ReduceOp::kAvg;
    default: return ReduceOp::kSum;
  }
}

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

// ---- errors: the last one, per thread (ncclGetLastError) --------------------------------------

thread_local std::string t_last_error;

ncclResult_t fail(const Status& s) {
  t_last_error = s.message();
  DCOMM_LOG(kWarn, kSubsysColl, -1, "NCCL API: ", s.message());
  return to_nccl(s);
}
template <class... Args>
ncclResult_t fail(ncclResult_t r, const Args&... why) {
  t_last_error = detail::cat(why...);
  DCOMM_LOG(kWarn, kSubsysColl, -1, "NCCL API: ", t_last_error);
  return r;
}

// ---- where memory is ------------------------------------------------------------------------

bool have_gpu() {
  static const bool yes = [] {
    int n = 0;
    bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
  }();
  return yes;
}

// Device (or managed) memory; host memory, pinned or not, and null are not.
bool on_device(const void* p) {
  if (!p || !have_gpu()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// ---- the communicator -----------------------------------------------------------------------

struct PreMulSum {
  bool live = false;
  DataType type = DataType::kFloat32;
  bool on_device = false;
  const void* device_factor = nullptr;     // ncclScalarDevice: read when the call runs
  alignas(8) unsigned char value[8] = {};  // ncclScalarHostImmediate: read at creation
};

}  // namespace
}  // namespace dcomm_nccl

namespace dcomm_nccl {
// The communicators of one ncclCommInitAll: destroying one on the device path meets the others
// (device_comm.cuh), so the set is destroyed together, concurrently, when its last member is;
// the usual loop of ncclCommDestroy calls on one thread then works as with NCCL.
struct LocalSet {
  std::mutex mu;
  size_t size = 0;
  std::vector<ncclComm*> destroyed;
};
}  // namespace dcomm_nccl

struct ncclComm {
  uint64_t magic = dcomm_nccl::kCommMagic;
  std::shared_ptr<dcomm_nccl::LocalSet> local_set;
  std::unique_ptr<dcomm::Communicator> host;
  dcomm::adapter::DeviceHandle* device = nullptr;
  int cuda_device = -1;
  bool blocking = true;
  std::string name;
  // ncclInProgress while being created, then ncclSuccess or why creation failed.
  std::atomic<int> state{ncclInProgress};
  std::string state_error;
  std::thread creator;  // a non-blocking creation
  std::mutex creator_mu;
  std::atomic<int> async{ncclSuccess};  // the first failure that ended the communicator
  std::atomic<int> in_calls{0};
  std::mutex mu;
  std::vector<dcomm_nccl::PreMulSum> premul;  // op ncclNumOps + i

  ~ncclComm() {
    if (creator.joinable()) creator.join();
    if (device) dcomm::adapter::device_destroy(device);
    host.reset();
    magic = 0;
  }
  int rank() const { return host ? host->rank() : -1; }
  int size() const { return host ? host->size() : 0; }
};

namespace dcomm_nccl {
namespace {

// One call, checked, as it runs now or at the group's end.
struct Call {
  enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter, kSend, kRecv };
  Kind kind;
  const char* name;
  const void* send;
  void* recv;
  size_t count;
  DataType type;
  ReduceOp op = ReduceOp::kSum;
  std::optional<PreMulSum> premul = std::nullopt;
  int root = 0;  // root, or peer for send/recv
  cudaStream_t stream = nullptr;
  bool device = false;
  size_t elem() const { return size_of(type); }
};

// Waits for a non-blocking creation; the communicator's state then.
ncclResult_t ready(ncclComm* c) {
  std::lock_guard<std::mutex> lock(c->creator_mu);
  if (c->creator.joinable() && c->creator.get_id() != std::this_thread::get_id()) c->creator.join();
  return static_cast<ncclResult_t>(c->state.load());
}

ncclResult_t check_comm(const ncclComm* c, const char* what) {
  if (!c) return fail(ncclInvalidArgument, what, ": comm is NULL");
  if (c->magic != kCommMagic) return fail(ncclInvalidArgument, what, ": comm is not a live communicator (destroyed?)");
  return ncclSuccess;
}

ncclResult_t usable(ncclComm* c, const char* what) {
  if (ncclResult_t r = check_comm(c, what); r != ncclSuccess) return r;
  ncclResult_t r = ready(c);
  if (r == ncclInProgress) return fail(ncclInternalError, what, ": the communicator's creation did not finish");
  if (r != ncclSuccess) return fail(r, what, ": the communicator was not created: ", c->state_error);
  return ncclSuccess;
}

// A failure once data may have moved ends the communicator (ncclCommGetAsyncError says so).
ncclResult_t record(ncclComm* c, const Status& s) {
  if (s.ok()) return ncclSuccess;
  ncclResult_t r = to_nccl(s);
  if (s.code() != ErrorCode::kInvalidArgument && s.code() != ErrorCode::kUnsupported) {
    int none = ncclSuccess;
    c->async.compare_exchange_strong(none, r);
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->state_error.empty()) c->state_error = s.message();
  }
  return fail(s);
}

struct InCall {
  explicit InCall(ncclComm* c) : c_(c) { ++c_->in_calls; }
  ~InCall() { --c_->in_calls; }
  ncclComm* c_;
};

// ---- running calls --------------------------------------------------------------------------

// Sends and receives that one Call stands for (all-to-all, gather, scatter, send, recv), with
// this rank's own block copied directly.
void expand_p2p(const Call& k, int rank, int size, std::vector<P2POp>& out) {
  const size_t block = k.count * k.elem();
  auto at = [&](const void* p, int r) {
    return static_cast<char*>(const_cast<void*>(p)) + static_cast<size_t>(r) * block;
  };
  switch (k.kind) {
    case Call::kSend: out.push_back(P2POp::send(k.send, k.count, k.type, k.root)); break;
    case Call::kRecv: out.push_back(P2POp::recv(k.recv, k.count, k.type, k.root)); break;
    case Call::kAlltoAll:
      for (int r = 0; r < size; ++r) {
        out.push_back(P2POp::send(at(k.send, r), k.count, k.type, r));
        out.push_back(P2POp::recv(at(k.recv, r), k.count, k.type, r));
      }
      break;
    case Call::kGather:
      if (!(rank == k.root && k.send == at(k.recv, rank))) out.push_back(P2POp::send(k.send, k.count, k.type, k.root));
      if (rank == k.root)
        for (int r = 0; r < size; ++r)
          if (!(r == rank && k.send == at(k.recv, rank))) out.push_back(P2POp::recv(at(k.recv, r), k.count, k.type, r));
      break;
    case Call::kScatter:
      if (rank == k.root)
        for (int r = 0; r < size; ++r)
          if (!(r == rank && k.recv == at(k.send, rank))) out.push_back(P2POp::send(at(k.send, r), k.count, k.type, r));
      if (!(rank == k.root && k.recv == at(k.send, rank))) out.push_back(P2POp::recv(k.recv, k.count, k.type, k.root));
      break;
    default: break;
  }
}

bool is_p2p(Call::Kind k) { return k >= Call::kAlltoAll; }

// Elements the reduction reads from send: what PreMulSum scales first.
size_t reduce_input(const Call& k, int size) {
  return k.kind == Call::kReduceScatter ? k.count * static_cast<size_t>(size) : k.count;
}

Status run_host_collective(ncclComm* c, const Call& k) {
  Communicator& h = *c->host;
  const void* send = k.send;
  std::vector<unsigned char> scaled;
  if (k.premul) {
    const size_t n = reduce_input(k, h.size());
    scaled.resize(n * k.elem());
    unsigned char factor[8] = {};
    if (k.premul->on_device) {
      if (cudaMemcpy(factor, k.premul->device_factor, k.elem(), cudaMemcpyDeviceToHost) != cudaSuccess)
        return make_error(ErrorCode::kSystemError, k.name,
                          ": reading PreMulSum's device scalar: ", cudaGetErrorString(cudaGetLastError()));
    } else {
      std::memcpy(factor, k.premul->value, k.elem());
    }
    Status s = scale_on_host(scaled.data(), send, n, k.type, factor);
    if (!s.ok()) return s;
    send = scaled.data();
  }
  switch (k.kind) {
    case Call::kAllReduce: return h.all_reduce(send, k.recv, k.count, k.type, k.op);
    case Call::kBroadcast: return h.broadcast(send, k.recv, k.count, k.type, k.root);
    case Call::kReduce: return h.reduce(send, k.recv, k.count, k.type, k.op, k.root);
    case Call::kAllGather: return h.all_gather(send, k.recv, k.count, k.type);
    case Call::kReduceScatter: return h.reduce_scatter(send, k.recv, k.count, k.type, k.op);
    default: return make_error(ErrorCode::kInternal, k.name, " is not a collective");
  }
}

// A device call enqueued on its stream (inside the device communicator's group when grouped).
Status run_device(ncclComm* c, const Call& k) {
  DeviceHandle* d = c->device;
  void* s = k.stream;
  if (is_p2p(k.kind)) {
    std::vector<P2POp> ops;
    const void* send = k.send;
    void* copy = nullptr;
    if (k.kind == Call::kAlltoAll && k.send == k.recv && k.count > 0) {  // in place: send from a copy
      auto scratch = adapter::device_scratch(d, k.count * k.elem() * static_cast<size_t>(c->size()), s);
      if (!scratch.ok()) return scratch.status();
      copy = *scratch;
      cudaMemcpyAsync(copy, k.send, k.count * k.elem() * static_cast<size_t>(c->size()), cudaMemcpyDeviceToDevice,
                      static_cast<cudaStream_t>(s));
      send = copy;
    }
    Call from = k;
    from.send = send;
    expand_p2p(from, c->rank(), c->size(), ops);
    Status st;
    adapter::device_group_start(d);
    for (const P2POp& op : ops) {
      if (!st.ok()) break;
      st = op.kind == P2POp::Kind::kSend ? adapter::device_send(d, op.buffer, op.bytes(), op.peer, s)
                                         : adapter::device_recv(d, op.buffer, op.bytes(), op.peer, s);
    }
    Status end = adapter::device_group_end(d);  // the copy is freed once the outermost group is launched
    return st.ok() ? end : st;
  }
  const void* send = k.send;
  void* scaled = nullptr;
  if (k.premul) {
    const size_t n = reduce_input(k, c->size());
    auto scratch = adapter::device_scratch(d, n * k.elem(), s);  // freed once the group is launched
    if (!scratch.ok()) return scratch.status();
    scaled = *scratch;
    const void* factor = k.premul->on_device ? k.premul->device_factor : k.premul->value;
    Status st = adapter::device_scale(scaled, send, n, k.type, factor, k.premul->on_device, s);
    if (!st.ok()) return st;
    send = scaled;
  }
  Status st;
  switch (k.kind) {
    case Call::kAllReduce: st = adapter::device_all_reduce(d, send, k.recv, k.count, k.type, k.op, s); break;
    case Call::kBroadcast: st = adapter::device_broadcast(d, send, k.recv, k.count, k.type, k.root, s); break;
    case Call::kReduce: st = adapter::device_reduce(d, send, k.recv, k.count, k.type, k.op, k.root, s); break;
    case Call::kAllGather: st = adapter::device_all_gather(d, send, k.recv, k.count, k.type, s); break;
    case Call::kReduceScatter: st = adapter::device_reduce_scatter(d, send, k.recv, k.count, k.type, k.op, s); break;
    default: break;
  }
  return st;
}

// One communicator's calls in order: device calls inside one device group, consecutive host
// sends and receives as one batch.
ncclResult_t run_calls(ncclComm* c, const std::vector<Call>& calls) {
  if (ncclResult_t r = usable(c, "ncclGroupEnd"); r != ncclSuccess) return r;
  InCall in(c);
  bool any_device = false;
  for (const Call& k : calls) any_device = any_device || k.device;
  if (any_device) adapter::device_group_start(c->device);
  Status first;
  std::vector<P2POp> batch;
  auto flush = [&] {
    if (!batch.empty() && first.ok()) first = c->host->p2p(std::move(batch));
    batch.clear();
  };
  std::vector<std::vector<unsigned char>> copies;  // in-place all-to-all sends
  for (const Call& k : calls) {
    if (!first.ok()) break;
    if (k.device) {
      first = run_device(c, k);
    } else if (is_p2p(k.kind)) {
      Call from = k;
      if (k.kind == Call::kAlltoAll && k.send == k.recv) {
        const auto* p = static_cast<const unsigned char*>(k.send);
        copies.emplace_back(p, p + k.count * k.elem() * static_cast<size_t>(c->size()));
        from.send = copies.back().data();
      }
      expand_p2p(from, c->rank(), c->size(), batch);
    } else {
      flush();
      if (first.ok()) first = run_host_collective(c, k);
    }
  }
  flush();
  if (any_device) {
    Status end = adapter::device_group_end(c->device);
    if (first.ok()) first = end;
  }
  return record(c, first);
}

// ---- groups (per thread) ----------------------------------------------------------------------

struct Group {
  int depth = 0;
  std::vector<std::pair<ncclComm*, std::function<void()>>> creations;
  std::vector<std::unique_ptr<ncclComm>> discarded;            // NCCL_SPLIT_NOCOLOR's: no comm results
  std::vector<std::pair<ncclComm*, std::vector<Call>>> calls;  // per communicator, in first-call order
};
thread_local Group t_group;

void keep(ncclComm* c, Call k) {
  for (auto& [comm, list] : t_group.calls)
    if (comm == c) return list.push_back(std::move(k));
  t_group.calls.push_back({c, {std::move(k)}});
}

ncclResult_t submit(ncclComm* c, Call k) {
  if (t_group.depth > 0) {
    keep(c, std::move(k));
    return ncclSuccess;
  }
  return run_calls(c, {std::move(k)});
}

// Runs f(i) for i < n, each on its own thread when n > 1; the first failure.
ncclResult_t run_each(size_t n, const std::function<ncclResult_t(size_t)>& f) {
  if (n == 1) return f(0);
  std::vector<ncclResult_t> results(n, ncclSuccess);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      results[i] = f(i);
      errors[i] = t_last_error;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < n; ++i)
    if (results[i] != ncclSuccess && results[i] != ncclInProgress) {
      t_last_error = errors[i];
      return results[i];
    }
  return ncclSuccess;
}

ncclResult_t group_end() {
  Group g = std::move(t_group);
  t_group = Group{};
  ncclResult_t result = ncclSuccess;
  // Creations first, concurrently (each waits for its peers); non-blocking ones go on in the
  // background and the group says ncclInProgress.
  bool background = false;
  std::vector<std::function<void()>> now;
  for (auto& [c, create] : g.creations) {
    if (c->blocking) now.push_back(std::move(create));
    else c->creator = std::thread(std::move(create)), background = true;
  }
  run_each(now.size(), [&](size_t i) {
    now[i]();
    return ncclSuccess;
  });
  for (auto& [c, create] : g.creations)
    if (c->blocking && c->state.load() != ncclSuccess && result == ncclSuccess)
      result = fail(static_cast<ncclResult_t>(c->state.load()), "communicator creation failed: ", c->state_error);
  if (!g.calls.empty()) {
    ncclResult_t r = run_each(g.calls.size(), [&](size_t i) { return run_calls(g.calls[i].first, g.calls[i].second); });
    if (result == ncclSuccess) result = r;
  }
  if (result == ncclSuccess && background) return ncclInProgress;
  return result;
}

// ---- creation -------------------------------------------------------------------------------

struct Options {
  bool blocking = true;
  std::string name;
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
  return start_creation(comm, opt, current_device(),
                        [rank, nranks, id = *id] { return Communicator::init(rank, nranks, id); });
}

// The live PreMulSum op `op` of this communicator, or null (caller holds c->mu).
PreMulSum* live_premul(ncclComm* c, ncclRedOp_t op) {
  const size_t i = static_cast<size_t>(op) - ncclNumOps;
  return op >= ncclNumOps && i < c->premul.size() && c->premul[i].live ? &c->premul[i] : nullptr;
}

// The ops a PreMulSum or built-in id stands for on this communicator.
ncclResult_t resolve_op(ncclComm* c, ncclRedOp_t op, DataType type, Call* k) {
  if (op >= ncclSum && op < ncclNumOps) {
    k->op = to_dcomm(op);
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(c->mu);
  const PreMulSum* p = live_premul(c, op);
  if (!p)
    return fail(ncclInvalidArgument, k->name, ": reduction op ", static_cast<int>(op),
                " is not built in or a live PreMulSum of this comm");
  if (p->type != type)
    return fail(ncclInvalidArgument, k->name, ": PreMulSum op ", static_cast<int>(op), " was made for ",
                to_string(p->type), ", not ", to_string(type));
  k->op = ReduceOp::kSum;
  k->premul = *p;
  return ncclSuccess;
}

// Checks a call's arguments and runs or keeps it.
ncclResult_t call(Call::Kind kind, const char* name, const void* send, void* recv, size_t count,
                  ncclDataType_t datatype, std::optional<ncclRedOp_t> op, int root, ncclComm_t comm,
                  cudaStream_t stream) {
  if (ncclResult_t r = usable(comm, name); r != ncclSuccess) return r;
  auto type = to_dcomm(datatype);
  if (!type)
    return fail(ncclInvalidArgument, name, ": data type ", static_cast<int>(datatype), " is not an ncclDataType_t");
  Call k{.kind = kind,
         .name = name,
         .send = send,
         .recv = recv,
         .count = count,
         .type = *type,
         .root = root,
         .stream = stream};
  if (op)
    if (ncclResult_t r = resolve_op(comm, *op, *type, &k); r != ncclSuccess) return r;
  const int n = comm->size(), me = comm->rank();
  const bool p2p = kind == Call::kSend || kind == Call::kRecv;
  const bool rooted =
      kind == Call::kBroadcast || kind == Call::kReduce || kind == Call::kGather || kind == Call::kScatter;
  if ((p2p || rooted) && (root < 0 || root >= n))
    return fail(ncclInvalidArgument, name, ": ", p2p ? "peer " : "root ", root, " is out of range for ", n,
                " ranks (rank ", me, ")");
  if (count > 0) {
    const bool needs_send =
        kind != Call::kRecv && (kind != Call::kBroadcast || me == root) && (kind != Call::kScatter || me == root);
    const bool needs_recv = kind != Call::kSend && ((kind != Call::kReduce && kind != Call::kGather) || me == root);
    if (needs_send && !send)
      return fail(ncclInvalidArgument, name, ": sendbuff is NULL on rank ", me, " (count ", count, ")");
    if (needs_recv && !recv)
      return fail(ncclInvalidArgument, name, ": recvbuff is NULL on rank ", me, " (count ", count, ")");
    const bool d_send = needs_send && on_device(send), d_recv = needs_recv && on_device(recv);
    if (needs_send && needs_recv && d_send != d_recv)
      return fail(ncclInvalidArgument, name, ": sendbuff is ", d_send ? "device" : "host", " memory but recvbuff is ",
                  d_recv ? "device" : "host", " memory on rank ", me, "; both must be one kind");
    k.device = d_send || d_recv;
    if (k.device && !comm->device)
      return fail(ncclInvalidUsage, name, ": device memory on rank ", me,
                  " but this comm has no CUDA device (created with none current)");
  }
  return submit(comm, std::move(k));
}

}  // namespace
}  // namespace dcomm_nccl

// ---- the exported API: pnccl<Name>, with nccl<Name> as weak aliases ---------------------------

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

DCOMM_NCCL_API ncclResult_t pncclCommShrink(ncclComm_t, int*, int, ncclComm_t* newcomm, ncclConfig_t*, int) {
  if (newcomm) *newcomm = nullptr;
  return fail(ncclInvalidUsage, "ncclCommShrink is not supported by dcomm (split with NCCL_SPLIT_NOCOLOR instead)");
}

DCOMM_NCCL_API ncclResult_t pncclCommRevoke(ncclComm_t, int) {
  return fail(ncclInvalidUsage, "ncclCommRevoke is not supported by dcomm (use ncclCommAbort)");
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
  if (state != ncclSuccess) {
    *asyncError = static_cast<ncclResult_t>(state);
    if (state != ncclInProgress) t_last_error = comm->state_error;
    return ncclSuccess;
  }
  if (comm->device && comm->async.load() == ncclSuccess) {
    dcomm::Status s = dcomm::adapter::device_error(comm->device);
    if (!s.ok()) record(comm, s);
  }
  *asyncError = static_cast<ncclResult_t>(comm->async.load());
  if (*asyncError != ncclSuccess) {
    std::lock_guard<std::mutex> lock(comm->mu);
    t_last_error = comm->state_error;
  }
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

DCOMM_NCCL_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int) {
  if (ncclResult_t r = usable(comm, "ncclCommWindowRegister"); r != ncclSuccess) return r;
  if (!win) return fail(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  *win = reinterpret_cast<ncclWindow_t>(new Registration{buff, size});
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowDeregister"); r != ncclSuccess) return r;
  delete reinterpret_cast<Registration*>(win);
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (ncclResult_t r = usable(comm, "ncclRedOpCreatePreMulSum"); r != ncclSuccess) return r;
  auto type = to_dcomm(datatype);
  if (!op || !scalar) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op or scalar is NULL");
  if (!type)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: data type ", static_cast<int>(datatype),
                " is not an ncclDataType_t");
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence ", static_cast<int>(residence),
                " is not an ncclScalarResidence_t");
  PreMulSum p;
  p.live = true;
  p.type = *type;
  p.on_device = residence == ncclScalarDevice;
  if (p.on_device) p.device_factor = scalar;
  else std::memcpy(p.value, scalar, dcomm::size_of(*type));
  std::lock_guard<std::mutex> lock(comm->mu);
  size_t i = 0;
  while (i < comm->premul.size() && comm->premul[i].live) ++i;
  if (i == comm->premul.size()) comm->premul.push_back(p);
  else comm->premul[i] = p;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + static_cast<int>(i));
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (ncclResult_t r = usable(comm, "ncclRedOpDestroy"); r != ncclSuccess) return r;
  std::lock_guard<std::mutex> lock(comm->mu);
  PreMulSum* p = live_premul(comm, op);
  if (!p)
    return fail(ncclInvalidArgument, "ncclRedOpDestroy: op ", static_cast<int>(op),
                " is not a live PreMulSum of this comm");
  p->live = false;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kAllReduce, "ncclAllReduce", sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                           int root, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kBroadcast, "ncclBroadcast", sendbuff, recvbuff, count, datatype, std::nullopt, root, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  return call(Call::kBroadcast, "ncclBcast", buff, buff, count, datatype, std::nullopt, root, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kReduce, "ncclReduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kAllGather, "ncclAllGather", sendbuff, recvbuff, sendcount, datatype, std::nullopt, 0, comm,
              stream);
}
DCOMM_NCCL_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream) {
  return call(Call::kReduceScatter, "ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                          ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kAlltoAll, "ncclAlltoAll", sendbuff, recvbuff, count, datatype, std::nullopt, 0, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kGather, "ncclGather", sendbuff, recvbuff, count, datatype, std::nullopt, root, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kScatter, "ncclScatter", sendbuff, recvbuff, count, datatype, std::nullopt, root, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                      ncclComm_t comm, cudaStream_t stream) {
  return call(Call::kSend, "ncclSend", sendbuff, nullptr, count, datatype, std::nullopt, peer, comm, stream);
}
DCOMM_NCCL_API ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                      cudaStream_t stream) {
  return call(Call::kRecv, "ncclRecv", nullptr, recvbuff, count, datatype, std::nullopt, peer, comm, stream);
}

DCOMM_NCCL_API ncclResult_t pncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclGroupEnd() {
  if (t_group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  return group_end();
}

DCOMM_NCCL_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t*) {
  return fail(ncclInvalidUsage, "ncclGroupSimulateEnd is not supported by dcomm");
}

// The device API's host functions (nccl_device.h): declared weak by their users; dcomm has no
// device API, so each says so.
DCOMM_NCCL_API ncclResult_t pncclDevCommCreate(ncclComm_t, const void*, void*) {
  return fail(ncclInvalidUsage, "ncclDevCommCreate: dcomm has no NCCL device API");
}
DCOMM_NCCL_API ncclResult_t pncclDevCommDestroy(ncclComm_t, const void*) {
  return fail(ncclInvalidUsage, "ncclDevCommDestroy: dcomm has no NCCL device API");
}
DCOMM_NCCL_API ncclResult_t pncclLsaBarrierCreateRequirement(...) {
  return fail(ncclInvalidUsage, "ncclLsaBarrierCreateRequirement: dcomm has no NCCL device API");
}
DCOMM_NCCL_API ncclResult_t pncclGinBarrierCreateRequirement(...) {
  return fail(ncclInvalidUsage, "ncclGinBarrierCreateRequirement: dcomm has no NCCL device API");
}
DCOMM_NCCL_API ncclResult_t pncclLLA2ACreateRequirement(...) {
  return fail(ncclInvalidUsage, "ncclLLA2ACreateRequirement: dcomm has no NCCL device API");
}
DCOMM_NCCL_API int pncclLLA2ACalcSlots(...) { return 0; }
namespace {
struct Team {
  int nRanks, rank, stride;
};
}  // namespace
DCOMM_NCCL_API Team pncclTeamWorld(...) { return {0, -1, 0}; }
DCOMM_NCCL_API Team pncclTeamLsa(...) { return {0, -1, 0}; }
DCOMM_NCCL_API Team pncclTeamRail(...) { return {0, -1, 0}; }
DCOMM_NCCL_API int pncclTeamRankToWorld(...) { return -1; }
DCOMM_NCCL_API int pncclTeamRankToLsa(...) { return -1; }

// nccl<Name>: weak aliases of pnccl<Name> (NCCL's profiling scheme); ncclAllToAll, the spelling
// of RCCL and MSCCL++, is ncclAlltoAll.
#define DCOMM_NCCL_ALIAS(name, target) \
  extern "C" __attribute__((weak, alias(#target), visibility("default"))) decltype(target) name;
#define DCOMM_NCCL_NAME(name) DCOMM_NCCL_ALIAS(nccl##name, pnccl##name)
DCOMM_NCCL_NAME(GetVersion)
DCOMM_NCCL_NAME(GetUniqueId)
DCOMM_NCCL_NAME(CommInitRankConfig)
DCOMM_NCCL_NAME(CommInitRank)
DCOMM_NCCL_NAME(CommInitRankScalable)
DCOMM_NCCL_NAME(CommInitAll)
DCOMM_NCCL_NAME(CommSplit)
DCOMM_NCCL_NAME(CommShrink)
DCOMM_NCCL_NAME(CommRevoke)
DCOMM_NCCL_NAME(CommFinalize)
DCOMM_NCCL_NAME(CommDestroy)
DCOMM_NCCL_NAME(CommAbort)
DCOMM_NCCL_NAME(GetErrorString)
DCOMM_NCCL_NAME(GetLastError)
DCOMM_NCCL_NAME(ResetDebugInit)
DCOMM_NCCL_NAME(CommGetAsyncError)
DCOMM_NCCL_NAME(CommCount)
DCOMM_NCCL_NAME(CommUserRank)
DCOMM_NCCL_NAME(CommCuDevice)
DCOMM_NCCL_NAME(MemAlloc)
DCOMM_NCCL_NAME(MemFree)
DCOMM_NCCL_NAME(CommRegister)
DCOMM_NCCL_NAME(CommDeregister)
DCOMM_NCCL_NAME(CommWindowRegister)
DCOMM_NCCL_NAME(CommWindowDeregister)
DCOMM_NCCL_NAME(RedOpCreatePreMulSum)
DCOMM_NCCL_NAME(RedOpDestroy)
DCOMM_NCCL_NAME(AllReduce)
DCOMM_NCCL_NAME(Broadcast)
DCOMM_NCCL_NAME(Bcast)
DCOMM_NCCL_NAME(Reduce)
DCOMM_NCCL_NAME(AllGather)
DCOMM_NCCL_NAME(ReduceScatter)
DCOMM_NCCL_NAME(AlltoAll)
DCOMM_NCCL_NAME(Gather)
DCOMM_NCCL_NAME(Scatter)
DCOMM_NCCL_NAME(Send)
DCOMM_NCCL_NAME(Recv)
DCOMM_NCCL_NAME(GroupStart)
DCOMM_NCCL_NAME(GroupEnd)
DCOMM_NCCL_NAME(GroupSimulateEnd)
DCOMM_NCCL_NAME(DevCommCreate)
DCOMM_NCCL_NAME(DevCommDestroy)
DCOMM_NCCL_NAME(LsaBarrierCreateRequirement)
DCOMM_NCCL_NAME(GinBarrierCreateRequirement)
DCOMM_NCCL_NAME(LLA2ACreateRequirement)
DCOMM_NCCL_NAME(LLA2ACalcSlots)
DCOMM_NCCL_NAME(TeamWorld)
DCOMM_NCCL_NAME(TeamLsa)
DCOMM_NCCL_NAME(TeamRail)
DCOMM_NCCL_NAME(TeamRankToWorld)
DCOMM_NCCL_NAME(TeamRankToLsa)
DCOMM_NCCL_ALIAS(pncclAllToAll, pncclAlltoAll)
DCOMM_NCCL_ALIAS(ncclAllToAll, pncclAlltoAll)
