// The definitions of adapter/device_glue.hpp (nvcc). Include from exactly one .cu file.
#pragma once

#include "dcomm/adapter/device_glue.hpp"
#include "dcomm/dcomm.cuh"

DCOMM_NAMESPACE_BEGIN
namespace adapter {

struct DeviceHandle {
  std::unique_ptr<DeviceCommunicator> comm;
};

namespace {
cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

Result<DeviceHandle*> device_create(Communicator& host, int device) {
  auto d = DeviceCommunicator::create(host, device);
  if (!d.ok()) return d.status();
  return new DeviceHandle{std::move(*d)};
}
void device_destroy(DeviceHandle* d) { delete d; }

Status device_all_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                         void* stream) {
  return d->comm->all_reduce(send, recv, count, type, op, as_stream(stream));
}
Status device_broadcast(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, int root,
                        void* stream) {
  return d->comm->broadcast(send, recv, count, type, root, as_stream(stream));
}
Status device_reduce(DeviceHandle* d, const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root,
                     void* stream) {
  return d->comm->reduce(send, recv, count, type, op, root, as_stream(stream));
}
Status device_all_gather(DeviceHandle* d, const void* send, void* recv, size_t send_count, DataType type,
                         void* stream) {
  return d->comm->all_gather(send, recv, send_count, type, as_stream(stream));
}
Status device_reduce_scatter(DeviceHandle* d, const void* send, void* recv, size_t recv_count, DataType type,
                             ReduceOp op, void* stream) {
  return d->comm->reduce_scatter(send, recv, recv_count, type, op, as_stream(stream));
}
Status device_send(DeviceHandle* d, const void* buf, size_t bytes, int peer, void* stream) {
  return d->comm->send(buf, bytes, DataType::kUint8, peer, as_stream(stream));
}
Status device_recv(DeviceHandle* d, void* buf, size_t bytes, int peer, void* stream) {
  return d->comm->recv(buf, bytes, DataType::kUint8, peer, as_stream(stream));
}
void device_group_start(DeviceHandle* d) { d->comm->group_start(); }
Status device_group_end(DeviceHandle* d) { return d->comm->group_end(); }
Status device_error(DeviceHandle* d) { return d->comm->error(); }
void device_abort(DeviceHandle* d, const std::string& why) { d->comm->abort(why); }
Status device_suspend(DeviceHandle* d) { return d->comm->suspend(); }
Status device_resume(DeviceHandle* d) { return d->comm->resume(); }
size_t device_arena_bytes(DeviceHandle* d) { return d->comm->arena_bytes(); }

Result<void*> device_scratch(DeviceHandle* d, size_t bytes, void* stream) {
  return d->comm->scratch(bytes, as_stream(stream));
}
Status device_scale(void* dst, const void* src, size_t count, DataType type, const void* factor, bool factor_on_device,
                    void* stream) {
  return scale_on_device(dst, src, count, type, factor, factor_on_device, as_stream(stream));
}
Status device_copy(void* dst, const void* src, size_t bytes, void* stream) {
  return copy_on_device(dst, nullptr, src, bytes, as_stream(stream));
}

struct DeviceWindows {
  std::unique_ptr<DeviceOneSided> one;
};
Result<DeviceWindows*> device_windows_create(Communicator& host, int device, int contexts) {
  auto o = DeviceOneSided::create(host, device, contexts);
  if (!o.ok()) return o.status();
  return new DeviceWindows{std::move(*o)};
}
void device_windows_destroy(DeviceWindows* w) { delete w; }
Result<int> device_window_register(DeviceWindows* w, void* buf, size_t bytes) {
  return w->one->register_window(buf, bytes);
}
void device_window_deregister(DeviceWindows* w, int id) { w->one->deregister_window(id); }
void* device_window_peer_pointer(DeviceWindows* w, int peer, int id, size_t offset) {
  return w->one->peer_pointer(peer, id, offset);
}
Status device_put(DeviceWindows* w, const void* src, size_t bytes, int peer, int id, size_t offset, int signal,
                  int context, void* stream) {
  return w->one->put(src, bytes, peer, id, offset, signal, context, as_stream(stream));
}
Status device_signal(DeviceWindows* w, int peer, int signal, int context, void* stream) {
  return w->one->signal(peer, signal, context, as_stream(stream));
}
Status device_wait_signals(DeviceWindows* w, const std::vector<OneSided::WaitFor>& what, void* stream) {
  return w->one->wait(what, as_stream(stream));
}
Status device_windows_error(DeviceWindows* w) { return w->one->error(); }

}  // namespace adapter
DCOMM_NAMESPACE_END
