// What a device communicator launches for one group (the calls between group_start() and the
// last group_end(), or one call alone), and in which order: host code with no CUDA, so the
// CPU tests check the order that comm/device_comm.cuh's flush() carries out step by step.
//
//   1. Everything is checked before anything is launched: one stream for the whole group,
//      each send to this rank matched by a receive, the send/recv grid resident at once
//      (comm/device_plan.hpp). A group that fails a check launches nothing.
//   2. The launch waits for the communicator's previous launch, whatever stream that was on:
//      two streams would otherwise race on the communicator's FIFOs and step counters (NCCL
//      orders a communicator's launches the same way).
//   3. The collectives in call order, then one kernel for every send and receive.
//   4. Then the scratch the group's calls read (PreMulSum's scaled input, an in-place
//      all-to-all's copy) is freed, each on the stream it was taken on, after the kernels (or
//      the staged copies) that read it; and the launch is marked, for the next one to wait on
//      and for the destructor.
// A failed check still frees the scratch (nothing reads it).
#pragma once

#include <utility>
#include <vector>

#include "dcomm/comm/device_plan.hpp"
#include "dcomm/comm/device_work.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

struct LaunchStep {
  enum Kind { kWaitPrevious, kCollective, kSendRecv, kFreeScratch, kMarkLaunched };
  Kind kind;
  size_t index = 0;         // kCollective: which of the group's collectives
  void* scratch = nullptr;  // kFreeScratch: what, and on which stream
  void* stream = nullptr;
};

class DeviceGroup {
 public:
  struct Collective {
    DeviceCollWork work;
    DataType type;  // the kernel's element type (uint8 for the copy-only collectives)
  };
  struct Launch {
    Status status;  // a failed check: the steps only free the scratch
    void* stream = nullptr;
    std::vector<LaunchStep> steps;
    std::vector<Collective> collectives;
    DeviceP2pWork p2p{};
  };

  // Every call of a group uses one stream (`op` and `rank` name the call in the error).
  Status use_stream(const char* op, int rank, void* stream) {
    if (has_stream_ && stream != stream_)
      return invalid_argument(op, " on rank ", rank, ": every call of a group must use one stream");
    stream_ = stream;
    has_stream_ = true;
    return {};
  }
  void add_collective(const DeviceCollWork& w, DataType type) { collectives_.push_back({w, type}); }
  // False when the group holds DeviceP2pWork::kMaxItems sends and receives already.
  bool add_send_recv(const DeviceP2pItem& item) { return add_p2p_item(p2p_, item); }
  // Scratch taken on `stream` that the group's calls read: freed there after they are launched.
  void keep_scratch(void* p, void* stream) { scratch_.push_back({p, stream}); }

  // Takes the group (this one is empty again) and says how to launch it.
  Launch close(int rank, const DeviceLaunchPlan& plan) {
    Launch l;
    l.stream = stream_;
    l.collectives = std::move(collectives_);
    l.p2p = p2p_;
    std::vector<std::pair<void*, void*>> scratch = std::move(scratch_);
    *this = DeviceGroup{};
    l.status = check(l, rank, plan);
    const bool launch = l.status.ok() && (!l.collectives.empty() || l.p2p.nitems > 0);
    if (launch) {
      l.steps.push_back({LaunchStep::kWaitPrevious});
      for (size_t i = 0; i < l.collectives.size(); ++i) l.steps.push_back({LaunchStep::kCollective, i});
      if (l.p2p.nitems > 0) l.steps.push_back({LaunchStep::kSendRecv});
    }
    for (const auto& [p, on] : scratch) l.steps.push_back({LaunchStep::kFreeScratch, 0, p, on});
    if (launch) l.steps.push_back({LaunchStep::kMarkLaunched});
    return l;
  }

 private:
  static Status check(const Launch& l, int rank, const DeviceLaunchPlan& plan) {
    int to_self = 0;  // sends to this rank minus receives from it: the copy needs both
    for (int i = 0; i < l.p2p.nitems; ++i)
      if (l.p2p.items[i].peer == rank) to_self += l.p2p.items[i].is_send ? 1 : -1;
    if (to_self != 0)
      return invalid_argument(
          "send/recv on rank ", rank, ": a send to this rank and its receive must be in one group (",
          to_self > 0 ? "a send has no receive" : "a receive has no send", "); nothing of the group was launched");
    if (l.p2p.nitems > 0) return check_p2p_grid(l.p2p.nlanes, plan, rank);
    return {};
  }

  bool has_stream_ = false;
  void* stream_ = nullptr;
  std::vector<Collective> collectives_;
  DeviceP2pWork p2p_{};
  std::vector<std::pair<void*, void*>> scratch_;  // (memory, its stream)
};

DCOMM_NAMESPACE_END
