// dcomm_torch._C: the creator torch.distributed calls for backend "dcomm".
#include <pybind11/chrono.h>
#include <torch/extension.h>

#include <chrono>

#include "process_group.hpp"

namespace {
template <typename F>
double time_us(int iters, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "dcomm as a torch.distributed backend";
  m.def("create_backend", &dcomm_torch::ProcessGroupDcomm::create, "(store, rank, size, timeout) -> the dcomm backend",
        pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"));
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  m.def(
      "create_unconfigured",
      [](int rank, int size, const std::chrono::duration<float>& timeout) {
        return c10::intrusive_ptr<dcomm_torch::BackendBase>(c10::make_intrusive<dcomm_torch::ProcessGroupDcomm>(
            rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout)));
      },
      "(rank, size, timeout) -> a dcomm backend with no communicator until its reconfigure() (enable_reconfigure)",
      pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"));
#endif
  // For bench/torch_bench.py, microseconds per call over `iters` calls on `tensor` (float32,
  // sum, in place): _allreduce_call_us times the backend's allreduce(tensor).wait() called from
  // C++, _native_all_reduce_us the same group's dcomm communicator called directly (what the
  // backend wraps), so that the backend's own cost can be told from torch's Python binding and
  // dispatcher (which every backend pays alike) and from the machine's noise (both run in the
  // same process, alternately).
  m.def(
      "_allreduce_call_us",
      [](const c10::intrusive_ptr<dcomm_torch::BackendBase>& backend, at::Tensor tensor, int iters) {
        std::vector<at::Tensor> ts{tensor};
        c10d::AllreduceOptions opts;
        return time_us(iters, [&] { backend->allreduce(ts, opts)->wait(); });
      },
      pybind11::arg("backend"), pybind11::arg("tensor"), pybind11::arg("iters"),
      pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def(
      "_native_all_reduce_us",
      [](const c10::intrusive_ptr<dcomm_torch::BackendBase>& backend, at::Tensor tensor, int iters) {
        auto* pg = dynamic_cast<dcomm_torch::ProcessGroupDcomm*>(backend.get());
        TORCH_CHECK(pg, "dcomm: _native_all_reduce_us needs a dcomm backend");
        TORCH_CHECK(tensor.scalar_type() == at::kFloat && tensor.is_contiguous() && tensor.is_cpu(),
                    "dcomm: _native_all_reduce_us takes a contiguous float32 CPU tensor");
        const auto n = static_cast<size_t>(tensor.numel());
        dcomm::Status s;
        const double us = time_us(iters, [&] {
          if (s.ok())
            s = pg->comm().all_reduce(tensor.data_ptr(), tensor.data_ptr(), n, dcomm::DataType::kFloat32,
                                      dcomm::ReduceOp::kSum);
        });
        if (!s.ok()) throw std::runtime_error(s.message());
        return us;
      },
      pybind11::arg("backend"), pybind11::arg("tensor"), pybind11::arg("iters"),
      pybind11::call_guard<pybind11::gil_scoped_release>());
#if TORCH_VERSION_MAJOR >= 2
  // The backend's own Python type (a c10d Backend underneath), so that torch finds the methods
  // it looks for on split sources: perform_nocolor_split (a rank outside a new group, when the
  // group is split from an eagerly initialized parent).
  pybind11::class_<dcomm_torch::ProcessGroupDcomm, c10d::Backend, c10::intrusive_ptr<dcomm_torch::ProcessGroupDcomm>>(
      m, "ProcessGroupDcomm")
      .def(
          "lost_ranks",
          [](dcomm_torch::ProcessGroupDcomm& pg, double within_s) {
            return pg.comm().lost_ranks(std::chrono::milliseconds(static_cast<int64_t>(within_s * 1e3)));
          },
          "The ranks of this group whose processes died (waiting up to within_s seconds for a first one): what "
          "to pass to dist.shrink_group",
          pybind11::arg("within_s") = 0.0, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def(
          "_advertised_host",
          [](dcomm_torch::ProcessGroupDcomm& pg) {
            const std::string& at = pg.comm().peer(pg.group_rank()).address;
            return at.substr(0, at.rfind(':'));
          },
          "The address this rank's peers reach it at (for a store it serves)")
      .def(
          "_broadcast_text",
          [](dcomm_torch::ProcessGroupDcomm& pg, std::string text, int root) {
            constexpr size_t kBytes = 256;
            TORCH_CHECK(text.size() < kBytes, "dcomm: _broadcast_text takes under 256 bytes");
            text.resize(kBytes, '\0');
            dcomm::Status s = pg.comm().broadcast(text.data(), text.data(), kBytes, dcomm::DataType::kUint8, root);
            TORCH_CHECK(s.ok(), "dcomm: ", s.message());
            return std::string(text.c_str());
          },
          "Root's text on every rank of a group no call is using yet (a new group's store address)",
          pybind11::call_guard<pybind11::gil_scoped_release>())
      .def(
          "perform_nocolor_split",
          [](dcomm_torch::ProcessGroupDcomm& pg, const at::Device&) { pg.perform_nocolor_split(); },
          pybind11::call_guard<pybind11::gil_scoped_release>())
      .def(
          "split",
          [](dcomm_torch::ProcessGroupDcomm& pg, const c10::intrusive_ptr<c10d::Store>& store,
             const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
            auto opts = c10::make_intrusive<c10d::Backend::Options>("dcomm", timeout);
            return pg.split(store, ranks, opts);
          },
          pybind11::arg("store"), pybind11::arg("ranks"), pybind11::arg("timeout"),
          pybind11::call_guard<pybind11::gil_scoped_release>());
#endif
#if DCOMM_TORCH_2_15
  // For the hook test: `iters` all_reduces of `tensor` with a completion hook registered;
  // returns each call's (Work completion key, the key the hook saw, the hook's milliseconds).
  m.def("_completion_hook_probe",
        [](const c10::intrusive_ptr<dcomm_torch::BackendBase>& backend, at::Tensor tensor, int iters) {
          std::mutex mu;
          std::vector<std::pair<uint64_t, float>> seen;
          backend->registerCompletionHook(4242, [&](const c10d::CompletionHookArgs& a) {
            std::lock_guard<std::mutex> lock(mu);
            seen.emplace_back(a.completionKey, a.duration_ms.value_or(-1));
          });
          std::vector<std::tuple<uint64_t, uint64_t, float>> out;
          for (int i = 0; i < iters; ++i) {
            std::vector<at::Tensor> ts{tensor};
            auto w = backend->allreduce(ts, c10d::AllreduceOptions());
            w->wait();
            std::lock_guard<std::mutex> lock(mu);
            out.emplace_back(w->getCompletionKey(), seen.empty() ? 0 : seen.back().first,
                             seen.empty() ? -1.f : seen.back().second);
          }
          backend->unregisterCompletionHook(4242);
          return out;
        });
#endif
  m.attr("torch_major") = TORCH_VERSION_MAJOR;
#ifdef DCOMM_TORCH_CUDA
  m.attr("cuda") = true;
#else
  m.attr("cuda") = false;
#endif
}
