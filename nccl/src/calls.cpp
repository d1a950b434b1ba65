// dcomm's libnccl.so.2: collectives, point-to-point, PreMulSum ops and groups.
//
// Every call checks its arguments first (a bad one fails the call, names what is wrong in
// ncclGetLastError, and sends nothing), then runs: on device memory through dcomm's
// DeviceCommunicator, stream-ordered; on host memory (cudaPointerGetAttributes says so, or
// there is no GPU at all) on the host communicator, complete when the call returns. Inside
// ncclGroupStart/End the calls are kept and run at the outermost end: creations concurrently,
// then each communicator's calls in order (consecutive sends and receives as one batch), one
// thread per communicator when the group spans several.
#include <cstring>

#include "internal.hpp"

namespace dcomm_nccl {

thread_local Group t_group;

namespace {

// ---- running calls --------------------------------------------------------------------------

// Sends and receives that one Call stands for: a send, a receive, or an exchange
// (algo/exchange.hpp, this rank's own block included unless it is in place).
Status expand_p2p(const Call& k, int rank, int size, std::vector<P2POp>& out) {
  if (k.kind == Call::kSend || k.kind == Call::kRecv) {
    out.push_back(k.kind == Call::kSend ? P2POp::send(k.send, k.count, k.type, k.root)
                                        : P2POp::recv(k.recv, k.count, k.type, k.root));
    return {};
  }
  const Exchange what = k.kind == Call::kAlltoAll ? Exchange::kAllToAll
                        : k.kind == Call::kGather ? Exchange::kGather
                                                  : Exchange::kScatter;
  auto ops = equal_exchange_ops(what, rank, size, k.root, k.send, k.recv, k.count, k.type);
  if (!ops.ok()) return ops.status().with_context(k.name);
  out.insert(out.end(), ops->begin(), ops->end());
  return {};
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
      DCOMM_RETURN_IF_ERROR(adapter::device_copy(copy, k.send, k.count * k.elem() * static_cast<size_t>(c->size()), s));
      send = copy;
    }
    Call from = k;
    from.send = send;
    Status st = expand_p2p(from, c->rank(), c->size(), ops);
    return st.ok() ? adapter::device_p2p(d, ops, s) : st;  // the copy is freed once the outermost group is launched
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
  for (const Call& k : calls) {
    if (!first.ok()) break;
    if (k.device) {
      first = run_device(c, k);
    } else if (is_p2p(k.kind)) {
      // In place (all-to-all): run_p2p sends what the batch's receives overwrite from copies.
      first = expand_p2p(k, c->rank(), c->size(), batch);
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

}  // namespace

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

namespace {

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
  if (comm->host->suspended())
    return fail(ncclInvalidUsage, name, ": the comm is suspended (ncclCommSuspend); ncclCommResume it first");
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

using namespace dcomm_nccl;

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

// ncclAllToAll, the spelling of RCCL and MSCCL++, is ncclAlltoAll.
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
DCOMM_NCCL_ALIAS(pncclAllToAll, pncclAlltoAll)
DCOMM_NCCL_ALIAS(ncclAllToAll, pncclAlltoAll)
