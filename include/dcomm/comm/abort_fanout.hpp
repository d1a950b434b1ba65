// How an abort reaches every rank of a communicator: other processes over the proxy's control
// sockets (transport/proxy.hpp), ranks that are threads of this process directly, through this
// process's registry of communicators by their store prefix. The same registry tells which call
// a thread-rank is in, for a wait on it that stalls (CallDirectory); other processes are asked
// over the control sockets.
//
// The fan-out reaches the calls; a rank still setting up a lazy link waits in the store, for a key
// the aborting rank will never publish. So the rank that aborts also writes its reason under the
// communicator's abort key, which every store wait of the communicator watches: those waits end
// at once too.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/peer_info.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/transport/proxy.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN
namespace detail {
struct LocalGroups {
  std::mutex mu;
  std::map<std::string, std::map<int, std::weak_ptr<AbortState>>> groups;  // prefix -> rank -> state
};
inline LocalGroups& local_groups() {
  static LocalGroups g;
  return g;
}
}  // namespace detail

// One rank's place in the fan-out: joined at set-up, left when the communicator goes.
class AbortFanout final : public CallDirectory {
 public:
  // peers: the roster (outlives this); proxy: null when every peer is a thread of this process.
  void join(const std::string& prefix, int rank, const std::vector<PeerInfo>* peers,
            const std::shared_ptr<AbortState>& abort, Proxy* proxy) {
    prefix_ = prefix, rank_ = rank, peers_ = peers, proxy_ = proxy;
    std::lock_guard<std::mutex> lock(detail::local_groups().mu);
    detail::local_groups().groups[prefix_][rank_] = abort;
    joined_ = true;
  }
  ~AbortFanout() override { leave(); }
  // Where an abort's reason goes for the waits in the store (StoreClient::set_abort_key).
  void tell_store(SocketAddress at, StoreAccess access, std::string abort_key) {
    store_at_ = std::move(at), access_ = std::move(access), abort_key_ = std::move(abort_key);
  }
  void leave() {
    if (notice_.joinable()) notice_.join();
    if (!joined_) return;
    joined_ = false;
    std::lock_guard<std::mutex> lock(detail::local_groups().mu);
    auto& groups = detail::local_groups().groups;
    if (auto it = groups.find(prefix_); it != groups.end()) {
      it->second.erase(rank_);
      if (it->second.empty()) groups.erase(it);
    }
  }

  // This rank aborted (why): tell every other rank.
  void fan_out(const Status& why) const {
    DCOMM_LOG(kWarn, kSubsysInit, rank_, "communicator aborted: ", why.message());
    if (proxy_) proxy_->broadcast_abort(why);
    if (!abort_key_.empty() && !notice_.joinable())
      notice_ =
          std::thread([this, text = detail::cat(self().describe(), " aborted the communicator: ", why.message())] {
            // A store that is gone (its rank died) has no waits left to end.
            auto store = StoreClient::connect(store_at_, std::chrono::seconds(1), access_);
            if (store.ok()) (*store)->set(abort_key_, text).ignore();
          });
    std::vector<std::shared_ptr<AbortState>> local;
    {
      std::lock_guard<std::mutex> lock(detail::local_groups().mu);
      for (auto& [r, weak] : detail::local_groups().groups[prefix_])
        if (auto a = weak.lock(); a && r != rank_) local.push_back(a);
    }
    for (auto& a : local)
      a->abort(
          make_error(remote_abort_code(why.code()), self().describe(), " aborted the communicator: ", why.message()),
          /*notify_peers=*/false);
  }

  std::optional<AbortState::CallInfo> call_of(int peer, std::chrono::milliseconds within) override {
    if (!peers_ || peer < 0 || peer >= static_cast<int>(peers_->size())) return std::nullopt;
    if ((*peers_)[static_cast<size_t>(peer)].process_id == self().process_id) {
      std::lock_guard<std::mutex> lock(detail::local_groups().mu);
      auto& group = detail::local_groups().groups[prefix_];
      auto it = group.find(peer);
      if (it == group.end()) return std::nullopt;
      auto state = it->second.lock();
      return state ? std::optional(state->current_call()) : std::nullopt;
    }
    return proxy_ ? proxy_->query_call(peer, within) : std::nullopt;
  }

 private:
  const PeerInfo& self() const { return (*peers_)[static_cast<size_t>(rank_)]; }

  std::string prefix_;
  int rank_ = 0;
  const std::vector<PeerInfo>* peers_ = nullptr;
  Proxy* proxy_ = nullptr;
  bool joined_ = false;
  SocketAddress store_at_;
  StoreAccess access_;
  std::string abort_key_;
  mutable std::thread notice_;  // writes the abort key (fan_out is called once: AbortState's first abort)
};

DCOMM_NAMESPACE_END
