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
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/device_plan.hpp"
#include "dcomm/comm/device_work.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/reduce/kernels.cuh"
#include "dcomm/transport/shm.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// Up to 512 threads a block (DCOMM_CUDA_THREADS). The bound gives the kernels up to 128
// registers a thread, which they use without spilling (at 1024 threads, 64 registers, the
// reduction loops spilled); one block fills a multiprocessor's registers, so channels, not
// threads, scale a collective across the GPU.
constexpr int kMaxThreads = 512;

// Makes `device` current for a scope and restores the caller's: a call on this communicator
// must reach its own GPU whatever the calling thread had selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cudaSetDevice(device);
    else previous_ = -1;
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};
}  // namespace detail

// Sizes of the device path (environment: DCOMM_CUDA_CHANNELS, DCOMM_CUDA_P2P_CHANNELS,
// DCOMM_CUDA_THREADS, DCOMM_CUDA_SLOTS, DCOMM_CUDA_SLOT_BYTES, DCOMM_CUDA_P2P_DISABLE).
struct DeviceConfig {
  int channels = 0;                // blocks per collective, each its own ring; 0: by the GPUs
  int p2p_channels = 2;            // blocks per peer and direction in a send/recv group
  int threads = 512;               // threads per block
  uint32_t nslots = 4;             // slots per FIFO
  uint32_t slot_bytes = 256 << 10;  // bytes per slot
  bool p2p_disable = false;         // pinned host memory between every pair

  static Result<DeviceConfig> from_env() {
    DeviceConfig c;
    auto ch = env_size("DCOMM_CUDA_CHANNELS", c.channels, 0, kMaxDeviceChannels);
    auto pc = env_size("DCOMM_CUDA_P2P_CHANNELS", c.p2p_channels, 1, kMaxDeviceChannels);
    auto th = env_size("DCOMM_CUDA_THREADS", c.threads, 32, detail::kMaxThreads);
    auto sl = env_size("DCOMM_CUDA_SLOTS", c.nslots, 2, 64);
    auto sb = env_size("DCOMM_CUDA_SLOT_BYTES", c.slot_bytes, 1024, 64u << 20);
    for (const Status& s : {ch.status(), pc.status(), th.status(), sl.status(), sb.status()}) DCOMM_RETURN_IF_ERROR(s);
    c.channels = static_cast<int>(*ch);
    c.p2p_channels = static_cast<int>(*pc);
    c.threads = static_cast<int>(*th) / 32 * 32;
    c.nslots = static_cast<uint32_t>(*sl);
    c.slot_bytes = static_cast<uint32_t>(*sb) / 16 * 16;
    c.p2p_disable = env_or("DCOMM_CUDA_P2P_DISABLE", "0") != "0";
    return c;
  }
};

namespace detail {
template <class T>
__global__ void __launch_bounds__(kMaxThreads) coll_kernel(DeviceCollWork w) {
  run_coll_channel<BlockTeam, T>(BlockTeam{}, w, static_cast<int>(blockIdx.x));
}
__global__ void __launch_bounds__(kMaxThreads) p2p_kernel(DeviceP2pWork w) { run_p2p_block(BlockTeam{}, w, static_cast<int>(blockIdx.x)); }

// The arena's layout: for peer p and channel c, the FIFO from p (slots, then its posted
// counter), the freed counter of the FIFO to p, and this rank's step counters.
struct ArenaLayout {
  size_t ranks, channels, fifo_bytes;
  static constexpr size_t kLine = 128;  // counters on their own cache lines
  size_t index(int p, int c) const { return static_cast<size_t>(p) * channels + static_cast<size_t>(c); }
  size_t slots(int p, int c) const { return index(p, c) * fifo_bytes; }
  size_t posted(int p, int c) const { return ranks * channels * fifo_bytes + index(p, c) * kLine; }
  size_t freed(int p, int c) const { return ranks * channels * (fifo_bytes + kLine) + index(p, c) * kLine; }
  size_t step(int p, int c, int role) const { return ranks * channels * (fifo_bytes + 2 * kLine) + (index(p, c) * 2 + static_cast<size_t>(role)) * 8; }
  size_t bytes() const { return ranks * channels * (fifo_bytes + 2 * kLine + 16); }
};

// What ranks swap once the pair paths are agreed: where each arena is.
struct DeviceFacts {
  int host_arena = 0;
  cudaIpcMemHandle_t ipc{};
  uint64_t device_arena = 0;  // pointer value, for ranks of the same process
  uint64_t host_arena_ptr = 0;
  char shm_path[256] = {};  // the pinned host arena's file (in DCOMM_SHM_DIR)
};
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
    for (void* p : opened_ipc_) cudaIpcCloseMemHandle(p);
    for (auto& m : mapped_host_) cudaHostUnregister(m.get());
    mapped_host_.clear();
    if (ready_ && !staged_only_ && size() > 1 && !host_.aborted()) host_.barrier().ignore();
    if (host_arena_) cudaHostUnregister(host_arena_);
    host_arena_map_.reset();  // unmaps it and removes its file
    if (device_arena_) cudaFree(device_arena_);
    for (void* p : device_allocs_) cudaFree(p);
    if (control_) cudaFreeHost(control_);
    for (auto& s : staged_) cudaFreeHost(s->buf);
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
    return coll("all_reduce", DeviceCollKind::kAllReduce, send, recv, count, count, count, type, op, 0, stream);
  }
  Status reduce_scatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op, cudaStream_t stream) {
    return coll("reduce_scatter", DeviceCollKind::kReduceScatter, send, recv, recv_count, recv_count * usize(), recv_count, type,
                op, 0, stream);
  }
  Status all_gather(const void* send, void* recv, size_t send_count, DataType type, cudaStream_t stream) {
    return coll("all_gather", DeviceCollKind::kAllGather, send, recv, send_count, send_count, send_count * usize(), type,
                ReduceOp::kSum, 0, stream);
  }
  Status broadcast(const void* send, void* recv, size_t count, DataType type, int root, cudaStream_t stream) {
    return coll("broadcast", DeviceCollKind::kBroadcast, send, recv, count, rank() == root ? count : 0, count, type,
                ReduceOp::kSum, root, stream);
  }
  Status reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root, cudaStream_t stream) {
    return coll("reduce", DeviceCollKind::kReduce, send, recv, count, count, rank() == root ? count : 0, type, op, root,
                stream);
  }
  Status send(const void* buf, size_t count, DataType type, int peer, cudaStream_t stream) {
    return p2p("send", const_cast<void*>(buf), count, type, peer, true, stream);
  }
  Status recv(void* buf, size_t count, DataType type, int peer, cudaStream_t stream) {
    return p2p("recv", buf, count, type, peer, false, stream);
  }
  // Every rank's earlier work on its stream is done before later work on this stream starts.
  Status barrier(cudaStream_t stream) {
    return coll("barrier", DeviceCollKind::kAllReduce, barrier_buf_, barrier_buf_, 1, 1, 1, DataType::kInt32,
                ReduceOp::kSum, 0, stream);
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
  struct Staged {  // one staged call's pinned buffers and the host call to run
    DeviceCommunicator* self;
    void* buf = nullptr;
    size_t bytes = 0;
    std::function<Status(char*)> run;
    std::atomic<bool> busy{false};
    bool keep = false;  // captured in a graph: never reused
  };

  DeviceCommunicator(Communicator& host, int device, const DeviceConfig& cfg) : host_(host), device_(device), cfg_(cfg) {}
  size_t usize() const { return static_cast<size_t>(size()); }

  Status set_up() {
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device_), detail::cat("cudaSetDevice(", device_, ")")));
    const int n = size(), me = rank();
    staged_only_ = false;
    for (int r = 0; r < n; ++r)
      if (!host_.same_host(r)) staged_only_ = true;
    // Control block in mapped host memory: the host raises `abort`, kernels write `error`.
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(reinterpret_cast<void**>(&control_), sizeof(Control), cudaHostAllocMapped), "cudaHostAlloc"));
    std::memset(control_, 0, sizeof(Control));
    Control* dev_control = nullptr;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_control), control_, 0), "cudaHostGetDevicePointer"));
    ctl_.abort = &dev_control->abort;
    ctl_.error = &dev_control->error;
    ctl_.timeout_ns = static_cast<uint64_t>(host_.config().timeout.count()) * 1000000ull;
    DCOMM_RETURN_IF_ERROR(device_alloc(&barrier_buf_, 16));

    // 1. Which GPU each rank has, the channels and FIFO shape every rank uses, and which pairs
    // go through host memory (comm/device_plan.hpp: the same answers on every rank).
    DeviceRankFacts mine;
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, device_), "cudaDeviceGetPCIBusId"));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaDeviceGetAttribute(&mine.sms, cudaDevAttrMultiProcessorCount, device_), "cudaDeviceGetAttribute"));
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
              " multiprocessors, ", mine.resident_per_sm, " blocks of ", cfg_.threads, " threads each): ", cfg_.channels,
              " channels (", limited_by, ")");
    std::vector<uint8_t> wants_host(usize(), 0), all_wants(usize() * usize(), 0);
    std::vector<int> peer_device(usize(), -1);
    for (int r = 0; r < n; ++r) {
      if (r == me || staged_only_) continue;
      const auto& f = facts[static_cast<size_t>(r)];
      const bool same_gpu = std::strcmp(f.bus_id, mine.bus_id) == 0;
      int can = 0;
      if (!same_gpu && cudaDeviceGetByPCIBusId(&peer_device[static_cast<size_t>(r)], f.bus_id) == cudaSuccess)
        cudaDeviceCanAccessPeer(&can, device_, peer_device[static_cast<size_t>(r)]);
      cudaGetLastError();
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
      if (!pair_host_[static_cast<size_t>(r)] && peer_dev >= 0 && peer_dev != device_) {
        cudaError_t e = cudaDeviceEnablePeerAccess(peer_dev, 0);
        if (e != cudaErrorPeerAccessAlreadyEnabled) DCOMM_RETURN_IF_ERROR(cuda_status(e, "cudaDeviceEnablePeerAccess"));
        cudaGetLastError();
      }
    }
    if (staged_only_) return start_watchdog();

    // 2. Arenas: device memory always, pinned shared host memory when some pair needs it.
    detail::DeviceFacts where;
    std::vector<detail::DeviceFacts> arenas(usize());
    layout_ = {usize(), static_cast<size_t>(cfg_.channels), static_cast<size_t>(cfg_.nslots) * cfg_.slot_bytes};
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMalloc(&device_arena_, layout_.bytes()), detail::cat("cudaMalloc of ", layout_.bytes(), " bytes of FIFOs")));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemset(device_arena_, 0, layout_.bytes()), "cudaMemset"));
    bool other_process = false;  // CUDA IPC only where some peer needs it
    for (int r = 0; r < n; ++r) other_process = other_process || host_.peer(r).process_id != host_.peer(me).process_id;
    if (other_process)
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaIpcGetMemHandle(&where.ipc, device_arena_), "cudaIpcGetMemHandle"));
    where.device_arena = reinterpret_cast<uintptr_t>(device_arena_);
    if (any_host) {
      const std::string& dir = host_.config().shm_dir;
      detail::sweep_dead_shm(dir);
      const std::string path = detail::cat(dir, "/", detail::unique_shm_name(detail::cat("cuda", me)));
      if (path.size() >= sizeof where.shm_path)
        return invalid_argument("DCOMM_SHM_DIR '", dir, "' is too long for the device arena's file name");
      DCOMM_RETURN_IF_ERROR(map_host_arena(path, true, &host_arena_));
      std::snprintf(where.shm_path, sizeof where.shm_path, "%s", path.c_str());
      where.host_arena = 1;
      where.host_arena_ptr = reinterpret_cast<uintptr_t>(host_arena_);
    }
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize"));
    DCOMM_RETURN_IF_ERROR(host_.all_gather(&where, arenas.data(), sizeof where, DataType::kUint8));

    // 3. Map the peers' arenas; the device sees each pair's memory at these addresses.
    std::vector<char*> peer_dev(usize(), nullptr), peer_host(usize(), nullptr);
    for (int r = 0; r < n; ++r) {
      const auto& f = arenas[static_cast<size_t>(r)];
      const bool same_process = host_.peer(r).process_id == host_.peer(me).process_id;
      if (r == me) {
        peer_dev[static_cast<size_t>(r)] = static_cast<char*>(device_arena_);
        peer_host[static_cast<size_t>(r)] = host_arena_ ? device_view(host_arena_) : nullptr;
        continue;
      }
      if (same_process) {
        peer_dev[static_cast<size_t>(r)] = reinterpret_cast<char*>(static_cast<uintptr_t>(f.device_arena));
        if (f.host_arena) {  // registered by its owner in this process: the same device address
          char* dp = nullptr;
          DCOMM_RETURN_IF_ERROR(cuda_status(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dp), reinterpret_cast<void*>(static_cast<uintptr_t>(f.host_arena_ptr)), 0), "cudaHostGetDevicePointer"));
          peer_host[static_cast<size_t>(r)] = dp;
        }
      } else {
        void* p = nullptr;
        DCOMM_RETURN_IF_ERROR(cuda_status(cudaIpcOpenMemHandle(&p, f.ipc, cudaIpcMemLazyEnablePeerAccess),
                                          detail::cat("cudaIpcOpenMemHandle of rank ", r, "'s FIFOs")));
        opened_ipc_.push_back(p);
        peer_dev[static_cast<size_t>(r)] = static_cast<char*>(p);
        if (f.host_arena) {
          void* hp = nullptr;
          DCOMM_RETURN_IF_ERROR(map_host_arena(f.shm_path, false, &hp));
          peer_host[static_cast<size_t>(r)] = device_view(hp);
        }
      }
    }
    // 4. Connections: the FIFO p -> q lives in q's arena of the pair's kind.
    auto arena = [&](int owner, int other) {
      return pair_host_[static_cast<size_t>(other == rank() ? owner : other)] ? peer_host[static_cast<size_t>(owner)]
                                                                             : peer_dev[static_cast<size_t>(owner)];
    };
    const int C = cfg_.channels;
    std::vector<DeviceConn> sends(usize() * static_cast<size_t>(C)), recvs(sends.size());
    char* local_dev = static_cast<char*>(device_arena_);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      for (int c = 0; c < C; ++c) {
        char* theirs = arena(p, me);  // p's arena, where my FIFO to p lives
        char* mine_a = arena(me, p);  // my arena, where p's FIFO to me lives
        if (!theirs || !mine_a) return make_error(ErrorCode::kInternal, "no arena for the pair with rank ", p);
        auto& s = sends[layout_.index(p, c)];
        s = {theirs + layout_.slots(me, c), reinterpret_cast<uint64_t*>(theirs + layout_.posted(me, c)),
             reinterpret_cast<uint64_t*>(mine_a + layout_.freed(p, c)), reinterpret_cast<uint64_t*>(local_dev + layout_.step(p, c, 0)),
             cfg_.nslots, cfg_.slot_bytes, p};
        auto& rv = recvs[layout_.index(p, c)];
        rv = {mine_a + layout_.slots(p, c), reinterpret_cast<uint64_t*>(mine_a + layout_.posted(p, c)),
              reinterpret_cast<uint64_t*>(theirs + layout_.freed(me, c)), reinterpret_cast<uint64_t*>(local_dev + layout_.step(p, c, 1)),
              cfg_.nslots, cfg_.slot_bytes, p};
      }
    }
    // The ring in the host communicator's order (the topology's): from prev, to next.
    const auto& order = host_.ring_order();
    pos_of_.assign(usize(), 0);
    for (int i = 0; i < n; ++i) pos_of_[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
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
  char* device_view(void* host) {
    void* d = nullptr;
    return cudaHostGetDevicePointer(&d, host, 0) == cudaSuccess ? static_cast<char*>(d) : nullptr;
  }
  // A shared-memory arena (transport/shm.hpp's regions: pages reserved, in DCOMM_SHM_DIR),
  // registered with CUDA as mapped pinned memory: this rank's own (create) or a peer's.
  Status map_host_arena(const std::string& path, bool create, void** out) {
    const size_t bytes = layout_.bytes();
    auto m = create ? detail::create_shm_region(path, bytes, host_.config().shm_dir, "the device path's pinned host FIFOs")
                    : detail::open_shm_region(path, bytes, /*unlink_now=*/false, "device-path host arena",
                                              "do all ranks set the same DCOMM_CUDA_CHANNELS, _SLOTS and _SLOT_BYTES?");
    if (!m.ok()) return m.status();
    void* p = m->get();
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) return cuda_status(e, detail::cat("cudaHostRegister of ", path));
    if (create) host_arena_map_.emplace(std::move(*m));
    else mapped_host_.push_back(std::move(*m));
    *out = p;
    return {};
  }

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

  // Arguments checked on the host before anything is enqueued.
  Status check_buffer(const char* op, const char* which, const void* p, size_t bytes) const {
    if (bytes == 0) return {};
    if (!p) return invalid_argument(op, " on rank ", rank(), ": ", which, " is null for ", bytes, " bytes");
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();
      return invalid_argument(op, " on rank ", rank(), ": ", which, " (", p, ") is not CUDA device memory");
    }
    if (a.type == cudaMemoryTypeDevice && a.device != device_)
      return invalid_argument(op, " on rank ", rank(), ": ", which, " is on CUDA device ", a.device,
                              ", this communicator's is ", device_);
    return {};
  }
  Status precheck(const char* op, DataType type, ReduceOp reduce_op, int root) const {
    if (!is_valid(type)) return invalid_argument(op, " on rank ", rank(), ": unknown data type ", static_cast<int>(type));
    if (!is_valid(reduce_op)) return invalid_argument(op, " on rank ", rank(), ": unknown reduction op ", static_cast<int>(reduce_op));
    if (root < 0 || root >= size()) return invalid_argument(op, " on rank ", rank(), ": root/peer ", root, " is not a rank of 0..", size() - 1);
    Status e = error();
    if (!e.ok()) return e.with_context(detail::cat(op, " on rank ", rank(), ": the device communicator failed earlier"));
    return {};
  }

  Status coll(const char* op, DeviceCollKind kind, const void* send, void* recv, size_t count, size_t send_elems,
              size_t recv_elems, DataType type, ReduceOp rop, int root, cudaStream_t stream) {
    detail::DeviceGuard on(device_);
    DCOMM_RETURN_IF_ERROR(precheck(op, type, rop, root));
    const size_t eb = size_of(type);
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the send buffer", send, send_elems * eb));
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the receive buffer", recv, recv_elems * eb));
    DCOMM_RETURN_IF_ERROR(same_stream(op, stream));
    if (staged_only_) return staged(op, kind, send, recv, count, send_elems, recv_elems, type, rop, root, stream);
    const bool bytes = copy_only(kind);
    DeviceCollWork w;
    w.kind = kind;
    w.send = send ? send : recv;
    w.recv = recv ? recv : const_cast<void*>(send);
    w.count = bytes ? count * eb : count;
    w.pos = pos_of_[static_cast<size_t>(rank())];
    w.size = size();
    w.root_pos = pos_of_[static_cast<size_t>(root)];
    w.block_of = block_of_;
    w.op = bytes ? ReduceOp::kSum : rop;
    w.divide_by = rop == ReduceOp::kAvg && size() > 1 ? size() : 0;
    w.channels = cfg_.channels;
    w.conns = ring_conns_;
    w.ctl = ctl_;
    pending_.push_back({w, bytes ? DataType::kUint8 : type});
    return group_depth_ ? Status{} : flush();
  }

  Status p2p(const char* op, void* buf, size_t count, DataType type, int peer, bool is_send, cudaStream_t stream) {
    detail::DeviceGuard on(device_);
    DCOMM_RETURN_IF_ERROR(precheck(op, type, ReduceOp::kSum, peer));
    DCOMM_RETURN_IF_ERROR(check_buffer(op, "the buffer", buf, count * size_of(type)));
    DCOMM_RETURN_IF_ERROR(same_stream(op, stream));
    if (staged_only_)
      return make_error(ErrorCode::kUnsupported, op, " on rank ", rank(),
                        ": device send/recv between hosts is not staged yet; use the host communicator");
    if (!add_p2p_item(p2p_, {buf, count * size_of(type), peer, is_send ? 1 : 0}))
      return invalid_argument(op, " on rank ", rank(), ": more than ", DeviceP2pWork::kMaxItems, " send/recv calls in one group");
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
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), detail::cat("launching a collective kernel on rank ", rank())));
    }
    int to_self = 0;  // sends to this rank minus receives from it: the copy needs both
    for (int i = 0; i < p2p.nitems; ++i)
      if (p2p.items[i].peer == rank()) to_self += p2p.items[i].is_send ? 1 : -1;
    if (to_self != 0)
      return invalid_argument("send/recv on rank ", rank(), ": a send to this rank and its receive must be in one group (",
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
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), detail::cat("launching a send/recv kernel on rank ", rank())));
    }
    return {};
  }

  // Another host in the communicator: copy the input to pinned memory, run the host collective
  // from a host function on the stream, copy the result back. The host function blocks the
  // stream (and CUDA's callback thread) while the host communicator works, so one rank per
  // process on this path.
  Status staged(const char* op, DeviceCollKind kind, const void* send, void* recv, size_t count, size_t send_elems,
                size_t recv_elems, DataType type, ReduceOp rop, int root, cudaStream_t stream) {
    const size_t eb = size_of(type), in_bytes = send_elems * eb, out_bytes = recv_elems * eb;
    Staged* s = staging_for(in_bytes + out_bytes);
    if (!s) return make_error(ErrorCode::kOutOfResources, op, " on rank ", rank(), ": cannot allocate ", in_bytes + out_bytes, " bytes of pinned staging memory");
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &cs);
    s->keep = cs != cudaStreamCaptureStatusNone;
    Communicator& h = host_;
    s->run = [&h, kind, in_bytes, count, type, rop, root](char* buf) -> Status {
      char* in = buf;
      char* out = buf + in_bytes;
      switch (kind) {
        case DeviceCollKind::kAllReduce: return h.all_reduce(in, out, count, type, rop);
        case DeviceCollKind::kReduceScatter: return h.reduce_scatter(in, out, count, type, rop);
        case DeviceCollKind::kAllGather: return h.all_gather(in, out, count, type);
        case DeviceCollKind::kBroadcast: return h.broadcast(in, out, count, type, root);
        case DeviceCollKind::kReduce: return h.reduce(in, out, count, type, rop, root);
      }
      return {};
    };
    char* buf = static_cast<char*>(s->buf);
    if (in_bytes) DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(buf, send, in_bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync"));
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaLaunchHostFunc(stream, &DeviceCommunicator::run_staged, s), "cudaLaunchHostFunc"));
    if (out_bytes) DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(recv, buf + in_bytes, out_bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync"));
    return {};
  }
  static void CUDART_CB run_staged(void* arg) {
    auto* s = static_cast<Staged*>(arg);
    Status st = s->run(static_cast<char*>(s->buf));
    if (!st.ok()) s->self->set_error(st.with_context("a staged device call"));
    if (!s->keep) s->busy = false;
  }
  Staged* staging_for(size_t bytes) {
    for (auto& s : staged_) {
      bool idle = false;
      if (!s->keep && s->bytes >= bytes && s->busy.compare_exchange_strong(idle, true)) return s.get();
    }
    auto s = std::make_unique<Staged>();
    s->self = this;
    s->bytes = std::max<size_t>(bytes, 1);
    if (cudaMallocHost(&s->buf, s->bytes) != cudaSuccess) return nullptr;
    s->busy = true;
    staged_.push_back(std::move(s));
    return staged_.back().get();
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
  detail::ArenaLayout layout_{};
  void* device_arena_ = nullptr;
  void* host_arena_ = nullptr;
  std::vector<void*> opened_ipc_;
  std::optional<detail::ShmMapping> host_arena_map_;  // this rank's pinned host arena
  std::vector<detail::ShmMapping> mapped_host_;       // the peers' pinned host arenas
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
  std::vector<std::unique_ptr<Staged>> staged_;
  mutable std::mutex mu_;
  Status error_;
  std::atomic<bool> stop_{false};
  bool reported_ = false;
  bool ready_ = false;  // set-up completed on this rank (the destructor meets the others)
  std::thread watchdog_;
};

DCOMM_NAMESPACE_END
