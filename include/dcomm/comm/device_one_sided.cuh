// One-sided windows on device memory, between GPUs that share memory (one host; peer access
// over NVLink or PCIe, or the same GPU): what NCCL 2.30's ncclPutSignal / ncclSignal /
// ncclWaitSignal and ncclGetPeerDevicePointer do on device windows, stream-ordered.
//
// DeviceOneSided::create (collective) gives each rank a block of signal counters in device
// memory ([from][context][signal], 64 a context, as OneSided's), shared with its peers: the
// plain pointer for a rank of this process, a CUDA IPC handle for another. register_window
// (collective) shares every rank's buffer likewise (its allocation's IPC handle and the offset
// into it), so each rank holds a pointer to every reachable peer's part. On `stream`:
// - put: a copy kernel into the peer's window, then, if asked, a one-thread kernel
//   that adds 1 to the peer's counter at system scope after a system fence; the copy is done
//   before the kernel starts (stream order), so a waiter that sees the count sees the data;
// - wait: a one-thread kernel that polls this rank's counters until each has risen by its
//   count since the last wait consumed it (the counts are consumed when the wait is enqueued),
//   under the communicator's deadline; one that ends there writes which counter into pinned
//   host memory and error() names the peer, signal and context.
// A peer on another host, or on a GPU this one has no peer access to, cannot be reached this
// way: a put or signal to it is refused naming it (NCCL reaches those through GIN, which dcomm
// does not back). Memory from cudaMalloc (torch's caching allocator included) shares through
// CUDA IPC; memory of the virtual memory API (cuMemCreate) does not, and its registration fails.
// Calls on one DeviceOneSided come from one thread.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/one_sided.hpp"
#include "dcomm/core/cuda.cuh"
#include "dcomm/prims/device_prims.hpp"
#include "dcomm/reduce/kernels.cuh"
#include "dcomm/transport/cuda_ipc.cuh"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// After the copy before it on the stream: publish it, then count.
__global__ void one_sided_signal(unsigned long long* counter) {
  __threadfence_system();
  atomicAdd_system(counter, 1ULL);
}

struct SignalTarget {
  const uint64_t* counter;
  uint64_t want;
  int index;  // the counter's index in its block, for the error
};
struct SignalWaits {
  static constexpr int kMax = 16;
  SignalTarget at[kMax];
  int n = 0;
  uint64_t timeout_ns = 0;
  volatile int* failed = nullptr;  // pinned host: 1 + the index that did not come; stop (-1) ends the wait
};
__global__ void one_sided_wait(SignalWaits w) {
  const uint64_t start = now_ns();
  for (int i = 0; i < w.n; ++i)
    while (load_acquire(w.at[i].counter) < w.at[i].want) {
      if (*w.failed < 0) return;  // destroyed or aborted
      if (now_ns() - start > w.timeout_ns) {
        if (*w.failed == 0) *w.failed = 1 + w.at[i].index;
        __threadfence_system();
        return;
      }
      __nanosleep(256);
    }
}

// The start of the allocation holding `p` (CUDA IPC shares whole allocations), through the
// driver's cuMemGetAddressRange, reached by the runtime so that nothing links libcuda.
inline Result<char*> allocation_base(const void* p) {
  using GetRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  static GetRange get = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    cudaGetLastError();
    return reinterpret_cast<GetRange>(fn);
  }();
  if (!get) return make_error(ErrorCode::kSystemError, "the CUDA driver has no cuMemGetAddressRange");
  CUdeviceptr base = 0;
  size_t bytes = 0;
  if (get(&base, &bytes, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return invalid_argument("device memory at ", p, " is not a CUDA allocation of this process");
  return reinterpret_cast<char*>(base);
}
}  // namespace detail

class DeviceOneSided {
 public:
  static constexpr int kSignals = OneSided::kSignals;
  using WaitFor = OneSided::WaitFor;

  // Collective over `comm`: this rank on CUDA device `device`; contexts as NCCL's numRmaCtx.
  static Result<std::unique_ptr<DeviceOneSided>> create(Communicator& comm, int device, int contexts = 1) {
    if (contexts < 1 || contexts > 64) return invalid_argument("one-sided: ", contexts, " contexts (1 to 64)");
    std::unique_ptr<DeviceOneSided> o(new DeviceOneSided(comm, device, contexts));
    Status s = o->set_up();
    if (!s.ok())
      return s.with_context(detail::cat("device one-sided on rank ", comm.rank(), " (CUDA device ", device, ")"));
    return o;
  }
  ~DeviceOneSided() {
    detail::DeviceGuard on(device_);
    if (failed_) *failed_ = -1;               // a wait still polling ends
    for (auto& [stream, done] : launched_) {  // this object's launches (not the whole GPU's work)
      cudaEventSynchronize(done);
      cudaEventDestroy(done);
    }
    for (void* p : opened_) cudaIpcCloseMemHandle(p);
    signals_.close_peers();
    if (!comm_.aborted() && comm_.size() > 1) comm_.barrier().ignore();  // nobody maps ours any more
    signals_.release();
    if (failed_) cudaFreeHost(const_cast<int*>(failed_));
  }
  DeviceOneSided(const DeviceOneSided&) = delete;
  DeviceOneSided& operator=(const DeviceOneSided&) = delete;

  // Collective: every rank's part of a new window, in device memory on this rank's GPU (null
  // when bytes is 0); its id, the same on every rank.
  Result<int> register_window(void* buf, size_t bytes) {
    detail::DeviceGuard on(device_);
    Part mine;
    mine.bytes = bytes;
    if (bytes) {
      auto base = detail::allocation_base(buf);
      if (!base.ok()) return base.status().with_context("register_window");
      mine.base = reinterpret_cast<uint64_t>(*base);
      mine.offset = static_cast<uint64_t>(static_cast<char*>(buf) - *base);
      if (ipc_)
        DCOMM_RETURN_IF_ERROR(
            cuda_status(cudaIpcGetMemHandle(&mine.ipc, *base), "register_window: cudaIpcGetMemHandle"));
    }
    std::vector<Part> all(static_cast<size_t>(comm_.size()));
    DCOMM_RETURN_IF_ERROR(comm_.all_gather(&mine, all.data(), sizeof(Part), DataType::kUint8));
    std::vector<Window> w(all.size());
    for (size_t p = 0; p < all.size(); ++p) {
      w[p].bytes = all[p].bytes;
      if (!reach_[p] || !all[p].bytes) continue;
      char* base = reinterpret_cast<char*>(all[p].base);
      if (!same_process(static_cast<int>(p))) {
        void* opened = nullptr;
        DCOMM_RETURN_IF_ERROR(cuda_status(cudaIpcOpenMemHandle(&opened, all[p].ipc, cudaIpcMemLazyEnablePeerAccess),
                                          detail::cat("register_window: cudaIpcOpenMemHandle of ",
                                                      comm_.peer(static_cast<int>(p)).describe(), "'s window")));
        opened_.push_back(opened);
        base = static_cast<char*>(opened);
      }
      w[p].at = base + all[p].offset;
    }
    windows_.push_back(std::move(w));
    return static_cast<int>(windows_.size()) - 1;
  }
  // Local: the window can no longer be reached from here (its mappings close with this object).
  void deregister_window(int id) {
    if (id >= 0 && static_cast<size_t>(id) < windows_.size()) windows_[static_cast<size_t>(id)].clear();
  }

  // A pointer to `peer`'s part of window `id` at `offset` that this rank's kernels can use, or
  // null (not reachable, no such window, offset past it).
  void* peer_pointer(int peer, int id, size_t offset) const {
    const Window* w = window(peer, id);
    return w && w->at && offset < w->bytes ? w->at + offset : nullptr;
  }
  size_t window_bytes(int peer, int id) const {
    const Window* w = window(peer, id);
    return w ? w->bytes : 0;
  }

  Status put(const void* src, size_t bytes, int peer, int id, size_t offset, int signal, int context,
             cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(check(peer, signal < 0 ? 0 : signal, context, "put"));
    const Window* w = window(peer, id);
    if (!w) return invalid_argument("put on rank ", comm_.rank(), ": window ", id, " is not registered");
    if (offset > w->bytes || bytes > w->bytes - offset)
      return invalid_argument("put on rank ", comm_.rank(), ": ", bytes, " bytes at offset ", offset, " run past rank ",
                              peer, "'s window of ", w->bytes, " bytes");
    DCOMM_RETURN_IF_ERROR(check_device_buffer(src, bytes, device_, "the source").with_context([&] {
      return detail::cat("put on rank ", comm_.rank());
    }));
    detail::DeviceGuard on(device_);
    // A copy kernel, not cudaMemcpyAsync: a copy between two addresses of one GPU's memory
    // does not run beside other streams' work (CUDA's implicit synchronization), so with a
    // peer's wait kernel already spinning on the same GPU it waited for that wait's deadline
    // (seen on the first H200 run).
    if (bytes)
      DCOMM_RETURN_IF_ERROR(copy_on_device(w->at + offset, nullptr, src, bytes, stream).with_context([&] {
        return detail::cat("put to ", comm_.peer(peer).describe());
      }));
    DCOMM_RETURN_IF_ERROR(signal >= 0 ? add_signal(peer, signal, context, stream) : Status{});
    return note_launch(stream);
  }
  Status signal(int peer, int signal, int context, cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(check(peer, signal, context, "signal"));
    detail::DeviceGuard on(device_);
    DCOMM_RETURN_IF_ERROR(add_signal(peer, signal, context, stream));
    return note_launch(stream);
  }
  // Enqueues the wait on `stream` and consumes the counts (see the top of this file).
  Status wait(const std::vector<WaitFor>& what, cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(error());
    for (const WaitFor& w : what) {
      if (w.peer < 0 || w.peer >= comm_.size())
        return invalid_argument("wait on rank ", comm_.rank(), ": peer ", w.peer, " is out of range");
      if (w.signal < 0 || w.signal >= kSignals || w.context < 0 || w.context >= contexts_ || w.count < 0)
        return invalid_argument("wait on rank ", comm_.rank(), ": signal ", w.signal, ", context ", w.context,
                                ", count ", w.count, " (", kSignals, " signals, ", contexts_, " contexts)");
    }
    detail::DeviceGuard on(device_);
    detail::SignalWaits batch;
    batch.timeout_ns = static_cast<uint64_t>(comm_.config().timeout.count()) * 1000000ull;
    batch.failed = failed_;
    for (size_t k = 0; k < what.size(); ++k) {
      const int i = index(what[k].peer, what[k].signal, what[k].context);
      consumed_[static_cast<size_t>(i)] += static_cast<uint64_t>(what[k].count);
      batch.at[batch.n++] = {own_ + i, consumed_[static_cast<size_t>(i)], i};
      if (batch.n == detail::SignalWaits::kMax || k + 1 == what.size()) {
        detail::one_sided_wait<<<1, 1, 0, stream>>>(batch);
        DCOMM_RETURN_IF_ERROR(cuda_status(cudaGetLastError(), "wait: launching the signal wait"));
        batch.n = 0;
      }
    }
    return note_launch(stream);
  }

  // The first wait that ended at its deadline, by name; ok otherwise.
  Status error() const {
    const int f = failed_ ? *failed_ : 0;
    if (f <= 0) return {};
    const int i = f - 1, from = i / (contexts_ * kSignals), context = (i / kSignals) % contexts_;
    return make_error(ErrorCode::kTimeout, "wait on rank ", comm_.rank(), ": ", comm_.peer(from).describe(),
                      " did not send the signals waited for (index ", i % kSignals, ", context ", context, ") within ",
                      comm_.config().timeout.count(), " ms");
  }

 private:
  struct Part {
    cudaIpcMemHandle_t ipc{};
    uint64_t base = 0, offset = 0, bytes = 0;
  };
  struct Hello {
    ArenaAddress signals;
    char bus_id[32] = {};
  };
  struct Window {
    char* at = nullptr;  // null: not reachable from here
    size_t bytes = 0;
  };

  DeviceOneSided(Communicator& comm, int device, int contexts)
      : comm_(comm), device_(device), contexts_(contexts), signals_("DCOMM_CUDA_P2P_DISABLE") {}

  int index(int from, int signal, int context) const { return (from * contexts_ + context) * kSignals + signal; }
  bool same_process(int peer) const { return comm_.peer(peer).process_id == comm_.peer(comm_.rank()).process_id; }
  const Window* window(int peer, int id) const {
    if (peer < 0 || peer >= comm_.size() || id < 0 || static_cast<size_t>(id) >= windows_.size() ||
        windows_[static_cast<size_t>(id)].empty())
      return nullptr;
    return &windows_[static_cast<size_t>(id)][static_cast<size_t>(peer)];
  }

  // Which peers this GPU reaches, this rank's counters, and every reachable peer's.
  Status set_up() {
    detail::DeviceGuard on(device_);
    const int n = comm_.size();
    for (int p = 0; p < n; ++p) ipc_ |= comm_.same_host(p) && !same_process(p);
    const size_t count = static_cast<size_t>(n) * static_cast<size_t>(contexts_) * kSignals;
    consumed_.assign(count, 0);
    Hello mine;
    DCOMM_RETURN_IF_ERROR(
        cuda_status(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, device_), "cudaDeviceGetPCIBusId"));
    // Zeroed on a stream of its own: the legacy default stream would wait for the whole
    // context's blocking streams, work that may wait on this rank's peers.
    cudaStream_t zeroing = nullptr;
    DCOMM_RETURN_IF_ERROR(
        cuda_status(cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking), "cudaStreamCreate (signals)"));
    Status made = signals_.create(count * sizeof(uint64_t), ipc_, /*host=*/false, comm_.config().shm_dir, comm_.rank(),
                                  zeroing, &mine.signals);
    cudaStreamDestroy(zeroing);
    DCOMM_RETURN_IF_ERROR(made);
    auto own = signals_.own();
    if (!own.ok()) return own.status();
    own_ = reinterpret_cast<uint64_t*>(own->device);
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaHostAlloc(reinterpret_cast<void**>(const_cast<int**>(&failed_)), sizeof(int),
                                                    cudaHostAllocMapped | cudaHostAllocPortable),
                                      "cudaHostAlloc of the wait's error word"));
    *failed_ = 0;
    std::vector<Hello> all(static_cast<size_t>(n));
    DCOMM_RETURN_IF_ERROR(comm_.all_gather(&mine, all.data(), sizeof(Hello), DataType::kUint8));
    reach_.assign(static_cast<size_t>(n), false);
    peer_signals_.assign(static_cast<size_t>(n), nullptr);
    for (int p = 0; p < n; ++p) {
      const size_t up = static_cast<size_t>(p);
      if (p != comm_.rank()) {
        if (!comm_.same_host(p)) continue;
        bool can = false;
        const int other = device_by_bus_id(all[up].bus_id, device_, &can);
        if (other < 0 || (other != device_ && !can)) continue;  // no peer access: not reachable
        if (other != device_) DCOMM_RETURN_IF_ERROR(enable_peer_access(other));
      }
      auto view = p == comm_.rank() ? signals_.own() : signals_.map_peer(all[up].signals, same_process(p), p);
      if (!view.ok()) return view.status();
      peer_signals_[up] = reinterpret_cast<unsigned long long*>(view->device);
      reach_[up] = true;
    }
    return {};
  }

  Status check(int peer, int signal, int context, const char* what) const {
    if (peer < 0 || peer >= comm_.size())
      return invalid_argument(what, " on rank ", comm_.rank(), ": peer ", peer, " is out of range for ", comm_.size(),
                              " ranks");
    if (signal < 0 || signal >= kSignals || context < 0 || context >= contexts_)
      return invalid_argument(what, " on rank ", comm_.rank(), ": signal ", signal, " of context ", context,
                              " is out of range (", kSignals, " signals, ", contexts_, " contexts)");
    if (!reach_[static_cast<size_t>(peer)])
      return make_error(ErrorCode::kUnsupported, what, " on rank ", comm_.rank(), ": ", comm_.peer(peer).describe(),
                        " is not reachable from this GPU (another host, or no peer access); device windows reach "
                        "GPUs that share memory");
    if (comm_.aborted()) return make_error(ErrorCode::kAborted, what, " on rank ", comm_.rank(), ": aborted earlier");
    return {};
  }
  // Marks this object's last launch on `stream`, for the destructor to wait for.
  Status note_launch(cudaStream_t stream) {
    auto it = std::find_if(launched_.begin(), launched_.end(), [&](const auto& l) { return l.first == stream; });
    if (it == launched_.end()) {
      cudaEvent_t e;
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      it = launched_.insert(launched_.end(), {stream, e});
    }
    return cuda_status(cudaEventRecord(it->second, stream), "cudaEventRecord");
  }
  Status add_signal(int peer, int signal, int context, cudaStream_t stream) {
    detail::one_sided_signal<<<1, 1, 0, stream>>>(peer_signals_[static_cast<size_t>(peer)] +
                                                  index(comm_.rank(), signal, context));
    return cuda_status(cudaGetLastError(), "signal: launching the signal");
  }

  Communicator& comm_;
  int device_;
  int contexts_;
  bool ipc_ = false;                                            // some peer of this host is in another process
  CudaArenas signals_;                                          // this rank's counters, and the peers' mapped
  uint64_t* own_ = nullptr;                                     // this rank's counters
  std::vector<unsigned long long*> peer_signals_;               // by peer: its counters, null where not reachable
  std::vector<bool> reach_;                                     // by peer: this GPU reaches its memory
  std::vector<uint64_t> consumed_;                              // what the waits enqueued have consumed
  std::vector<std::vector<Window>> windows_;                    // by id, every rank's part
  std::vector<void*> opened_;                                   // the peers' windows opened through CUDA IPC
  volatile int* failed_ = nullptr;                              // pinned host: see detail::SignalWaits
  std::vector<std::pair<cudaStream_t, cudaEvent_t>> launched_;  // by stream used: its last launch here
};

DCOMM_NAMESPACE_END
