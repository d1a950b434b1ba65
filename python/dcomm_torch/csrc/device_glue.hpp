// The device communicator (dcomm.cuh, nvcc only) behind plain C++ functions, so that the
// torch code of the CUDA path compiles with the host compiler. Streams are cudaStream_t
// passed as void*; every call is stream-ordered and returns at once (comm/device_comm.cuh).
#pragma once

#include <dcomm/dcomm.hpp>

namespace dcomm_torch {

struct DeviceHandle;  // a dcomm::DeviceCommunicator

// Collective over `host`: binds this rank to CUDA device `device`.
dcomm::Result<DeviceHandle*> device_create(dcomm::Communicator& host, int device);
void device_destroy(DeviceHandle* d);  // collective too (device_comm.cuh)

dcomm::Status device_all_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type,
                                dcomm::ReduceOp op, void* stream);
dcomm::Status device_broadcast(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type, int root,
                               void* stream);
dcomm::Status device_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type,
                            dcomm::ReduceOp op, int root, void* stream);
dcomm::Status device_all_gather(DeviceHandle* d, const void* send, void* recv, size_t send_count, dcomm::DataType type,
                                void* stream);
dcomm::Status device_reduce_scatter(DeviceHandle* d, const void* send, void* recv, size_t recv_count, dcomm::DataType type,
                                    dcomm::ReduceOp op, void* stream);
dcomm::Status device_send(DeviceHandle* d, const void* buf, size_t bytes, int peer, void* stream);
dcomm::Status device_recv(DeviceHandle* d, void* buf, size_t bytes, int peer, void* stream);
void device_group_start(DeviceHandle* d);
dcomm::Status device_group_end(DeviceHandle* d);
// The first failure a kernel reported (a dead peer, the deadline), or ok.
dcomm::Status device_error(DeviceHandle* d);

}  // namespace dcomm_torch
