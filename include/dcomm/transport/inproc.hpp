// In-process transport: ranks that are threads of one process share heap FIFOs directly.
// Both ranks of a pair meet in a process-wide registry under the communicator's key; the
// first to arrive creates the pair, the second takes it and removes the entry.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "dcomm/core/config.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
struct InprocPair {
  InprocPair(const Config& c)
      : low_to_high(c, static_cast<size_t>(c.small_slots)), high_to_low(c, static_cast<size_t>(c.small_slots)) {}
  HeapFifo low_to_high;
  HeapFifo high_to_low;
};

struct InprocRegistry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<InprocPair>> pairs;
};
inline InprocRegistry& inproc_registry() {
  static InprocRegistry r;
  return r;
}
}  // namespace detail

class InprocConnection final : public Connection {
 public:
  InprocConnection(std::shared_ptr<detail::InprocPair> pair, bool low) : pair_(std::move(pair)), low_(low) {}
  FifoRef send_fifo() const override { return low_ ? pair_->low_to_high.fifo : pair_->high_to_low.fifo; }
  FifoRef recv_fifo() const override { return low_ ? pair_->high_to_low.fifo : pair_->low_to_high.fifo; }
  const char* kind() const override { return "inproc"; }
  size_t staging_bytes() const override { return pair_->low_to_high.bytes; }

 private:
  std::shared_ptr<detail::InprocPair> pair_;
  bool low_;
};

class InprocTransport final : public Transport {
 public:
  const char* name() const override { return "inproc"; }
  Result<std::unique_ptr<Connection>> connect(const ConnectContext& ctx) override {
    bool low = ctx.rank < ctx.peer->rank;
    int lo = low ? ctx.rank : ctx.peer->rank, hi = low ? ctx.peer->rank : ctx.rank;
    std::string key = detail::cat(ctx.key_prefix, "/", lo, "-", hi);
    auto& reg = detail::inproc_registry();
    std::shared_ptr<detail::InprocPair> pair;
    {
      std::lock_guard<std::mutex> lock(reg.mu);
      auto it = reg.pairs.find(key);
      if (it == reg.pairs.end()) {
        pair = std::make_shared<detail::InprocPair>(*ctx.config);
        reg.pairs.emplace(key, pair);
      } else {
        pair = it->second;
        reg.pairs.erase(it);
      }
    }
    return std::unique_ptr<Connection>(new InprocConnection(std::move(pair), low));
  }
};

DCOMM_NAMESPACE_END
