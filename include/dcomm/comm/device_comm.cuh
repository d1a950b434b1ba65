// Collectives on CUDA device memory, ordered on a CUDA stream as NCCL's are: each call checks
// its arguments, enqueues one kernel on the caller's stream and returns; later work on that
// stream sees the result; calls between group_start() and group_end() launch together; a
// stream being captured into a CUDA graph captures the kernels (their work descriptors are
// kernel parameters).
//
// Set-up (create(), collective over the host communicator): every rank allocates one arena
// of FIFOs (comm/device_work.hpp's layout: slots, posted and freed counters for every peer
// and channel) and swaps handles with the others. A pair of ranks talks through device memory
// when both are on one GPU or cudaDeviceCanAccessPeer says yes (CUDA IPC handles between
// processes, plain pointers within one), and through pinned host memory both GPUs map
// otherwise (or with DCOMM_CUDA_P2P_DISABLE=1). Ranks on other hosts: every call is staged
// through pinned host memory and the host communicator (a host function on the stream).
//
// A set-up that fails on one rank aborts the host communicator, so the others, which may be
// waiting in set-up's exchanges, fail at once with its reason.
//
// Failure: device waits poll an abort flag in mapped host memory and give up at the deadline
// (DCOMM_TIMEOUT_MS), recording the peer; a watchdog thread raises the flag when the host
// communicator aborts (a dead peer, abort() on any rank) and aborts the host communicator
// when a kernel reports a failure, so every rank's kernels end. error() says what happened.
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
#include "dcomm/comm/device_plan.hpp"
#include "dcomm/comm/device_staging.cuh"
#include "dcomm/comm/device_work.hpp"
#include "dcomm/comm/op.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/reduce/kernels.cuh"
#include "dcomm/transport/cuda_ipc.cuh"

DCOMM_NAMESPACE_BEGIN

namespace detail {
template <class T>
__global__ void __launch_bounds__(kMaxDeviceThreads) coll_kernel(DeviceCollWork w) {
  run_coll_channel<BlockTeam, T>(BlockTeam{}, w, static_cast<int>(blockIdx.x));
}
__global__ void __launch_bounds__(kMaxDeviceThreads) p2p_kernel(DeviceP2pWork w) {
  run_p2p_block(BlockTeam{}, w, static_cast<int>(blockIdx.x));
}
}  // namespace detail

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
    cudaDeviceSynchronize();
    arenas_.close_peers();
    if (ready_ && !staged_only_ && size() > 1 && !host_.aborted()) host_.barrier().ignore();
    arenas_.release();
    for (void* p : device_allocs_) cudaFree(p);
    if (control_) cudaFreeHost(control_);
    staging_.reset();
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

  // The first failure a kernel or the staging path reported, or the host communicator's abort.
  Status error() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    if (host_.aborted()) return make_error(ErrorCode::kAborted, "the host communicator was aborted");
    return {};
  }
  // Ends this rank's waiting kernels now and aborts the host communicator (so every rank's).
  void abort(const std::string& why) {
    control_->abort = 1;
    host_.abort(why);
  }

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
    auto resident = resident_blocks_per_sm(cfg_.threads);
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
    std::string limited_by;
    cfg_.channels = agree_device_channels(facts, &limited_by);
    cfg_.p2p_channels = std::min(cfg_.p2p_channels, cfg_.channels);  // they use the first channels' FIFOs
    DCOMM_LOG(kInfo, kSubsysInit, me, "device communicator on CUDA device ", device_, " (", mine.bus_id, ", ", mine.sms,
              " multiprocessors, ", mine.resident_per_sm, " blocks of ", cfg_.threads,
              " threads each): ", cfg_.channels, " channels (", limited_by, ")");
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

    // 2. Arenas (transport/cuda_ipc.cuh): device memory always, pinned shared host memory when
    // some pair needs it; every rank publishes where its arenas are and maps its peers'.
    layout_ = {usize(), static_cast<size_t>(cfg_.channels), static_cast<size_t>(cfg_.nslots) * cfg_.slot_bytes};
    bool other_process = false;  // CUDA IPC only where some peer needs it
    for (int r = 0; r < n; ++r) other_process = other_process || !same_process(r);
    ArenaAddress where;
    DCOMM_RETURN_IF_ERROR(arenas_.create(layout_.bytes(), other_process, any_host, host_.config().shm_dir, me, &where));
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
    const int C = cfg_.channels;
    std::vector<DeviceConn> sends(usize() * static_cast<size_t>(C)), recvs(sends.size());
    char* local_dev = views[static_cast<size_t>(me)].device;
    // The FIFO from `from` to `to` on channel c, seen from this rank's end `role` (0: it sends,
    // 1: it receives): its slots and posted counter in `holder` (the receiver's arena), its
    // freed counter in `other` (the sender's), this rank's step counter for the pair.
    auto fifo = [&](char* holder, int from, char* other, int to, int c, int role) -> DeviceConn {
      const int peer = role == 0 ? to : from;
      return {holder + layout_.slots(from, c),
              reinterpret_cast<uint64_t*>(holder + layout_.posted(from, c)),
              reinterpret_cast<uint64_t*>(other + layout_.freed(to, c)),
              reinterpret_cast<uint64_t*>(local_dev + layout_.step(peer, c, role)),
              cfg_.nslots,
              cfg_.slot_bytes,
              peer};
    };
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      for (int c = 0; c < C; ++c) {
        char* theirs = arena(p, me);  // p's arena, where my FIFO to p lives
        char* mine_a = arena(me, p);  // my arena, where p's FIFO to me lives
        if (!theirs || !mine_a) return make_error(ErrorCode::kInternal, "no arena for the pair with rank ", p);
        sends[layout_.index(p, c)] = fifo(theirs, me, mine_a, p, c, 0);
        recvs[layout_.index(p, c)] = fifo(mine_a, p, theirs, me, c, 1);
      }
    }
    // The ring in the host communicator's order (the topology's): from prev, to next.
    const std::vector<int>& order = agreed_at_init.order;
    pos_of_ = agreed_at_init.pos_of;
    const int pos = pos_of_[static_cast<size_t>(me)];
    const int prev = order[static_cast<size_t>((pos + n - 1) % n)], next = order[static_cast<size_t>((pos + 1) % n)];
    std::vector<DeviceConn> ring(2 * static_cast<size_t>(C));
    if (n > 1)
      for (int c = 0; c < C; ++c) {
        ring[2 * static_cast<size_t>(c)] = recvs[layout_.index(prev, c)];
        ring[2 * static_cast<size_t>(c) + 1] = sends[layout_.index(next, c)];
      }
    DCOMM_RETURN_IF_ERROR(upload(ring, &ring_conns_));
    DCOMM_RETURN_IF_ERROR(upload(sends, &send_conns_));
    DCOMM_RETURN_IF_ERROR(upload(recvs, &recv_conns_));
    std::vector<int> block_of(order.begin(), order.end());
    DCOMM_RETURN_IF_ERROR(upload(block_of, &block_of_));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    // Nobody writes into a peer's FIFO before every rank has mapped and zeroed its own.
    DCOMM_RETURN_IF_ERROR(host_.barrier());
    return start_watchdog();
  }

  // Blocks of the collective kernels one multiprocessor holds at `threads` a block: the
  // fewest over the types (their register use differs), and the send/recv kernel's.
  Status occupancy_of(const void* kernel, int threads, int* fewest) const {
    int blocks = 0;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, 0),
                                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
    *fewest = std::min(*fewest, blocks);
    return {};
  }
  Result<int> resident_blocks_per_sm(int threads) const {
    int fewest = 1 << 20;
    for (int t = 0; t < kNumDataTypes; ++t)
      DCOMM_RETURN_IF_ERROR(dispatch_type(static_cast<DataType>(t), [&]<class T>() {
        return occupancy_of(reinterpret_cast<const void*>(&detail::coll_kernel<T>), threads, &fewest);
      }));
    DCOMM_RETURN_IF_ERROR(occupancy_of(reinterpret_cast<const void*>(&detail::p2p_kernel), threads, &fewest));
    if (fewest < 1)
      return make_error(ErrorCode::kOutOfResources, "no collective kernel of ", threads,
                        " threads fits on one multiprocessor of CUDA device ", device_, " (lower DCOMM_CUDA_THREADS)");
    return fewest;
  }

  Status device_alloc(void** p, size_t bytes) {
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMalloc(p, bytes), "cudaMalloc"));
    device_allocs_.push_back(*p);
    return cuda_status(cudaMemset(*p, 0, bytes), "cudaMemset");
  }
  template <class T>
  Status upload(const std::vector<T>& v, T** out) {
    void* p = nullptr;
    DCOMM_RETURN_IF_ERROR(device_alloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)));
    *out = static_cast<T*>(p);
    return cuda_status(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  bool same_process(int r) const { return host_.peer(r).process_id == host_.peer(rank()).process_id; }

  Status start_watchdog() {
    watchdog_ = std::thread([this] {
      while (!stop_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        if (host_.aborted() && !control_->abort) control_->abort = 1;
        const int code = __atomic_load_n(&control_->error.code, __ATOMIC_ACQUIRE);
        if (code && !reported_) {
          reported_ = true;
          __atomic_thread_fence(__ATOMIC_ACQUIRE);
          const DeviceError e = control_->error;
          Status s = make_error(e.code == DeviceStatus::kTimeout ? ErrorCode::kTimeout : ErrorCode::kAborted,
                                "a kernel on rank ", rank(), " (CUDA device ", device_, ", channel ", e.channel, ") ",
                                e.code == DeviceStatus::kTimeout ? "timed out" : "was aborted", " waiting for ",
                                e.waiting_for_data ? "data from " : "room at ", host_.peer(e.peer).describe());
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

  // Arguments checked on the host before anything is enqueued: the host path's checks
  // (comm/op.hpp), then where the buffers are.
  Status precheck(const OpDesc& d) const {
    Status s = validate(d, rank(), size());
    if (s.ok()) s = error().with_context("the device communicator failed earlier");
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
    DCOMM_RETURN_IF_ERROR(same_stream(op, stream));
    if (staged_only_) return staging_->enqueue(d, send_elems * eb, recv_elems * eb, stream);
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
    pending_.push_back({w, bytes ? DataType::kUint8 : d.type});
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
    DCOMM_RETURN_IF_ERROR(same_stream(op, stream));
    if (staged_only_)
      return make_error(ErrorCode::kUnsupported, op, " on rank ", rank(),
                        ": device send/recv between hosts is not staged yet; use the host communicator");
    if (!add_p2p_item(p2p_, {m.buffer, bytes, m.peer, is_send ? 1 : 0}))
      return invalid_argument(op, " on rank ", rank(), ": more than ", DeviceP2pWork::kMaxItems,
                              " send/recv calls in one group");
    return group_depth_ ? Status{} : flush();
  }

  Status same_stream(const char* op, cudaStream_t stream) {
    if (group_depth_ && has_stream_ && stream != group_stream_)
      return invalid_argument(op, " on rank ", rank(), ": every call of a group must use one stream");
    group_stream_ = stream;
    has_stream_ = true;
    return {};
  }

  // Launches what the group (or the single call) holds: collectives in call order, then one
  // kernel for all sends and receives.
  Status flush() {
    has_stream_ = false;
    auto pending = std::move(pending_);
    pending_.clear();
    DeviceP2pWork p2p = p2p_;
    p2p_ = DeviceP2pWork{};
    for (const auto& c : pending) {
      dispatch_type(c.type, [&]<class T>() {
        detail::coll_kernel<T><<<cfg_.channels, cfg_.threads, 0, group_stream_>>>(c.work);
        return 0;
      });
      DCOMM_RETURN_IF_ERROR(
          cuda_status(cudaGetLastError(), detail::cat("launching a collective kernel on rank ", rank())));
    }
    int to_self = 0;  // sends to this rank minus receives from it: the copy needs both
    for (int i = 0; i < p2p.nitems; ++i)
      if (p2p.items[i].peer == rank()) to_self += p2p.items[i].is_send ? 1 : -1;
    if (to_self != 0)
      return invalid_argument("send/recv on rank ", rank(),
                              ": a send to this rank and its receive must be in one group (",
                              to_self > 0 ? "a send has no receive" : "a receive has no send", ")");
    if (p2p.nitems) {
      // A lane's blocks must all be resident with the peers' (a send waits for their
      // receives): few per lane, the same number on every rank.
      p2p.channels = cfg_.p2p_channels;
      p2p.conn_channels = cfg_.channels;
      p2p.rank = rank();
      p2p.send_conns = send_conns_;
      p2p.recv_conns = recv_conns_;
      p2p.ctl = ctl_;
      detail::p2p_kernel<<<p2p.nlanes * p2p.channels, cfg_.threads, 0, group_stream_>>>(p2p);
      DCOMM_RETURN_IF_ERROR(
          cuda_status(cudaGetLastError(), detail::cat("launching a send/recv kernel on rank ", rank())));
    }
    return {};
  }

  struct PendingColl {
    DeviceCollWork work;
    DataType type;
  };

  Communicator& host_;
  int device_;
  DeviceConfig cfg_;
  bool staged_only_ = false;
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
  int group_depth_ = 0;
  bool has_stream_ = false;
  cudaStream_t group_stream_ = nullptr;
  std::vector<PendingColl> pending_;
  DeviceP2pWork p2p_{};
  std::unique_ptr<DeviceStaging> staging_;  // another host in the communicator
  mutable std::mutex mu_;
  Status error_;
  std::atomic<bool> stop_{false};
  bool reported_ = false;
  bool ready_ = false;  // set-up completed on this rank (the destructor meets the others)
  std::thread watchdog_;
};

DCOMM_NAMESPACE_END
