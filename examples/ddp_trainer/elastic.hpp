// --elastic: when a rank dies, the survivors go on without it, from the step it interrupted, with
// no checkpoint reloaded (dcomm's revoke and shrink; docs/reliability.md).
//
// A step whose gradient average fails (a rank died) throws on every survivor. Each one then waits
// for lost_ranks() to name the dead, revokes the communicator (a survivor still blocked in the
// step's calls is released), and shrinks past the dead in abort mode. The survivors then agree on
// the step to redo: the fewest steps any of them had applied (a survivor whose average completed
// before the death may be one ahead); the parameters and momentum of a survivor at that step go
// to all, so every survivor holds the same state again. The caller keeps the global batch and the
// learning rate and splits each global batch over the survivors (main.cpp).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include <dcomm/dcomm.hpp>

#include "grad_sync.hpp"

namespace trainer {

// Every rank takes `root`'s momentum buffers (made as zeros where missing, dropped where root has none).
inline void broadcast_momentum(dcomm::Communicator& comm, torch::optim::SGD& opt,
                               const std::vector<torch::Tensor>& params, int root) {
  torch::NoGradGuard no_grad;
  auto& state = opt.state();
  for (const auto& p : params) {
    const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
    auto it = state.find(key);
    auto* mine = it == state.end() ? nullptr : static_cast<torch::optim::SGDParamState*>(it->second.get());
    int32_t have = mine && mine->momentum_buffer().defined() ? 1 : 0;
    check(comm.broadcast(&have, &have, 1, dcomm::DataType::kInt32, root), "agreeing on the momentum");
    if (!have) {
      if (it != state.end()) state.erase(it);
      continue;
    }
    if (!mine) {
      auto made = std::make_unique<torch::optim::SGDParamState>();
      made->momentum_buffer(torch::zeros_like(p));
      mine = made.get();
      state[key] = std::move(made);
    } else if (!mine->momentum_buffer().defined()) {
      mine->momentum_buffer(torch::zeros_like(p));
    }
    auto buf = mine->momentum_buffer();
    check(comm.broadcast(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), dcomm::DataType::kFloat32,
                         root),
          "broadcasting the momentum");
  }
}

class Elastic {
 public:
  explicit Elastic(dcomm::Communicator& first) : comm_(&first) {}
  dcomm::Communicator& comm() { return *comm_; }

  // After step `step` failed with `why`: the survivors' communicator becomes comm(), and the
  // returned step is the one every survivor redoes.
  int64_t recover(int64_t step, GradSync& sync, torch::optim::SGD& opt, const std::vector<torch::Tensor>& params,
                  const std::string& why) {
    using Clock = std::chrono::steady_clock;
    const auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    const auto t0 = Clock::now();
    std::vector<int> lost;
    while ((lost = comm_->lost_ranks()).empty() && Clock::now() - t0 < std::chrono::seconds(5))
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (lost.empty()) throw std::runtime_error(why + " (no rank died: nothing to shrink past)");
    const auto t1 = Clock::now();
    comm_->revoke();
    auto next = comm_->shrink(lost, dcomm::ShrinkMode::kAbort);
    check(next.status(), "shrinking past the lost ranks");
    const auto t2 = Clock::now();
    owned_.push_back(std::move(*next));
    comm_ = owned_.back().get();
    sync.use(*comm_);
    std::vector<int64_t> applied(static_cast<size_t>(comm_->size()));
    int64_t mine = step;
    check(comm_->all_gather(&mine, applied.data(), 1, dcomm::DataType::kInt64), "agreeing on the step to redo");
    int root = 0;
    for (int r = 1; r < comm_->size(); ++r)
      if (applied[static_cast<size_t>(r)] < applied[static_cast<size_t>(root)]) root = r;
    sync.broadcast_parameters(root);
    broadcast_momentum(*comm_, opt, params, root);
    const int64_t redo = applied[static_cast<size_t>(root)];
    if (comm_->rank() == 0) {
      std::string ranks;
      for (int r : lost) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      std::printf(
          "--elastic: lost rank %s; %d ranks go on from step %lld (lost_ranks %.1f ms, revoke and shrink %.1f ms, "
          "state from rank %d %.1f ms)\n",
          ranks.c_str(), comm_->size(), static_cast<long long>(redo), ms(t0, t1), ms(t1, t2), root,
          ms(t2, Clock::now()));
      std::fflush(stdout);
    }
    return redo;
  }

 private:
  dcomm::Communicator* comm_;
  std::vector<std::unique_ptr<dcomm::Communicator>> owned_;  // the survivors' communicators, newest last
};

}  // namespace trainer
