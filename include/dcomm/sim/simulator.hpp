// The simulator: runs the schedules of algo/schedule.hpp (the very steps the communicator
// runs, or the steps sim/recorder.hpp records from the algorithms written over primitives)
// for up to 65,536 ranks against a modelled network, without moving data.
//
// Data is symbolic: each rank's working buffer is a list of pieces, each carrying a
// fingerprint of the contributions it holds (how many, a sum of per-rank 64-bit hashes, how
// often it was finalized). A reduce adds fingerprints, a copy replaces them, so at the end
// the simulator checks that every rank holds every contribution exactly once, finalized once
// (all_reduce), its own block reduced (reduce_scatter), every rank's block (all_gather), the
// root's data unreduced (broadcast) or, on the root, every contribution (reduce); a schedule
// whose messages do not match (sizes, or a receive no one sends) is reported.
//
// Time: each rank has a clock, and ranks are stepped in the order of their clocks (an event
// simulation). A transfer departs at the sender's clock and arrives after the link's latency
// plus bytes / bandwidth; the sender is busy for the bytes / bandwidth; the receiver continues
// at max(its clock, the arrival), plus `wake_us` when it had to wait. Ranks are packed
// `ranks_per_host` to a host in rank order; within a host the local link, between hosts a
// NIC: a fat tree with full bisection, so the only contention is at a host's NICs, shared by
// the ranks of that host that send off the host in the same step.
//
// Processor time (for CPU ranks over shared memory): with `cores_per_host` set, the ranks of
// a host share that many cores, and the work a step takes on a core (`step_cpu_us`, copying
// into a slot and out of it at `copy_bytes_per_us`, folding at `reduce_bytes_per_us`, and a
// second pass where a receive lands in a buffer because the step still sends from its range)
// waits for a free core. This is what makes 8 ranks on 2 cores slower per step than 2 ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "dcomm/algo/schedule.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

struct SimNetwork {
  int ranks_per_host = 8;
  double local_alpha_us = 1.0;        // within a host: a step
  double local_bytes_per_us = 150e3;  // within a host: 150 GB/s (NVLink class)
  double net_alpha_us = 5.0;          // between hosts: a step
  double nic_bytes_per_us = 50e3;     // 400 Gb/s per NIC
  int nics_per_host = 8;              // one per GPU
  double reduce_bytes_per_us = 0;     // a rank folding what it receives; 0: free (a GPU's is)
  // CPU ranks (see above); 0 = not modelled.
  int cores_per_host = 0;
  double step_cpu_us = 0;
  double copy_bytes_per_us = 0;
  double wake_us = 0;
};

struct SimResult {
  double time_us = 0;
  size_t messages = 0;
  std::string error;  // empty: every rank ended with the right contributions
};

namespace sim {
struct Fingerprint {
  uint32_t count = 0;
  uint32_t finalized = 0;
  uint64_t hash = 0;
  bool operator==(const Fingerprint&) const = default;
};

inline uint64_t mix(uint64_t z) {  // splitmix64
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t rank_hash(int r) { return mix(static_cast<uint64_t>(r)); }
// Rank r's send block b of an exchange.
inline uint64_t block_hash(int r, int b) {
  return mix((static_cast<uint64_t>(r) << 32) + static_cast<uint64_t>(b) + (1ull << 63));
}

struct Piece {
  size_t begin, end;
  Fingerprint fp;
};

// A working buffer as pieces covering [0, size), sorted, adjacent equal ones merged.
class SymbolicBuffer {
 public:
  SymbolicBuffer() = default;
  SymbolicBuffer(size_t size, Fingerprint fill) : pieces_{{0, size, fill}} {}

  // The pieces of `r`, shifted to start at 0.
  std::vector<Piece> get(Range r) const {
    std::vector<Piece> out;
    for (const Piece& p : pieces_) {
      size_t b = std::max(p.begin, r.begin), e = std::min(p.end, r.end);
      if (b < e) out.push_back({b - r.begin, e - r.begin, p.fp});
    }
    return out;
  }
  // Writes `src` (pieces from 0) over `r`, adding fingerprints when `reduce`. Returns false when
  // a reduction meets finalized data (it would be divided twice).
  bool put(Range r, const std::vector<Piece>& src, bool reduce) {
    std::vector<Piece> out;
    for (const Piece& p : pieces_) {
      if (p.end <= r.begin || p.begin >= r.end) {
        out.push_back(p);
        continue;
      }
      if (p.begin < r.begin) out.push_back({p.begin, r.begin, p.fp});
      for (const Piece& s : src) {  // the overlap of p with each incoming piece
        size_t b = std::max(p.begin, s.begin + r.begin), e = std::min(p.end, s.end + r.begin);
        if (b >= e) continue;
        Fingerprint f = s.fp;
        if (reduce) {
          if (f.finalized || p.fp.finalized) return false;
          f.count += p.fp.count, f.hash += p.fp.hash;
        }
        out.push_back({b, e, f});
      }
      if (p.end > r.end) out.push_back({r.end, p.end, p.fp});
    }
    merge(out);
    return true;
  }
  void finalize(Range r) {
    std::vector<Piece> in = get(r);
    for (auto& p : in) p.fp.finalized += 1;
    put(r, in, false);
  }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  void merge(std::vector<Piece>& v) {
    std::sort(v.begin(), v.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    pieces_.clear();
    for (const Piece& p : v) {
      if (!pieces_.empty() && pieces_.back().end == p.begin && pieces_.back().fp == p.fp) pieces_.back().end = p.end;
      else pieces_.push_back(p);
    }
  }
  std::vector<Piece> pieces_;
};

struct Message {
  std::vector<Piece> data;
  size_t elems;
  double arrival;
};
}  // namespace sim

// The exchanges (algo/exchange.hpp: schedule_exchange) move blocks without reducing: every
// rank's send block b starts with a fingerprint of its own (rank, b), so a block that lands in
// the wrong place is caught, not only a rank's data that is missing.
enum class SimCollective { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kGather, kScatter, kAllToAll };

inline bool sim_exchanges(SimCollective what) {
  return what == SimCollective::kGather || what == SimCollective::kScatter || what == SimCollective::kAllToAll;
}

// Where the input and output of an all_reduce, broadcast or reduce lie in the working buffer,
// when they are not the whole of it (the recorded algorithms: sim/recorder.hpp's
// RecordedLayout; broadcast and reduce are only recorded).
struct SimLayout {
  size_t buffer_elems = 0;  // 0: the buffer is the `elems` of the call, input and output in place
  size_t input_at = 0, output_at = 0;
  int root = 0;  // broadcast, reduce
};

namespace sim {
// One simulation: the ranks' buffers, clocks, program counters and message queues.
class Run {
 public:
  Run(const std::vector<Schedule>& schedules, SimCollective what, size_t elems, size_t elem_bytes, size_t block,
      const SimNetwork& net, const SimLayout& layout)
      : s_(schedules),
        what_(what),
        elems_(elems),
        eb_(elem_bytes),
        block_(block),
        net_(net),
        layout_(layout),
        n_(static_cast<int>(schedules.size())),
        clock_(static_cast<size_t>(n_), 0.0),
        pc_(static_cast<size_t>(n_), 0),
        sent_(static_cast<size_t>(n_), false),
        waiting_(static_cast<size_t>(n_), false) {
    // Concurrent off-host senders per (host, step index), for NIC sharing.
    for (int x = 0; x < n_; ++x)
      for (size_t i = 0; i < s_[static_cast<size_t>(x)].size(); ++i) {
        const Step& st = s_[static_cast<size_t>(x)][i];
        if (st.send_peer >= 0 && host(st.send_peer) != host(x)) ++off_host_[{host(x), i}];
      }
    fill_buffers();
    if (net.cores_per_host > 0)
      cores_.assign(static_cast<size_t>(host(n_ - 1)) + 1,
                    std::vector<double>(static_cast<size_t>(net.cores_per_host), 0.0));
  }

  SimResult run() {
    for (int x = 0; x < n_; ++x) ready_.push({0.0, x});
    int finished = 0;
    while (!ready_.empty()) {
      const int x = ready_.top().second;
      ready_.pop();
      if (pc_[static_cast<size_t>(x)] == s_[static_cast<size_t>(x)].size()) ++finished;
      else if (!step(x)) return res_;
    }
    if (finished != n_) {
      for (int x = 0; x < n_; ++x)
        if (pc_[static_cast<size_t>(x)] < s_[static_cast<size_t>(x)].size())
          return fail(cat("deadlock: rank ", x, " waits at step ", pc_[static_cast<size_t>(x)]));
    }
    for (const auto& [pair, q] : queues_)
      if (!q.empty()) return fail(cat("rank ", pair.first, " sent rank ", pair.second, " a message it never received"));
    uint64_t all = 0;
    for (int x = 0; x < n_; ++x) all += rank_hash(x);
    const Fingerprint reduced{static_cast<uint32_t>(n_), 1, all};  // every contribution, finalized once
    for (int x = 0; x < n_ && res_.error.empty(); ++x) check(x, reduced);
    res_.time_us = *std::max_element(clock_.begin(), clock_.end());
    return res_;
  }

 private:
  template <class... Args>
  static std::string cat(const Args&... args) {
    std::string out;
    ((out += to_text(args)), ...);
    return out;
  }
  static std::string to_text(const std::string& v) { return v; }
  static std::string to_text(const char* v) { return v; }
  template <class T>
  static std::string to_text(const T& v) {
    return std::to_string(v);
  }
  SimResult fail(std::string why) {
    res_.error = std::move(why);
    return res_;
  }
  int host(int x) const { return x / std::max(1, net_.ranks_per_host); }
  SymbolicBuffer& buf(int x) { return buf_[static_cast<size_t>(x)]; }
  double& clock(int x) { return clock_[static_cast<size_t>(x)]; }
  static double per_byte(double bytes, double rate) { return rate > 0 ? bytes / rate : 0.0; }

  void fill_buffers() {
    buf_.resize(static_cast<size_t>(n_));
    // What the rest of a buffer holds before the call: not zeros, so a fold into it is caught.
    const Fingerprint garbage{0, 0, rank_hash(-1)};
    for (int x = 0; x < n_; ++x) {
      Fingerprint mine{1, 0, rank_hash(x)};
      if (sim_exchanges(what_)) {
        buf(x) = SymbolicBuffer(2 * elems_, garbage);
        for (int b = 0; b < n_; ++b)
          buf(x).put({block_ * static_cast<size_t>(b), block_ * static_cast<size_t>(b + 1)},
                     {{0, block_, Fingerprint{1, 0, block_hash(x, b)}}}, false);
      } else if (what_ == SimCollective::kAllGather) {
        buf(x) = SymbolicBuffer(elems_, garbage);
        std::vector<Piece> own{{0, block_, mine}};
        buf(x).put({block_ * static_cast<size_t>(x), block_ * static_cast<size_t>(x + 1)}, own, false);
      } else if (layout_.buffer_elems) {
        buf(x) = SymbolicBuffer(layout_.buffer_elems, garbage);
        buf(x).put({layout_.input_at, layout_.input_at + elems_}, {{0, elems_, mine}}, false);
      } else {
        buf(x) = SymbolicBuffer(elems_, mine);
      }
    }
  }

  // Writes `data` over rank x's range `r` at its step i, folding when `reduce`; false, with the
  // error set, when a fold meets finalized data (it would be divided twice).
  bool land(int x, size_t i, Range r, const std::vector<Piece>& data, bool reduce) {
    if (buf(x).put(r, data, reduce)) return true;
    res_.error = cat("rank ", x, " step ", i, " reduces data already finalized");
    return false;
  }

  // Runs `us` of work for rank x from its clock, on the host's first free core when modelled.
  void work(int x, double us) {
    double& t = clock(x);
    if (us <= 0) return;
    if (cores_.empty()) {
      t += us;
      return;
    }
    auto& mine = cores_[static_cast<size_t>(host(x))];
    auto core = std::min_element(mine.begin(), mine.end());
    t = std::max(t, *core) + us;
    *core = t;
  }

  // Rank x's next step; false on an error (res_.error says which). A step that waits for a
  // message leaves x off the ready queue until the message is sent.
  bool step(int x) {
    size_t& i = pc_[static_cast<size_t>(x)];
    const Step& st = s_[static_cast<size_t>(x)][i];
    if (st.kind == Step::Kind::kFinalize) {
      buf(x).finalize(st.recv);
    } else if (st.kind == Step::Kind::kCopy) {  // or, with reduce, a fold of one range into another
      if (!land(x, i, st.recv, buf(x).get(st.send), st.reduce)) return false;
      const double bytes = static_cast<double>(st.recv.size() * eb_);
      if (!st.fused) work(x, per_byte(bytes, st.reduce ? net_.reduce_bytes_per_us : net_.copy_bytes_per_us));
    } else {
      if (st.send_peer >= 0 && !sent_[static_cast<size_t>(x)]) send(x, st, i);
      if (st.recv_peer >= 0) {
        auto& q = queues_[{st.recv_peer, x}];
        if (q.empty()) {  // wait for it
          waiting_[static_cast<size_t>(x)] = true;
          return true;
        }
        if (!receive(x, st, i, q)) return false;
      }
      sent_[static_cast<size_t>(x)] = false;
    }
    ++i;
    ready_.push({clock(x), x});
    return true;
  }

  void send(int x, const Step& st, size_t i) {
    const bool remote = host(st.send_peer) != host(x);
    const double bytes = static_cast<double>(st.send.size() * eb_);
    double bw = net_.local_bytes_per_us, alpha = net_.local_alpha_us;
    if (remote) {
      const int sharing = off_host_[{host(x), i}];
      bw = net_.nic_bytes_per_us * std::min(1.0, static_cast<double>(net_.nics_per_host) / std::max(1, sharing));
      alpha = net_.net_alpha_us;
    }
    work(x, (st.fused ? 0 : net_.step_cpu_us) + per_byte(bytes, net_.copy_bytes_per_us));  // into the slot
    const double depart = clock(x);
    queues_[{x, st.send_peer}].push_back({buf(x).get(st.send), st.send.size(), depart + alpha + bytes / bw});
    clock(x) = depart + bytes / bw;
    sent_[static_cast<size_t>(x)] = true;
    ++res_.messages;
    if (waiting_[static_cast<size_t>(st.send_peer)]) {
      waiting_[static_cast<size_t>(st.send_peer)] = false;
      ready_.push({clock(st.send_peer), st.send_peer});
    }
  }

  bool receive(int x, const Step& st, size_t i, std::deque<Message>& q) {
    Message m = std::move(q.front());
    q.pop_front();
    if (m.elems != st.recv.size()) {
      res_.error = cat("rank ", x, " step ", i, " expects ", st.recv.size(), " elements from rank ", st.recv_peer,
                       ", which sent ", m.elems);
      return false;
    }
    if (!land(x, i, st.recv, m.data, st.reduce)) return false;
    double& t = clock(x);
    if (m.arrival > t) t = m.arrival + net_.wake_us;
    const double bytes = static_cast<double>(st.recv.size() * eb_);
    const bool staged = st.reduce && st.send_peer >= 0 && st.send.begin < st.recv.end && st.recv.begin < st.send.end;
    double cpu = st.send_peer >= 0 ? 0 : net_.step_cpu_us;  // a send and receive together are one step
    if (st.reduce) cpu += per_byte(bytes, net_.reduce_bytes_per_us);
    if (!st.reduce || staged) cpu += per_byte(bytes, net_.copy_bytes_per_us);  // out of the slot
    work(x, cpu);
    return true;
  }

  // Rank x ends with what its collective promises (above; `reduced`: every contribution,
  // finalized once); sets res_.error when not.
  void check(int x, Fingerprint reduced) {
    const SymbolicBuffer& b = buf(x);
    auto expect = [&](Range r, Fingerprint want, const char* what_part) {
      for (Piece p : b.get(r)) {
        if (n_ == 1 && what_ != SimCollective::kAllGather && what_ != SimCollective::kBroadcast &&
            !sim_exchanges(what_) && p.fp.finalized == 0)
          p.fp.finalized = 1;  // over one rank, finalizing is nothing
        if (!(p.fp == want)) {
          res_.error = cat("rank ", x, " ends with ", what_part, " holding ", p.fp.count, " contributions (finalized ",
                           p.fp.finalized, "x) at elements ", r.begin + p.begin, "-", r.begin + p.end);
          return;
        }
      }
    };
    auto block = [&](int y, size_t first) {
      return Range{first + block_ * static_cast<size_t>(y), first + block_ * static_cast<size_t>(y + 1)};
    };
    // An exchange's receive block y, and what it should hold: rank from's block for this rank.
    auto received = [&](int y, int from, int from_block) {
      expect(block(y, static_cast<size_t>(n_) * block_), Fingerprint{1, 0, block_hash(from, from_block)},
             "a received block");
    };
    const Range output{layout_.output_at, layout_.output_at + elems_};
    switch (what_) {
      case SimCollective::kGather:
        for (int y = 0; y < n_ && x == layout_.root && res_.error.empty(); ++y) received(y, y, 0);
        break;
      case SimCollective::kScatter: received(0, layout_.root, x); break;
      case SimCollective::kAllToAll:
        for (int y = 0; y < n_ && res_.error.empty(); ++y) received(y, y, x);
        break;
      case SimCollective::kAllReduce: expect(output, reduced, "its buffer"); break;
      case SimCollective::kBroadcast: expect(output, Fingerprint{1, 0, rank_hash(layout_.root)}, "its buffer"); break;
      case SimCollective::kReduce:
        if (x == layout_.root) expect(output, reduced, "the root's buffer");
        break;
      case SimCollective::kReduceScatter: expect(block(x, 0), reduced, "its block"); break;
      case SimCollective::kAllGather:
        for (int y = 0; y < n_ && res_.error.empty(); ++y)
          expect(block(y, 0), Fingerprint{1, 0, rank_hash(y)}, "a gathered block");
        break;
    }
  }

  const std::vector<Schedule>& s_;
  SimCollective what_;
  size_t elems_, eb_, block_;
  const SimNetwork& net_;
  SimLayout layout_;
  int n_;
  SimResult res_;
  std::map<std::pair<int, size_t>, int> off_host_;
  std::vector<SymbolicBuffer> buf_;
  std::vector<double> clock_;
  std::vector<size_t> pc_;
  std::vector<bool> sent_, waiting_;
  std::map<std::pair<int, int>, std::deque<Message>> queues_;  // (from, to)
  std::vector<std::vector<double>> cores_;                     // per host: when each core is next free
  using Event = std::pair<double, int>;                        // (clock, rank), earliest first
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> ready_;
};
}  // namespace sim

// Runs schedules[x] for every rank x: `elems` is the working buffer's length (all_reduce: the
// count, in `layout`; the exchanges: the n send blocks, the n receive blocks follow),
// `elem_bytes` the bytes of one element, `block` the per-rank block (reduce_scatter,
// all_gather, the exchanges).
inline SimResult simulate(const std::vector<Schedule>& schedules, SimCollective what, size_t elems, size_t elem_bytes,
                          size_t block, const SimNetwork& net, const SimLayout& layout = {}) {
  return sim::Run(schedules, what, elems, elem_bytes, block, net, layout).run();
}

// The schedules of one algorithm for every rank.
template <class Generate>
std::vector<Schedule> schedules_for(int n, Generate generate) {
  std::vector<Schedule> s(static_cast<size_t>(n));
  for (int x = 0; x < n; ++x) s[static_cast<size_t>(x)] = generate(n, x);
  return s;
}

DCOMM_NAMESPACE_END
