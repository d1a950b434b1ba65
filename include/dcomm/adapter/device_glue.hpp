// The device communicator (dcomm.cuh, nvcc only) behind plain functions, for adapters whose
// own code compiles with the host compiler (the torch backend, the NCCL-ABI library). Streams
// are cudaStream_t passed as void*; every call is stream-ordered and returns at once
// (comm/device_comm.cuh). The definitions are in device_glue_impl.cuh: include that from
// exactly one .cu file of the binary.
#pragma once

#include <vector>

#include "dcomm/comm/communicator.hpp"
#include "dcomm/comm/one_sided.hpp"

DCOMM_NAMESPACE_BEGIN
namespace adapter {

struct DeviceHandle;  // a DeviceCommunicator

// Collective over `host`: binds this rank to CUDA device `device`.
Result<DeviceHandle*> device_create(Communicator& host, int device);
void device_destroy(DeviceHandle* d);  // collective too, unless aborted (device_comm.cuh)

Status device_all_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream);
Status device_broadcast(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, int root,
                        void* stream);
Status device_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                     void* stream);
Status device_all_gather(DeviceHandle* d, const void* send, void* recv, size_t send_count, DataType type, void* stream);
Status device_reduce_scatter(DeviceHandle* d, const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, void* stream);
Status device_send(DeviceHandle* d, const void* buf, size_t bytes, int peer, void* stream);
Status device_recv(DeviceHandle* d, void* buf, size_t bytes, int peer, void* stream);
void device_group_start(DeviceHandle* d);
Status device_group_end(DeviceHandle* d);
// A batch of sends and receives (an exchange: algo/exchange.hpp) as one group, within any
// group already open.
inline Status device_p2p(DeviceHandle* d, const std::vector<P2POp>& ops, void* stream) {
  device_group_start(d);
  Status st;
  for (size_t i = 0; i < ops.size() && st.ok(); ++i)
    st = ops[i].kind == P2POp::Kind::kSend ? device_send(d, ops[i].buffer, ops[i].bytes(), ops[i].peer, stream)
                                           : device_recv(d, ops[i].buffer, ops[i].bytes(), ops[i].peer, stream);
  Status end = device_group_end(d);
  return st.ok() ? end : st;
}
// The first failure a kernel reported (a dead peer, the deadline), or ok.
Status device_error(DeviceHandle* d);
// Ends this rank's waiting kernels now and aborts the host communicator.
void device_abort(DeviceHandle* d, const std::string& why);
// Collective: frees the FIFO arenas once the communicator's launches are done, and makes new
// ones; device_arena_bytes is what device_suspend frees (0 while suspended).
Status device_suspend(DeviceHandle* d);
Status device_resume(DeviceHandle* d);
size_t device_arena_bytes(DeviceHandle* d);

// Stream-ordered scratch (cudaMallocAsync; capturable) for the next call's input, freed by
// `d` once the group it joins (or the call alone) is launched, after the kernels that read it;
// and dst[i] = src[i] * factor on `stream`, the factor one element of `type` in device memory
// (read when the kernel runs) or, when factor_on_device is false, in host memory (read now).
Result<void*> device_scratch(DeviceHandle* d, size_t bytes, void* stream);
Status device_scale(void* dst, const void* src, size_t count, DataType type, const void* factor, bool factor_on_device,
                    void* stream);
// dst = src (bytes of device memory) by a kernel on `stream`: unlike cudaMemcpyAsync between two
// addresses of one GPU, it runs beside other streams' kernels (a thread rank's peers may wait).
Status device_copy(void* dst, const void* src, size_t bytes, void* stream);

// One-sided windows on device memory (comm/device_one_sided.cuh), stream-ordered.
struct DeviceWindows;                                                                        // a DeviceOneSided
Result<DeviceWindows*> device_windows_create(Communicator& host, int device, int contexts);  // collective
void device_windows_destroy(DeviceWindows* w);                                               // collective too
Result<int> device_window_register(DeviceWindows* w, void* buf, size_t bytes);               // collective
void device_window_deregister(DeviceWindows* w, int id);
void* device_window_peer_pointer(DeviceWindows* w, int peer, int id, size_t offset);  // null: not reachable
Status device_put(DeviceWindows* w, const void* src, size_t bytes, int peer, int id, size_t offset, int signal,
                  int context, void* stream);
Status device_signal(DeviceWindows* w, int peer, int signal, int context, void* stream);
Status device_wait_signals(DeviceWindows* w, const std::vector<OneSided::WaitFor>& what, void* stream);
Status device_windows_error(DeviceWindows* w);  // a wait that ended at its deadline

}  // namespace adapter
DCOMM_NAMESPACE_END
