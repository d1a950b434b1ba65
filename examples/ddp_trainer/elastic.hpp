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
//
// --rejoin FILE: a process started in a dead rank's place (dcomm-run --max-restarts) joins again.
// The survivors learn which launch ranks are missing, their rank 0 hands out a grow id and writes
// it to FILE with the new ranks, every survivor grows the communicator, and the new processes
// (rejoin()) join it and take rank 0's position, parameters and momentum.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
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

// Where training stands: what a process that joins takes from rank 0 (share_state).
struct Position {
  int64_t epoch = 1, step = 0, steps = 0, global_micro = 0;
  double loss_scale = 1;
};

// Every rank takes root's parameters and momentum (and position, when given).
inline void share_state(dcomm::Communicator& comm, GradSync& sync, torch::optim::SGD& opt,
                        const std::vector<torch::Tensor>& params, int root, Position* at = nullptr) {
  if (at) check(comm.broadcast(at, at, sizeof(Position), dcomm::DataType::kUint8, root), "sharing the position");
  sync.broadcast_parameters(root);
  broadcast_momentum(comm, opt, params, root);
}

// On a process started in the place of launch rank `launch_rank`: waits (until `within`) for the
// survivors' FILE to name its new rank, and joins their communicator as it.
inline std::unique_ptr<dcomm::Communicator> rejoin(const std::string& file, int launch_rank,
                                                   std::chrono::milliseconds within) {
  const auto until = std::chrono::steady_clock::now() + within;
  for (;; std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
    std::ifstream in(file);
    std::string magic, id_text;
    int size = 0;
    if (in >> magic >> size >> id_text && magic == "dcomm-rejoin") {
      int launch = -1, rank = -1;
      while (in >> launch && in.ignore(1) && in >> rank)
        if (launch == launch_rank) break;
      if (launch != launch_rank)
        throw std::runtime_error(file + " names no rank for launch rank " + std::to_string(launch_rank));
      auto id = dcomm::UniqueId::parse(id_text);
      check(id.status(), "reading the grow id");
      auto config = dcomm::Config::from_env();
      check(config.status(), "reading the configuration");
      auto joined = dcomm::Communicator::join(rank, size, *id, *config);
      check(joined.status(), "joining the survivors");
      return std::move(*joined);
    }
    if (std::chrono::steady_clock::now() > until)
      throw std::runtime_error("--rejoin: no survivor wrote " + file + " within " + std::to_string(within.count()) +
                               " ms");
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
    const std::vector<int> lost = comm_->lost_ranks(std::chrono::seconds(5));
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

  // --rejoin, on every survivor after recover(): grows the communicator back over the processes
  // started in the missing launch ranks' places, which take rank 0's state and position `at`.
  void grow_back(const std::string& file, int launch_rank, Position at, GradSync& sync, torch::optim::SGD& opt,
                 const std::vector<torch::Tensor>& params, int launch_size) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> present(static_cast<size_t>(comm_->size()));
    const int32_t me = launch_rank;
    check(comm_->all_gather(&me, present.data(), 1, dcomm::DataType::kInt32), "learning the missing ranks");
    std::string names;
    int next = comm_->size();
    for (int r = 0; r < launch_size; ++r)
      if (std::find(present.begin(), present.end(), r) == present.end())
        names += " " + std::to_string(r) + ":" + std::to_string(next++);
    if (next == comm_->size()) return;
    std::optional<dcomm::UniqueId> id;
    if (comm_->rank() == 0) {
      auto made = comm_->grow_id();
      check(made.status(), "handing out the grow id");
      id = *made;
      const std::string tmp = file + ".tmp";
      std::ofstream(tmp) << "dcomm-rejoin " << next << " " << id->to_string() << names << "\n";
      if (std::rename(tmp.c_str(), file.c_str()) != 0) throw std::runtime_error("cannot write " + file);
    }
    auto grown = comm_->grow(next, id ? &*id : nullptr);
    if (comm_->rank() == 0) std::remove(file.c_str());  // a later restart waits for a new one
    check(grown.status(), "growing back to the restarted ranks");
    owned_.push_back(std::move(*grown));
    comm_ = owned_.back().get();
    sync.use(*comm_);
    share_state(*comm_, sync, opt, params, 0, &at);
    if (comm_->rank() == 0) {
      std::printf("--rejoin: launch rank:new rank%s joined; %d ranks go on from step %lld (%.1f ms)\n", names.c_str(),
                  comm_->size(), static_cast<long long>(at.step),
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    }
  }

 private:
  dcomm::Communicator* comm_;
  std::vector<std::unique_ptr<dcomm::Communicator>> owned_;  // the survivors' communicators, newest last
};

}  // namespace trainer
