// device_glue.hpp over dcomm::DeviceCommunicator (nvcc).
#include <dcomm/dcomm.cuh>

#include "device_glue.hpp"

namespace dcomm_torch {

struct DeviceHandle {
  std::unique_ptr<dcomm::DeviceCommunicator> comm;
};

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

dcomm::Result<DeviceHandle*> device_create(dcomm::Communicator& host, int device) {
  auto d = dcomm::DeviceCommunicator::create(host, device);
  if (!d.ok()) return d.status();
  return new DeviceHandle{std::move(*d)};
}
void device_destroy(DeviceHandle* d) { delete d; }

dcomm::Status device_all_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type,
                                dcomm::ReduceOp op, void* stream) {
  return d->comm->all_reduce(send, recv, count, type, op, as_stream(stream));
}
dcomm::Status device_broadcast(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type, int root,
                               void* stream) {
  return d->comm->broadcast(send, recv, count, type, root, as_stream(stream));
}
dcomm::Status device_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, dcomm::DataType type,
                            dcomm::ReduceOp op, int root, void* stream) {
  return d->comm->reduce(send, recv, count, type, op, root, as_stream(stream));
}
dcomm::Status device_all_gather(DeviceHandle* d, const void* send, void* recv, size_t send_count, dcomm::DataType type,
                                void* stream) {
  return d->comm->all_gather(send, recv, send_count, type, as_stream(stream));
}
dcomm::Status device_reduce_scatter(DeviceHandle* d, const void* send, void* recv, size_t recv_count, dcomm::DataType type,
                                    dcomm::ReduceOp op, void* stream) {
  return d->comm->reduce_scatter(send, recv, recv_count, type, op, as_stream(stream));
}
dcomm::Status device_send(DeviceHandle* d, const void* buf, size_t bytes, int peer, void* stream) {
  return d->comm->send(buf, bytes, dcomm::DataType::kUint8, peer, as_stream(stream));
}
dcomm::Status device_recv(DeviceHandle* d, void* buf, size_t bytes, int peer, void* stream) {
  return d->comm->recv(buf, bytes, dcomm::DataType::kUint8, peer, as_stream(stream));
}
void device_group_start(DeviceHandle* d) { d->comm->group_start(); }
dcomm::Status device_group_end(DeviceHandle* d) { return d->comm->group_end(); }
dcomm::Status device_error(DeviceHandle* d) { return d->comm->error(); }

}  // namespace dcomm_torch
