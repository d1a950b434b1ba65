// torch 2.15's one-sided windows (Backend::supportsWindow / new_window, c10d::Window) over
// dcomm's OneSided (comm/one_sided.hpp), on CPU tensors, within a host and between hosts. Every
// window operation runs on the group's queue, in call order with its collectives (OneSided is
// driven by one thread); put, signal and wait_signal return a Work, waited on at once unless
// async_op. A window has signal index 0 of its own OneSided: signal(peer) adds one, and
// wait_signal(peer) consumes one. map_remote_tensor gives a peer's tensor where loads and
// stores reach it: a tensor from the backend's allocator (dcomm::mem_alloc, torch 2.15's
// allocate_tensor) is mapped here once. docs/pytorch.md.
#include "process_group.hpp"

#if DCOMM_TORCH_2_15
#include <torch/csrc/distributed/c10d/Window.hpp>

#include <dcomm/comm/one_sided.hpp>

namespace dcomm_torch {

class DcommWindow : public c10d::Window {
 public:
  DcommWindow(ProcessGroupDcomm* pg, std::unique_ptr<dcomm::OneSided> one) : pg_(pg), one_(std::move(one)) {}

  void tensor_register(const at::Tensor& tensor, bool owning) override {
    TORCH_CHECK(id_ < 0, "dcomm window: a tensor is registered already (tensor_deregister it first)");
    TORCH_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
                "dcomm window: the tensor must be a contiguous CPU tensor (got one on ", tensor.device(), ")");
    void* data = tensor.numel() ? tensor.data_ptr() : nullptr;
    const size_t bytes = tensor.nbytes();
    int id = -1;
    run("tensor_register", [&] {
      auto made = one_->register_window(data, bytes);
      if (!made.ok()) return made.status();
      id = *made;
      return dcomm::Status{};
    });
    id_ = id;
    dtype_ = tensor.scalar_type();
    if (owning) tensor_ = tensor;
  }

  void tensor_deregister() override {
    TORCH_CHECK(id_ >= 0, "dcomm window: no tensor is registered");
    // Collective: no peer puts into it once any rank has let it go.
    run("tensor_deregister", [&] {
      one_->deregister_window(id_);
      return pg_->comm().barrier();
    });
    id_ = -1;
    tensor_ = at::Tensor();
  }

  c10::intrusive_ptr<c10d::Work> put(const at::Tensor& tensor, int64_t dst, int64_t offset, bool async_op,
                                     const c10d::PutOptions&) override {
    TORCH_CHECK(id_ >= 0, "dcomm window: put before tensor_register");
    TORCH_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(), "dcomm window: put takes a contiguous CPU tensor");
    TORCH_CHECK(tensor.scalar_type() == dtype_, "dcomm window: put of ", tensor.scalar_type(), " into a window of ",
                dtype_);
    check_peer(dst, "put");
    TORCH_CHECK(offset >= 0, "dcomm window: offset ", offset, " is negative");
    const size_t bytes = tensor.nbytes(), at = static_cast<size_t>(offset) * tensor.element_size();
    // Checked here, not on the queue: an argument error must not mark the group as failed.
    const size_t room = one_->window_bytes(static_cast<int>(dst), id_);
    TORCH_CHECK(at <= room && bytes <= room - at, "dcomm window: ", bytes, " bytes at element ", offset,
                " run past rank ", dst, "'s window of ", room, " bytes");
    auto work = pg_->enqueue(c10d::OpType::SEND, {}, bytes, [this, tensor, dst, at, bytes] {
      return one_->put(tensor.numel() ? tensor.data_ptr() : nullptr, bytes, static_cast<int>(dst), id_, at, -1, 0);
    });
    return finish(work, async_op);
  }

  c10::intrusive_ptr<c10d::Work> signal(int64_t peer, bool async_op, const c10d::SignalOptions&) override {
    check_peer(peer, "signal");
    auto work =
        pg_->enqueue(c10d::OpType::SEND, {}, 0, [this, peer] { return one_->signal(static_cast<int>(peer), 0, 0); });
    return finish(work, async_op);
  }

  c10::intrusive_ptr<c10d::Work> wait_signal(int64_t peer, bool async_op, const c10d::WaitSignalOptions&) override {
    check_peer(peer, "wait_signal");
    auto work = pg_->enqueue(c10d::OpType::RECV, {}, 0, [this, peer] {
      return one_->wait({{1, static_cast<int>(peer), 0, 0}});
    });
    return finish(work, async_op);
  }

  at::Tensor map_remote_tensor(int64_t rank) override {
    TORCH_CHECK(id_ >= 0, "dcomm window: map_remote_tensor before tensor_register");
    const int r = static_cast<int>(rank);
    void* p = nullptr;
    size_t bytes = 0;
    run("map_remote_tensor", [&] {  // on the queue: OneSided's mappings are its thread's
      p = one_->peer_address(r, id_);
      bytes = one_->window_bytes(r, id_);
      return dcomm::Status{};
    });
    TORCH_CHECK(p || bytes == 0, "dcomm window: rank ", rank, "'s window cannot be mapped on rank ", pg_->group_rank(),
                " (reached over TCP, or not from the backend's allocator: allocate it with allocate_tensor)");
    const int64_t elements = static_cast<int64_t>(bytes / c10::elementSize(dtype_));
    return at::from_blob(p, {elements}, at::TensorOptions().dtype(dtype_).device(at::kCPU));
  }

  c10d::WindowAttr get_attr(int64_t) override { return c10d::WindowAttr{c10d::WindowAccessType::UNIFIED}; }

 private:
  void check_peer(int64_t peer, const char* what) const {
    TORCH_CHECK(id_ >= 0 || std::string(what) != "put", "dcomm window: put before tensor_register");
    TORCH_CHECK(peer >= 0 && peer < pg_->group_size(), "dcomm window: ", what, " to rank ", peer, ", out of range for ",
                pg_->group_size(), " ranks");
  }
  // Runs `f` on the group's queue and waits for it; a failure raises naming `what`.
  void run(const char* what, std::function<dcomm::Status()> f) {
    auto work = pg_->enqueue(c10d::OpType::UNKNOWN, {}, 0, [f = std::move(f), what] {
      dcomm::Status s = f();
      return s.ok() ? s : s.with_context(std::string("dcomm window ") + what);
    });
    work->wait();
  }
  static c10::intrusive_ptr<c10d::Work> finish(c10::intrusive_ptr<c10d::Work> work, bool async_op) {
    if (!async_op) work->wait();
    return work;
  }

  ProcessGroupDcomm* pg_;
  std::unique_ptr<dcomm::OneSided> one_;
  int id_ = -1;
  at::ScalarType dtype_ = at::kFloat;
  at::Tensor tensor_;  // kept alive when registered as owning
};

c10::intrusive_ptr<c10d::Window> ProcessGroupDcomm::new_window(const std::optional<at::Tensor>& tensor) {
  check_open("new_window");
  std::unique_ptr<dcomm::OneSided> one;
  // Collective: every rank's signal block, on the queue after the calls before it.
  auto work = enqueue(c10d::OpType::UNKNOWN, {}, 0, [this, &one] {
    auto made = dcomm::OneSided::create(*comm_);
    if (!made.ok()) return made.status().with_context("new_window");
    one = std::move(*made);
    return dcomm::Status{};
  });
  work->wait();
  auto window = c10::make_intrusive<DcommWindow>(this, std::move(one));
  if (tensor && tensor->defined()) window->tensor_register(*tensor, true);
  return window;
}

}  // namespace dcomm_torch
#endif
