// Collectives on CUDA device memory, ordered on a CUDA stream as NCCL's are: each call checks
// its arguments, enqueues one kernel on the caller's stream and returns; calls between
// group_start() and group_end() launch together; a stream being captured into a CUDA graph
// captures the kernels (their work descriptors are kernel parameters). docs/gpu.md has more.
//
// Set-up (create(), collective over the host communicator): every rank allocates one arena of
// FIFOs (comm/device_work.hpp's layout) and swaps handles with the others. A pair talks through
// device memory when both are on one GPU or have peer access (CUDA IPC between processes),
// through pinned host memory both GPUs map otherwise (or with DCOMM_CUDA_P2P_DISABLE=1). Ranks
// on other hosts: every call is staged through the host communicator. A set-up that fails on
// one rank aborts the host communicator, so the others fail at once with its reason.
// suspend()/resume() (collective) free the arenas and make new ones.
//
// Streams: a communicator's launches are ordered one after the other whatever streams they are
// on, so two streams never race on its FIFOs. Set-up and teardown wait only for this
// communicator's own work, never for the whole GPU. Thread ranks each use a stream:
// CUDA_DEVICE_MAX_CONNECTIONS (32 here when unset, before CUDA starts) keeps one rank's kernel
// from queueing behind another's that waits for it.
//
// Failure: device waits poll an abort flag in mapped host memory and give up at the deadline
// (DCOMM_TIMEOUT_MS), recording the peer; a watchdog thread raises the flag when the host
// communicator aborts and aborts it when a kernel reports a failure, so every rank's kernels
// end. error() says what happened.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/device_group.hpp"
#include "dcomm/comm/device_kernels.cuh"
#include "dcomm/comm/device_plan.hpp"
#include "dcomm/comm/device_staging.cuh"
#include "dcomm/comm/device_work.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/reduce/kernels.cuh"
#include "dcomm/transport/cuda_ipc.cuh"

DCOMM_NAMESPACE_BEGIN

class DeviceCommunicator {
 public:
  // Collective over `host` (every rank calls it): binds this rank to CUDA device `device`.
  static Result<std::unique_ptr<DeviceCommunicator>> create(Communicator& host, int device) {
    auto cfg = DeviceConfig::from_env();
    if (!cfg.ok()) return cfg.status();
    return create(host, device, *cfg);
  }
  // With explicit settings instead of the environment's (the ranks' FIFO settings must match;
  // channels and pair paths are agreed as with the environment's).
  static Result<std::unique_ptr<DeviceCommunicator>> create(Communicator& host, int device, const DeviceConfig& cfg) {
    detail::raise_device_connections();
    std::unique_ptr<DeviceCommunicator> d(new DeviceCommunicator(host, device, cfg));
    Status s = d->set_up();
    if (!s.ok()) {
      // The other ranks may be waiting in set-up's exchanges: they learn why at once.
      s = s.with_context(detail::cat("device communicator on rank ", host.rank(), " (CUDA device ", device, ")"));
      if (!host.aborted()) host.abort(s.message());
      return s;
    }
    d->ready_ = true;
    return d;
  }
  // Collective too, after every rank's calls: a rank frees its arenas only once every peer
  // has closed its mappings of them (CUDA leaves freeing an allocation other processes still
  // map undefined), so the ranks meet in between.
  ~DeviceCommunicator() {
    stop_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    detail::DeviceGuard on(device_);
    if (launched_) cudaEventSynchronize(launched_);  // this communicator's last launch, and so every earlier one
    if (setup_stream_) cudaStreamSynchronize(setup_stream_);
    arenas_.close_peers();
    if (ready_ && !staged_only_ && size() > 1 && !host_.aborted()) host_.barrier().ignore();
    arenas_.release();
    for (void* p : device_allocs_) cudaFree(p);
    if (control_) cudaFreeHost(control_);
    staging_.reset();
    if (launched_) cudaEventDestroy(launched_);
    if (setup_stream_) cudaStreamDestroy(setup_stream_);
  }
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  int rank() const { return host_.rank(); }
  int size() const { return host_.size(); }
  Communicator& host() const { return host_; }
  int device() const { return device_; }
  const DeviceConfig& config() const { return cfg_; }
  // "device", "host" (pinned host memory), "staged" (another host) or "self": how this rank reaches r.
  const char* path_to(int r) const {
    if (r == rank()) return "self";
    if (r < 0 || r >= size()) return "none";
    return staged_only_ ? "staged" : pair_host_[static_cast<size_t>(r)] ? "host" : "device";
  }

  // ---- collectives (raw form; counts in elements; device or managed memory) -----------------
  Status all_reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, cudaStream_t stream) {
    return coll({OpKind::kAllReduce, send, recv, count, type, op}, count, count, stream);
  }
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op,
                        cudaStream_t stream) {
    return coll({OpKind::kReduceScatter, send, recv, recv_count, type, op}, recv_count * usize(), recv_count, stream);
  }
  Status all_gather(const void* send, void* recv, size_t send_count, DataType type, cudaStream_t stream) {
    return coll({OpKind::kAllGather, send, recv, send_count, type}, send_count, send_count * usize(), stream);
  }
  Status broadcast(const void* send, void* recv, size_t count, DataType type, int root, cudaStream_t stream) {
    return coll({OpKind::kBroadcast, send, recv, count, type, ReduceOp::kSum, root}, rank() == root ? count : 0, count,
                stream);
  }
  Status reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root, cudaStream_t stream) {
    return coll({OpKind::kReduce, send, recv, count, type, op, root}, count, rank() == root ? count : 0, stream);
  }
  Status send(const void* buf, size_t count, DataType type, int peer, cudaStream_t stream) {
    return p2p(P2POp::send(buf, count, type, peer), stream);
  }
  Status recv(void* buf, size_t count, DataType type, int peer, cudaStream_t stream) {
    return p2p(P2POp::recv(buf, count, type, peer), stream);
  }
  // Every rank's earlier work on its stream is done before later work on this stream starts
  // (an all_reduce of one word).
  Status barrier(cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(precheck(OpDesc{OpKind::kBarrier}));
    return coll({OpKind::kAllReduce, barrier_buf_, barrier_buf_, 1, DataType::kInt32}, 1, 1, stream);
  }
  // Typed forms.
  template <class T>
  Status all_reduce(const T* send, T* recv, size_t count, ReduceOp op, cudaStream_t stream) {
    return all_reduce(send, recv, count, data_type_of<T>, op, stream);
  }

  // NCCL's groups: calls in between are checked and kept, and launched by the last group_end().
  void group_start() { ++group_depth_; }
  Status group_end() {
    if (group_depth_ == 0) return invalid_argument("group_end on rank ", rank(), " without group_start");
    if (--group_depth_ > 0) return {};
    detail::DeviceGuard on(device_);
    return flush();
  }

  // Stream-ordered scratch for the next call's input (PreMulSum's scaled input, an in-place
  // all-to-all's copy): freed on `stream` once the group it joins has been launched.
  Result<void*> scratch(size_t bytes, cudaStream_t stream) {
    detail::DeviceGuard on(device_);
    void* p = nullptr;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMallocAsync(&p, bytes ? bytes : 1, stream),
                                      detail::cat("cudaMallocAsync of ", bytes, " bytes of scratch")));
    group_.keep_scratch(p, stream);
    return p;
  }

  // The first failure a kernel or the staging path reported, or the host communicator's abort.
  Status error() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    if (host_.aborted()) return make_error(ErrorCode::kAborted, "the host communicator was aborted");
    return {};
  }
  // Ends this rank's waiting kernels now and aborts the host communicator (so every rank's).
  void abort(const std::string& why) {
    __atomic_store_n(&control_->abort, 1, __ATOMIC_RELEASE);
    host_.abort(why);
  }

  // Collective: after this communicator's launches every rank unmaps its peers' FIFO arenas,
  // then frees its own (arena_bytes()); calls are refused until resume() makes new ones.
  Status suspend() {
    detail::DeviceGuard on(device_);
    if (suspended_) return make_error(ErrorCode::kUnsupported, "suspend on rank ", rank(), ": already suspended");
    suspended_ = true;
    if (staged_only_) return {};  // no arenas: the host communicator's memory is its own to release
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(launched_), "device suspend: the last launch"));
    arenas_.close_peers();
    DCOMM_RETURN_IF_ERROR(host_.barrier().with_context("device suspend"));  // nobody maps ours any more
    arenas_.release();
    return {};
  }
  Status resume() {
    detail::DeviceGuard on(device_);
    if (!suspended_) return make_error(ErrorCode::kUnsupported, "resume on rank ", rank(), ": not suspended");
    if (!staged_only_) DCOMM_RETURN_IF_ERROR(map_arenas().with_context("device resume"));
    suspended_ = false;
    return {};
  }
  bool suspended() const { return suspended_; }
  size_t arena_bytes() const { return arenas_.held_bytes(); }

 private:
  struct Control {
    int abort;
    DeviceError error;
  };

  DeviceCommunicator(Communicator& host, int device, const DeviceConfig& cfg)
      : host_(host), device_(device), cfg_(cfg) {}
  size_t usize() const { return static_cast<size_t>(size()); }

  Status set_up() {
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), detail::cat("cudaSetDevice(", device_, ")")));
    DCOMM_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&setup_stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&launched_, cudaEventDisableTiming), "cudaEventCreate"));
    const int n = size(), me = rank();
    const SetupFacts& agreed_at_init = host_.facts();  // hosts and ring order, as the host path has them
    staged_only_ = agreed_at_init.hosts > 1;
    if (staged_only_) staging_ = std::make_unique<DeviceStaging>(host_, [this](const Status& e) { set_error(e); });
    // Control block in mapped host memory: the host raises `abort`, kernels write `error`.
    DCOMM_RETURN_IF_ERROR(cuda_status(
        cudaHostAlloc(reinterpret_cast<void**>(&control_), sizeof(Control), cudaHostAllocMapped), "cudaHostAlloc"));
    std::memset(control_, 0, sizeof(Control));
    Control* dev_control = nullptr;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_control), control_, 0),
                                      "cudaHostGetDevicePointer"));
    ctl_.abort = &dev_control->abort;
    ctl_.error = &dev_control->error;
    ctl_.timeout_ns = static_cast<uint64_t>(host_.config().timeout.count()) * 1000000ull;
    DCOMM_RETURN_IF_ERROR(device_alloc(&barrier_buf_, 16));

    // 1. Which GPU each rank has, the channels and FIFO shape every rank uses, and which pairs
    // go through host memory (comm/device_plan.hpp: the same answers on every rank).
    DeviceRankFacts mine;
    DCOMM_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, device_), "cudaDeviceGetPCIBusId"));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&mine.sms, cudaDevAttrMultiProcessorCount, device_),
                                      "cudaDeviceGetAttribute"));
    auto resident = resident_blocks_per_sm(cfg_.threads, device_);
    if (!resident.ok()) return resident.status();
    mine.resident_per_sm = *resident;
    mine.requested_channels = cfg_.channels;
    mine.p2p_channels = cfg_.p2p_channels;
    mine.nslots = cfg_.nslots;
    mine.slot_bytes = cfg_.slot_bytes;
    mine.threads = cfg_.threads;
    std::vector<DeviceRankFacts> facts(usize());
    DCOMM_RETURN_IF_ERROR(host_.all_gather(&mine, facts.data(), sizeof mine, DataType::kUint8));
    DCOMM_RETURN_IF_ERROR(check_device_shapes(facts, me));
    plan_ = agree_device_plan(facts);
    cfg_.channels = plan_.channels;
    cfg_.p2p_channels = plan_.p2p_channels;
    DCOMM_LOG(kInfo, kSubsysInit, me, "device communicator on CUDA device ", device_, " (", mine.bus_id, ", ", mine.sms,
              " multiprocessors, ", mine.resident_per_sm, " blocks of ", cfg_.threads, " threads each, ",
              spare_sms(mine.sms), " kept spare): ", cfg_.channels, " channels (", plan_.why, "), ", cfg_.p2p_channels,
              " a send/recv lane, at most ", plan_.p2p_blocks, " send/recv blocks");
    std::vector<uint8_t> wants_host(usize(), 0), all_wants(usize() * usize(), 0);
    std::vector<int> peer_device(usize(), -1);
    for (int r = 0; r < n; ++r) {
      if (r == me || staged_only_) continue;
      const auto& f = facts[static_cast<size_t>(r)];
      const bool same_gpu = std::strcmp(f.bus_id, mine.bus_id) == 0;
      bool can = false;
      if (!same_gpu) peer_device[static_cast<size_t>(r)] = device_by_bus_id(f.bus_id, device_, &can);
      wants_host[static_cast<size_t>(r)] = cfg_.p2p_disable || (!same_gpu && !can);
    }
    DCOMM_RETURN_IF_ERROR(host_.all_gather(wants_host.data(), all_wants.data(), usize(), DataType::kUint8));
    const std::vector<uint8_t> agreed = agree_pair_paths(all_wants, n);
    pair_host_.assign(usize(), 0);
    bool any_host = false;
    for (int r = 0; r < n; ++r) {
      if (r == me || staged_only_) continue;
      pair_host_[static_cast<size_t>(r)] = agreed[static_cast<size_t>(me * n + r)];
      any_host = any_host || pair_host_[static_cast<size_t>(r)];
      const int peer_dev = peer_device[static_cast<size_t>(r)];
      if (!pair_host_[static_cast<size_t>(r)] && peer_dev >= 0 && peer_dev != device_)
        DCOMM_RETURN_IF_ERROR(enable_peer_access(peer_dev));
    }
    if (staged_only_) return start_watchdog();
    any_host_ = any_host;
    layout_ = {usize(), static_cast<size_t>(cfg_.channels), static_cast<size_t>(cfg_.nslots) * cfg_.slot_bytes};
    pos_of_ = agreed_at_init.pos_of;
    std::vector<int> block_of(agreed_at_init.order.begin(), agreed_at_init.order.end());
    DCOMM_RETURN_IF_ERROR(upload(block_of, &block_of_));
    DCOMM_RETURN_IF_ERROR(map_arenas());
    return start_watchdog();
  }

  // 2. Arenas (device memory; pinned shared host memory where a pair needs it), published and
  // mapped by every rank, then the connection tables into them (at set-up and at resume).
  Status map_arenas() {
    const int n = size(), me = rank();
    bool other_process = false;  // CUDA IPC only where some peer needs it
    for (int r = 0; r < n; ++r) other_process = other_process || !same_process(r);
    ArenaAddress where;
    DCOMM_RETURN_IF_ERROR(
        arenas_.create(layout_.bytes(), other_process, any_host_, host_.config().shm_dir, me, setup_stream_, &where));
    std::vector<ArenaAddress> published(usize());
    DCOMM_RETURN_IF_ERROR(host_.all_gather(&where, published.data(), sizeof where, DataType::kUint8));
    std::vector<ArenaView> views(usize());
    for (int r = 0; r < n; ++r) {
      auto v = r == me ? arenas_.own() : arenas_.map_peer(published[static_cast<size_t>(r)], same_process(r), r);
      if (!v.ok()) return v.status();
      views[static_cast<size_t>(r)] = *v;
    }
    // 4. Connections: the FIFO p -> q lives in q's arena of the pair's kind.
    auto arena = [&](int owner, int other) {
      const ArenaView& v = views[static_cast<size_t>(owner)];
      return pair_host_[static_cast<size_t>(other == rank() ? owner : other)] ? v.host : v.device;
    };
    // The ring in the host communicator's order (the topology's): from prev, to next.
    const std::vector<int>& order = host_.facts().order;
    const int pos = pos_of_[static_cast<size_t>(me)];
    const int prev = order[static_cast<size_t>((pos + n - 1) % n)], next = order[static_cast<size_t>((pos + 1) % n)];
    auto wired = wire_device_fifos(layout_, me, n, cfg_, views[static_cast<size_t>(me)].device, arena, prev, next);
    if (!wired.ok()) return wired.status();
    const auto& [sends, recvs, ring] = *wired;
    DCOMM_RETURN_IF_ERROR(upload(ring, &ring_conns_));
    DCOMM_RETURN_IF_ERROR(upload(sends, &send_conns_));
    DCOMM_RETURN_IF_ERROR(upload(recvs, &recv_conns_));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(setup_stream_), "cudaStreamSynchronize (set-up)"));
    // Nobody writes into a peer's FIFO before every rank has mapped and zeroed its own.
    return host_.barrier();
  }

  // Set-up's memory work goes on its own stream (the legacy stream's cudaMemset/cudaMemcpy
  // would wait for other communicators' kernels); set_up() waits for that stream alone.
  Status device_alloc(void** p, size_t bytes) {
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMalloc(p, bytes), "cudaMalloc"));
    device_allocs_.push_back(*p);
    return cuda_status(cudaMemsetAsync(*p, 0, bytes, setup_stream_), "cudaMemsetAsync");
  }
  template <class T>  // into *out, allocated the first time (a resume's tables have set-up's sizes)
  Status upload(const std::vector<T>& v, T** out) {
    void* p = *out;
    if (!p) DCOMM_RETURN_IF_ERROR(device_alloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)));
    *out = static_cast<T*>(p);
    DCOMM_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, setup_stream_), "cudaMemcpyAsync"));
    return cuda_status(cudaStreamSynchronize(setup_stream_), "cudaStreamSynchronize (set-up)");  // v is pageable
  }
  bool same_process(int r) const { return host_.peer(r).process_id == host_.peer(rank()).process_id; }

  Status start_watchdog() {
    watchdog_ = std::thread([this] {
      while (!stop_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (host_.aborted() && !control_->abort) __atomic_store_n(&control_->abort, 1, __ATOMIC_RELEASE);
        const int code = __atomic_load_n(&control_->error.code, __ATOMIC_ACQUIRE);
        if (code && !reported_) {
          reported_ = true;
          __atomic_thread_fence(__ATOMIC_ACQUIRE);
          const DeviceError e = control_->error;
          const std::string peer = e.peer >= 0 && e.peer < size() ? host_.peer(e.peer).describe() : "no peer";
          Status s = device_error_status(e, rank(), device_, peer);
          set_error(s);
          if (!host_.aborted()) host_.abort(s.message());
        }
      }
    });
    return {};
  }
  void set_error(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = s;
  }

  // Arguments checked on the host before anything is enqueued (comm/op.hpp's checks, then the buffers).
  Status precheck(const OpDesc& d) const {
    Status s = validate(d, rank(), size());
    if (s.ok()) s = error().with_context("the device communicator failed earlier");
    if (s.ok() && suspended_)
      s = make_error(ErrorCode::kUnsupported, "the device communicator is suspended; resume() it");
    return s.with_context([&] { return detail::cat(to_string(d.kind), " on rank ", rank()); });
  }
  Status check_buffer(const char* op, const char* which, const void* p, size_t bytes) const {
    return check_device_buffer(p, bytes, device_, which).with_context([&] {
      return detail::cat(op, " on rank ", rank());
    });
  }

  // One collective: send_elems of d.send are read, recv_elems of d.recv written.
  Status coll(const OpDesc& d, size_t send_elems, size_t recv_elems, cudaStream_t stream) {
    detail::DeviceGuard on(device_);
    DCOMM_RETURN_IF_ERROR(precheck(d));
    const char* op = to_string(d.kind);
    const size_t eb = size_of(d.type);
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the send buffer", d.send, send_elems * eb));
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the receive buffer", d.recv, recv_elems * eb));
    if (staged_only_) return staged(d, send_elems * eb, recv_elems * eb, stream);
    DCOMM_RETURN_IF_ERROR(group_.use_stream(op, rank(), stream));
    const bool bytes = copy_only(d.kind);
    DeviceCollWork w;
    w.kind = d.kind;
    w.send = d.send ? d.send : d.recv;
    w.recv = d.recv ? d.recv : const_cast<void*>(d.send);
    w.count = bytes ? d.count * eb : d.count;
    w.pos = pos_of_[static_cast<size_t>(rank())];
    w.size = size();
    w.root_pos = pos_of_[static_cast<size_t>(d.root)];
    w.block_of = block_of_;
    w.op = bytes ? ReduceOp::kSum : d.op;
    w.divide_by = d.op == ReduceOp::kAvg && size() > 1 ? size() : 0;
    w.channels = cfg_.channels;
    w.conns = ring_conns_;
    w.ctl = ctl_;
    group_.add_collective(w, bytes ? DataType::kUint8 : d.type);
    return group_depth_ ? Status{} : flush();
  }

  Status p2p(const P2POp& m, cudaStream_t stream) {
    detail::DeviceGuard on(device_);
    OpDesc d(OpKind::kPointToPoint);
    d.p2p = {m};
    DCOMM_RETURN_IF_ERROR(precheck(d));
    const bool is_send = m.kind == P2POp::Kind::kSend;
    const char* op = is_send ? "send" : "recv";
    const size_t bytes = m.count * size_of(m.type);
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the buffer", m.buffer, bytes));
    if (staged_only_)
      return make_error(ErrorCode::kUnsupported, op, " on rank ", rank(),
                        ": device send/recv between hosts is not staged yet; use the host communicator");
    DCOMM_RETURN_IF_ERROR(group_.use_stream(op, rank(), stream));
    if (!group_.add_send_recv({m.buffer, bytes, m.peer, is_send ? 1 : 0}))
      return invalid_argument(op, " on rank ", rank(), ": more than ", DeviceP2pWork::kMaxItems,
                              " send/recv calls in one group");
    return group_depth_ ? Status{} : flush();
  }

  // A staged call (another host in the communicator): ordered after this communicator's
  // previous launch like a kernel, so two streams never run the host communicator at once.
  Status staged(const OpDesc& d, size_t in_bytes, size_t out_bytes, cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(order_after_previous(stream));
    DCOMM_RETURN_IF_ERROR(staging_->enqueue(d, in_bytes, out_bytes, stream));
    return mark_launched(stream);
  }
  // A captured stream's work runs when its graph is launched, ordered by where that is.
  Status order_after_previous(cudaStream_t stream) {
    if (detail::stream_capturing(stream)) return {};
    return cuda_status(cudaStreamWaitEvent(stream, launched_, 0), "cudaStreamWaitEvent (the previous launch)");
  }
  Status mark_launched(cudaStream_t stream) {
    if (detail::stream_capturing(stream)) return {};
    return cuda_status(cudaEventRecord(launched_, stream), "cudaEventRecord");
  }

  // Launches what the group (or the single call) holds, in comm/device_group.hpp's steps: after
  // the previous launch, collectives in call order, one kernel for all sends and receives.
  Status flush() {
    DeviceGroup::Launch l = group_.close(rank(), plan_);
    const auto stream = static_cast<cudaStream_t>(l.stream);
    Status first = l.status;
    for (const LaunchStep& step : l.steps) {
      Status s;
      const bool launches = step.kind == LaunchStep::kCollective || step.kind == LaunchStep::kSendRecv;
      if (launches && !first.ok()) continue;  // the rest of a group whose launch failed stays out
      switch (step.kind) {
        case LaunchStep::kWaitPrevious: s = order_after_previous(stream); break;
        case LaunchStep::kCollective: {
          const DeviceGroup::Collective& c = l.collectives[step.index];
          dispatch_type(c.type, [&]<class T>() {
            detail::coll_kernel<T><<<cfg_.channels, cfg_.threads, 0, stream>>>(c.work);
            return 0;
          });
          s = cuda_status(cudaGetLastError(), detail::cat("launching a collective kernel on rank ", rank()));
          break;
        }
        case LaunchStep::kSendRecv: {
          DeviceP2pWork& p2p = l.p2p;
          p2p.channels = cfg_.p2p_channels;
          p2p.conn_channels = cfg_.channels;
          p2p.rank = rank();
          p2p.send_conns = send_conns_;
          p2p.recv_conns = recv_conns_;
          p2p.ctl = ctl_;
          detail::p2p_kernel<<<p2p.nlanes * p2p.channels, cfg_.threads, 0, stream>>>(p2p);
          s = cuda_status(cudaGetLastError(), detail::cat("launching a send/recv kernel on rank ", rank()));
          break;
        }
        case LaunchStep::kFreeScratch:
          s = cuda_status(cudaFreeAsync(step.scratch, static_cast<cudaStream_t>(step.stream)),
                          "cudaFreeAsync (scratch)");
          break;
        case LaunchStep::kMarkLaunched: s = mark_launched(stream); break;
      }
      if (first.ok()) first = s;
    }
    return first;
  }

  Communicator& host_;
  int device_;
  DeviceConfig cfg_;
  bool staged_only_ = false;
  bool any_host_ = false;   // some pair goes through pinned host memory
  bool suspended_ = false;  // the arenas are released (suspend())
  std::vector<int> pair_host_;
  std::vector<int> pos_of_;
  ArenaLayout layout_{};
  CudaArenas arenas_{"do all ranks set the same DCOMM_CUDA_CHANNELS, _SLOTS and _SLOT_BYTES?"};
  std::vector<void*> device_allocs_;
  DeviceConn* ring_conns_ = nullptr;
  DeviceConn* send_conns_ = nullptr;
  DeviceConn* recv_conns_ = nullptr;
  int* block_of_ = nullptr;
  void* barrier_buf_ = nullptr;
  Control* control_ = nullptr;
  DeviceControl ctl_;
  DeviceLaunchPlan plan_;
  cudaStream_t setup_stream_ = nullptr;
  cudaEvent_t launched_ = nullptr;  // recorded after each launch; the next one waits for it
  int group_depth_ = 0;
  DeviceGroup group_;
  std::unique_ptr<DeviceStaging> staging_;  // another host in the communicator
  mutable std::mutex mu_;
  Status error_;
  std::atomic<bool> stop_{false};
  bool reported_ = false;
  bool ready_ = false;  // set-up completed on this rank (the destructor meets the others)
  std::thread watchdog_;
};

DCOMM_NAMESPACE_END
