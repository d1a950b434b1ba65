// Who is in a communicator, changed collectively: split (MPI_Comm_split, ncclCommSplit), revoke
// (ncclCommRevoke), shrink past ranks that died or are dropped (ncclCommShrink), and grow by new
// processes (ncclCommGetUniqueId + ncclCommGrow). A base of Communicator, so that these are its
// members; docs/reliability.md says what each guarantees.
//
// No rank is special after start-up. Every rank holds a port bound at set-up and published in the
// roster (PeerInfo::spare); a shrink's new store is served there by the lowest surviving rank, so
// the survivors need nothing from a rank that is gone (rank 0, which served the first store,
// included). A grow's store is served by the rank that handed out the id.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/bootstrap/store.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

// NCCL_SHRINK_DEFAULT and NCCL_SHRINK_ABORT.
enum class ShrinkMode {
  kDefault,  // no call may be in flight on this rank (an error says so)
  kAbort,    // revoke first: calls in flight end on every rank, then shrink
};

namespace detail {
inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? "," : "", ranks[i]);
  return s + "}";
}
// What a shrink's agreement compares: the excluded ranks, sorted.
inline Result<std::vector<int>> exclusion_set(std::vector<int> excluded, int rank, int size) {
  std::sort(excluded.begin(), excluded.end());
  for (size_t i = 0; i < excluded.size(); ++i) {
    const int r = excluded[i];
    if (r < 0 || r >= size) return invalid_argument("excluded rank ", r, " is out of range for ", size, " ranks");
    if (i > 0 && excluded[i - 1] == r) return invalid_argument("rank ", r, " is excluded twice");
    if (r == rank)
      return invalid_argument("this rank (", rank, ") is in its own exclude list: excluded ranks do not call shrink");
  }
  if (static_cast<int>(excluded.size()) == size) return invalid_argument("every rank is excluded");
  return excluded;
}
}  // namespace detail

template <class Comm>
class MembershipCalls {
 public:
  // MPI_Comm_split / ncclCommSplit: collective over this communicator. Ranks with the same
  // color form a new communicator, ordered by (key, old rank). A negative color joins
  // none and yields a null pointer.
  Result<std::unique_ptr<Comm>> split(int color, int key) {
    Comm& c = self();
    int32_t mine[2] = {color, key};
    std::vector<int32_t> all(2 * static_cast<size_t>(c.size_));
    Status s = c.all_gather(mine, all.data(), 2, DataType::kInt32);
    if (!s.ok()) return s.with_context("split");
    int seq = split_count_++;
    if (color < 0) return std::unique_ptr<Comm>();
    std::vector<std::pair<int, int>> members;  // (key, old rank)
    for (int r = 0; r < c.size_; ++r)
      if (all[2 * static_cast<size_t>(r)] == color) members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
    std::sort(members.begin(), members.end());
    int new_rank =
        static_cast<int>(std::find(members.begin(), members.end(), std::make_pair(key, c.rank_)) - members.begin());
    std::string prefix = detail::cat(c.prefix_, "s", seq, "c", color);
    return Comm::create(new_rank, static_cast<int>(members.size()), c.store_->server_address(), prefix, c.config_,
                        c.server_, c.access_);
  }

  // ncclCommRevoke: every call in flight on every rank ends with an error that says so (host
  // waits; GPU kernels through the device communicator's abort flag), and every later call fails
  // at once. Nothing is destroyed: shrink() next, or destroy. Callable from any thread.
  void revoke() { self().abort_now(detail::cat("rank ", self().rank_, " revoked the communicator")); }

  // The ranks whose processes this rank saw die (a control connection closed without a goodbye),
  // in order: what a survivor excludes. Ranks that are threads of this process are never lost.
  std::vector<int> lost_ranks() const {
    const Comm& c = static_cast<const Comm&>(*this);
    return c.transports_.proxy ? c.transports_.proxy->lost_peers() : std::vector<int>{};
  }
  // The same, waiting up to `within` for a first one: a call can fail on a peer's death a moment
  // before this rank's proxy has seen the connection close. Empty when none died by then.
  std::vector<int> lost_ranks(std::chrono::milliseconds within) const {
    const auto until = std::chrono::steady_clock::now() + within;
    std::vector<int> lost;
    while ((lost = lost_ranks()).empty() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    return lost;
  }

  // ncclCommShrink: a communicator of the ranks not in `excluded`, renumbered in order, usable
  // although the excluded ranks are dead. Collective over the survivors (the excluded ranks do
  // not call it); every survivor must pass the same set, or it fails on all of them naming the
  // difference. A survivor that dies during the shrink is named, never waited on past the
  // timeout. This communicator is left as it was (revoked in abort mode).
  Result<std::unique_ptr<Comm>> shrink(const std::vector<int>& excluded, ShrinkMode mode = ShrinkMode::kDefault) {
    Comm& c = self();
    auto fail = [&](const Status& s) {
      return s.with_context(detail::cat("shrink on rank ", c.rank_, " of ", c.size_));
    };
    auto set = detail::exclusion_set(excluded, c.rank_, c.size_);
    if (!set.ok()) return fail(set.status());
    DCOMM_RETURN_IF_ERROR(fail(quiesce(mode)));
    std::vector<int> survivors;
    for (int r = 0; r < c.size_; ++r)
      if (!std::binary_search(set->begin(), set->end(), r)) survivors.push_back(r);
    const int leader = survivors.front();
    auto at = parse_address(c.peers_[static_cast<size_t>(leader)].spare);
    if (!at.ok()) return fail(at.status().with_context(detail::cat("rank ", leader, "'s spare port")));
    // The leader serves on its spare port, from its first shrink on: a shrink tried again (the
    // survivors disagreed, say) or a second one of this communicator reuses the store.
    if (leader == c.rank_ && !shrink_store_) {
      auto started = StoreServer::start(std::move(spare_), at->host, c.access_, StoreLimits{});
      if (!started.ok()) return fail(started.status());
      shrink_store_ = *started;
    }
    std::shared_ptr<StoreServer> server = leader == c.rank_ ? shrink_store_ : nullptr;
    const std::string prefix = detail::cat(c.prefix_, "k", shrink_count_++);
    auto agreed = agree_on_shrink(*at, prefix, *set, survivors);
    if (!agreed.ok()) return fail(agreed.status());
    const int new_rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), c.rank_) - survivors.begin());
    auto made = Comm::create(new_rank, static_cast<int>(survivors.size()), *at, prefix, c.config_, server, c.access_);
    (*agreed)->finish(made.ok());
    if (!made.ok()) return fail(made.status());
    DCOMM_LOG(kInfo, kSubsysInit, c.rank_, "shrank past ranks ", detail::rank_list(*set), ": now rank ", new_rank,
              " of ", survivors.size());
    return made;
  }

  // ncclCommGetUniqueId: on one rank, an id for new processes to join by (join()) while every
  // rank of this communicator calls grow(); this rank serves the new store. One at a time.
  Result<UniqueId> grow_id() {
    Comm& c = self();
    if (grow_id_) return invalid_argument("grow_id on rank ", c.rank_, ": the id handed out earlier was not used yet");
    auto mine = parse_address(c.peers_[static_cast<size_t>(c.rank_)].address);
    if (!mine.ok()) return mine.status();
    auto id = UniqueId::create_at(SocketAddress{mine->host, 0});
    if (!id.ok()) return id.status().with_context("grow_id");
    // New processes check their rank against the size they join (join()).
    auto store = StoreClient::connect(id->address, c.config_.timeout, StoreAccess{id->secret, {}});
    if (!store.ok()) return store.status().with_context("grow_id");
    DCOMM_RETURN_IF_ERROR((*store)->set(detail::cat(detail::hex16(id->nonce), "/grown_from"), detail::cat(c.size_)));
    grow_id_ = *id;
    return *id;
  }

  // ncclCommGrow on the ranks of this communicator: a communicator of new_size ranks in which
  // each keeps its rank and the new processes (join()) take the rest. Every rank calls it; the
  // rank that made the id passes it (the others pass null).
  Result<std::unique_ptr<Comm>> grow(int new_size, const UniqueId* id) {
    Comm& c = self();
    auto fail = [&](const Status& s) { return s.with_context(detail::cat("grow on rank ", c.rank_, " of ", c.size_)); };
    if (new_size <= c.size_) return fail(invalid_argument("the new size ", new_size, " is not above ", c.size_));
    if (id && (!grow_id_ || id->nonce != grow_id_->nonce))
      return fail(invalid_argument("the id passed was not made by grow_id() on this rank"));
    // The id reaches every rank over this communicator: exactly one rank passes it.
    constexpr size_t kText = 256;
    std::string mine(kText, '\0');
    if (id) mine.replace(0, id->to_string().size(), id->to_string());
    std::string all(kText * static_cast<size_t>(c.size_), '\0');
    DCOMM_RETURN_IF_ERROR(fail(c.all_gather(mine.data(), all.data(), kText, DataType::kUint8)));
    std::vector<int> roots;
    for (int r = 0; r < c.size_; ++r)
      if (all[static_cast<size_t>(r) * kText] != '\0') roots.push_back(r);
    if (roots.size() != 1)
      return fail(invalid_argument(roots.size(), " ranks passed an id ", detail::rank_list(roots),
                                   ": exactly one (the one that called grow_id) must"));
    const size_t from = static_cast<size_t>(roots[0]) * kText;
    auto theirs = UniqueId::parse(std::string(all.c_str() + from, strnlen(all.c_str() + from, kText)));
    if (!theirs.ok()) return fail(theirs.status());
    grow_id_.reset();
    return Comm::create(c.rank_, new_size, theirs->address, detail::hex16(theirs->nonce), c.config_,
                        id ? detail::claim_store(theirs->address) : nullptr, StoreAccess{theirs->secret, {}});
  }

  // ncclCommGrow on a new process: joins as `rank` (at least the old size) of new_size.
  static Result<std::unique_ptr<Comm>> join(int rank, int new_size, const UniqueId& id, const Config& config) {
    auto fail = [&](const Status& s) {
      return s.with_context(detail::cat("joining as rank ", rank, " of ", new_size));
    };
    auto store = StoreClient::connect(id.address, config.timeout, StoreAccess{id.secret, {}});
    if (!store.ok()) return fail(store.status());
    auto from = (*store)->get(detail::cat(detail::hex16(id.nonce), "/grown_from"));
    if (!from.ok()) return fail(from.status());
    const int old_size = std::atoi(from->c_str());
    if (rank < old_size || rank >= new_size)
      return fail(invalid_argument("a new process takes a rank from ", old_size, " to ", new_size - 1,
                                   " (the communicator grows from ", old_size, " ranks)"));
    return Comm::init(rank, new_size, id, config);
  }

 protected:
  // At set-up: the port a shrink's store may be served on (`ip`:any), as the roster publishes it.
  Result<std::string> hold_spare_port(const std::string& ip) {
    auto s = bind_to(SocketAddress{ip, 0});
    if (!s.ok()) return s.status().with_context("the spare port");
    spare_ = std::move(*s);
    return detail::cat(ip, ":", bound_port(spare_.fd()));
  }

 private:
  Comm& self() { return static_cast<Comm&>(*this); }

  // No call of the parent is in flight on this rank once this returns ok. Abort mode revokes in
  // any case: a survivor may be blocked in a call with the excluded ranks although this one is not.
  Status quiesce(ShrinkMode mode) {
    Comm& c = self();
    const auto busy = [&] { return c.in_call_.load(std::memory_order_acquire) || c.executor_.in_flight() > 0; };
    if (mode == ShrinkMode::kDefault)
      return busy() ? invalid_argument(
                          "a call is still in flight on this communicator: wait for it, or shrink in abort mode")
                    : Status{};
    if (!c.aborted()) revoke();
    Deadline deadline(c.config_.timeout);
    while (busy() && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (busy()) return make_error(ErrorCode::kTimeout, "the revoked calls in flight did not end within the timeout");
    return {};
  }

  // Watches, while a shrink lasts, for a survivor whose process dies: its name goes to the new
  // store's abort key, so every survivor's wait there ends at once with it.
  class DeathWatch {
   public:
    DeathWatch(const Comm& parent, std::unique_ptr<StoreClient> store, std::string prefix, std::vector<int> survivors)
        : rank_(parent.rank_), store_(std::move(store)), prefix_(std::move(prefix)) {
      if (!parent.transports_.proxy) return;  // every peer is a thread of this process
      thread_ = std::thread([this, &parent, survivors = std::move(survivors)] {
        while (!done_.load(std::memory_order_acquire)) {
          for (int r : parent.lost_ranks()) {
            if (!std::binary_search(survivors.begin(), survivors.end(), r)) continue;
            auto joined = store_->check(detail::cat(prefix_, "/joined/", r));  // it left after its shrink ended
            if (joined.ok() && *joined) continue;
            store_->set(prefix_ + "/abort", detail::cat(parent.peer(r).describe(), " died during the shrink")).ignore();
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      });
    }
    ~DeathWatch() { stop(); }
    // Says on the store that this rank's shrink ended (its parent may go now, and its control
    // connections close: that is no death), then stops watching.
    void finish(bool ok) {
      stop();
      if (ok) store_->set(detail::cat(prefix_, "/joined/", rank_), "1").ignore();
    }
    StoreClient& store() { return *store_; }

   private:
    void stop() {
      done_.store(true, std::memory_order_release);
      if (thread_.joinable()) thread_.join();
    }
    int rank_;
    std::unique_ptr<StoreClient> store_;
    std::string prefix_;
    std::atomic<bool> done_{false};
    std::thread thread_;
  };

  // Every survivor publishes the set it excludes; each reads every other survivor's (in its own
  // view) and fails, naming the difference, unless all match.
  Result<std::unique_ptr<DeathWatch>> agree_on_shrink(const SocketAddress& at, const std::string& prefix,
                                                      const std::vector<int>& set, const std::vector<int>& survivors) {
    Comm& c = self();
    auto mine = StoreClient::connect(at, c.config_.timeout, c.access_);
    auto watching = StoreClient::connect(at, c.config_.timeout, c.access_);
    if (!mine.ok() || !watching.ok())
      return (mine.ok() ? watching.status() : mine.status())
          .with_context(detail::cat("the shrink's store on rank ", survivors.front(), " (", at.to_string(), ")"));
    auto watch = std::make_unique<DeathWatch>(c, std::move(*watching), prefix, survivors);
    StoreClient& store = **mine;
    store.set_abort_key(prefix + "/abort");
    const std::string text = detail::rank_list(set);
    DCOMM_RETURN_IF_ERROR(store.set(detail::cat(prefix, "/excludes/", c.rank_), text));
    for (int r : survivors) {
      if (r == c.rank_) continue;
      auto theirs = store.get(detail::cat(prefix, "/excludes/", r));
      if (!theirs.ok()) {
        if (theirs.status().code() == ErrorCode::kTimeout)
          return make_error(ErrorCode::kTimeout, c.peer(r).describe(), " did not call shrink within ",
                            c.config_.timeout.count(), " ms");
        return theirs.status();
      }
      if (*theirs == text) continue;
      Status differ = invalid_argument("the survivors disagree on whom to exclude: rank ", r, " excludes ", *theirs,
                                       ", rank ", c.rank_, " excludes ", text);
      watch->store().set(prefix + "/abort", differ.message()).ignore();
      return differ;
    }
    return watch;
  }

  int split_count_ = 0, shrink_count_ = 0;
  Socket spare_;                               // bound at set-up; a shrink led by this rank serves its store here
  std::shared_ptr<StoreServer> shrink_store_;  // that store, once served
  std::optional<UniqueId> grow_id_;            // handed out by grow_id(), not yet used by grow()
};

DCOMM_NAMESPACE_END
