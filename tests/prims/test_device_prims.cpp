// The device path's protocol and schedules on the CPU: host threads as ranks run exactly the
// per-channel bodies the CUDA kernels run (comm/device_work.hpp over prims/device_prims.hpp),
// over FIFOs in host memory laid out as the device communicator lays them out. Results are
// checked exactly; an abort and a deadline end a wait for a peer that never comes.
#include <doctest/doctest.h>

#include <memory>
#include <thread>
#include <vector>

#include <dcomm/comm/device_work.hpp>
#include <dcomm/reduce/host_reducer.hpp>

#include "support/values.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {
// FIFOs for every ordered pair of ranks and channel, with both sides' step counters.
struct HostMesh {
  int n, channels;
  uint32_t nslots, slot_bytes;
  struct Pair {
    std::vector<char> slots;
    uint64_t posted = 0, freed = 0, send_step = 0, recv_step = 0;
  };
  std::vector<std::unique_ptr<Pair>> pairs;  // [from][to][channel]
  HostMesh(int n_, int channels_, uint32_t nslots_, uint32_t slot_bytes_)
      : n(n_), channels(channels_), nslots(nslots_), slot_bytes(slot_bytes_) {
    for (int i = 0; i < n * n * channels; ++i) {
      pairs.push_back(std::make_unique<Pair>());
      pairs.back()->slots.resize(static_cast<size_t>(nslots) * slot_bytes);
    }
  }
  Pair& at(int from, int to, int c) { return *pairs[static_cast<size_t>((from * n + to) * channels + c)]; }
  DeviceConn send_conn(int from, int to, int c) {
    Pair& p = at(from, to, c);
    return {p.slots.data(), &p.posted, &p.freed, &p.send_step, nslots, slot_bytes, to};
  }
  DeviceConn recv_conn(int from, int to, int c) {
    Pair& p = at(from, to, c);
    return {p.slots.data(), &p.posted, &p.freed, &p.recv_step, nslots, slot_bytes, from};
  }
  // [channel][2] for rank r of a ring over ranks in order 0..n-1.
  std::vector<DeviceConn> ring_conns(int r) {
    std::vector<DeviceConn> v;
    for (int c = 0; c < channels; ++c) {
      v.push_back(recv_conn((r + n - 1) % n, r, c));
      v.push_back(send_conn(r, (r + 1) % n, c));
    }
    return v;
  }
};

template <class T>
DeviceStatus run_rank(const DeviceCollWork& w) {
  for (int c = 0; c < w.channels; ++c) DCOMM_TRY((run_coll_channel<SerialTeam, T>(SerialTeam{}, w, c)));
  return {};
}

template <class T>
void check_collectives(DataType t, int n, int channels, size_t count, bool in_place) {
  HostMesh mesh(n, channels, 3, 64);  // small slots: many slices and wrap-arounds
  for (int o = 0; o < kNumReduceOps; ++o) {
    const auto op = static_cast<ReduceOp>(o);
    for (OpKind kind :
         {OpKind::kAllReduce, OpKind::kReduceScatter, OpKind::kAllGather, OpKind::kBroadcast, OpKind::kReduce}) {
      const bool reduces = kind == OpKind::kAllReduce || kind == OpKind::kReduceScatter || kind == OpKind::kReduce;
      if (!reduces && op != ReduceOp::kSum) continue;
      const size_t un = static_cast<size_t>(n);
      const size_t in_len = kind == OpKind::kReduceScatter ? count * un : count;
      const size_t out_len = kind == OpKind::kAllGather ? count * un : count;
      const int root = static_cast<int>(count % un);
      std::vector<std::vector<T>> in(un), out(un);
      std::vector<std::vector<DeviceConn>> conns(un);
      std::vector<DeviceStatus> st(un);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        auto& i = in[static_cast<size_t>(r)];
        auto& u = out[static_cast<size_t>(r)];
        i.resize(std::max(in_len, out_len));
        u.resize(out_len);
        for (size_t k = 0; k < in_len; ++k) i[k] = from_int<T>(input_value(t, reduces ? op : ReduceOp::kSum, r, k));
        if (kind == OpKind::kAllGather)
          for (size_t k = 0; k < count; ++k) i[k] = from_int<T>(input_value(t, ReduceOp::kSum, r, k));
        conns[static_cast<size_t>(r)] = mesh.ring_conns(r);
        DeviceCollWork w;
        w.kind = kind;
        w.send = i.data();
        w.recv = u.data();
        if (in_place) {
          if (kind == OpKind::kReduceScatter) w.recv = i.data() + static_cast<size_t>(r) * count;
          else if (kind == OpKind::kAllGather) {
            // in place: the input is this rank's block of the output
            for (size_t k = 0; k < count; ++k) u[static_cast<size_t>(r) * count + k] = i[k];
            w.send = u.data() + static_cast<size_t>(r) * count;
          } else w.recv = i.data();
        }
        w.count = count;
        w.pos = r;
        w.size = n;
        w.root_pos = root;
        w.op = op;
        w.divide_by = op == ReduceOp::kAvg && n > 1 ? n : 0;
        w.channels = channels;
        w.conns = conns[static_cast<size_t>(r)].data();
        if (copy_only(kind)) w.count = count * sizeof(T);  // as the device communicator launches them
        threads.emplace_back([&st, r, w, kind] {
          st[static_cast<size_t>(r)] = copy_only(kind) ? run_rank<uint8_t>(w) : run_rank<T>(w);
        });
      }
      for (auto& th : threads) th.join();
      for (int r = 0; r < n; ++r) {
        CAPTURE(r);
        CAPTURE(static_cast<int>(kind));
        CAPTURE(to_string(op));
        REQUIRE(st[static_cast<size_t>(r)].ok());
        const T* got = out[static_cast<size_t>(r)].data();
        if (in_place && kind == OpKind::kReduceScatter)
          got = in[static_cast<size_t>(r)].data() + static_cast<size_t>(r) * count;
        else if (in_place && kind != OpKind::kAllGather) got = in[static_cast<size_t>(r)].data();
        for (size_t k = 0; k < out_len; ++k) {
          T want{};
          switch (kind) {
            case OpKind::kAllReduce: want = expected_reduction<T>(t, op, n, k); break;
            case OpKind::kReduceScatter:
              want = expected_reduction<T>(t, op, n, static_cast<size_t>(r) * count + k);
              break;
            case OpKind::kAllGather:
              want = from_int<T>(input_value(t, ReduceOp::kSum, static_cast<int>(k / count), k % count));
              break;
            case OpKind::kBroadcast: want = from_int<T>(input_value(t, ReduceOp::kSum, root, k)); break;
            case OpKind::kReduce:
              if (r != root) continue;
              want = expected_reduction<T>(t, op, n, k);
              break;
          }
          REQUIRE_MESSAGE(same_bits(got[k], want), "element ", k, " of ", out_len);
        }
      }
    }
  }
}
}  // namespace

TEST_CASE("device schedules on host threads: every collective exact, channels, slots wrapping, in place") {
  for (int n : {1, 2, 3, 4}) {
    for (int channels : {1, 3}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{1000}}) {
        for (bool in_place : {false, true}) {
          CAPTURE(n);
          CAPTURE(channels);
          CAPTURE(count);
          CAPTURE(in_place);
          check_collectives<float>(DataType::kFloat32, n, channels, count, in_place);
          check_collectives<bfloat16>(DataType::kBfloat16, n, channels, count, in_place);
          check_collectives<float8_e4m3>(DataType::kFloat8E4M3, n, channels, count, in_place);
          check_collectives<int8_t>(DataType::kInt8, n, channels, count, in_place);
          check_collectives<int64_t>(DataType::kInt64, n, channels, count, in_place);
        }
      }
    }
  }
}

TEST_CASE("device p2p on host threads: a group of sends and receives both ways, to itself too") {
  const int n = 3, channels = 2;
  HostMesh mesh(n, channels, 2, 48);
  std::vector<std::vector<DeviceConn>> sends(n), recvs(n);
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < n; ++p)
      for (int c = 0; c < channels; ++c) {
        sends[static_cast<size_t>(r)].push_back(mesh.send_conn(r, p, c));
        recvs[static_cast<size_t>(r)].push_back(mesh.recv_conn(p, r, c));
      }
  const size_t bytes = 1001;
  // Each rank sends two messages to every rank (itself included) and receives two from each.
  std::vector<std::vector<std::vector<uint8_t>>> out(n), in(n);
  std::vector<DeviceP2pWork> works(n);
  for (int r = 0; r < n; ++r) {
    auto& w = works[static_cast<size_t>(r)];
    w.channels = channels;
    w.conn_channels = channels;
    w.rank = r;
    w.send_conns = sends[static_cast<size_t>(r)].data();
    w.recv_conns = recvs[static_cast<size_t>(r)].data();
    for (int p = 0; p < n; ++p)
      for (int m = 0; m < 2; ++m) {
        std::vector<uint8_t> msg(bytes + static_cast<size_t>(m));
        for (size_t k = 0; k < msg.size(); ++k) msg[k] = static_cast<uint8_t>(r * 31 + p * 7 + m * 3 + k);
        out[static_cast<size_t>(r)].push_back(msg);
        in[static_cast<size_t>(r)].emplace_back(bytes + static_cast<size_t>(m), 0);
      }
    // Receives first on odd ranks, sends first on even ones: the order within a group is free.
    for (int pass = 0; pass < 2; ++pass) {
      const bool sending = (pass == 0) == (r % 2 == 0);
      for (int p = 0; p < n; ++p)
        for (int m = 0; m < 2; ++m) {
          size_t i = static_cast<size_t>(p * 2 + m);
          auto& buf = sending ? out[static_cast<size_t>(r)][i] : in[static_cast<size_t>(r)][i];
          REQUIRE(add_p2p_item(w, {buf.data(), buf.size(), p, sending ? 1 : 0}));
        }
    }
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r)
    for (int b = 0; b < works[static_cast<size_t>(r)].nlanes * channels; ++b)
      threads.emplace_back([&, r, b] {
        if (!run_p2p_block(SerialTeam{}, works[static_cast<size_t>(r)], b).ok())
          __atomic_add_fetch(&failures[static_cast<size_t>(r)], 1, __ATOMIC_RELAXED);
      });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CHECK(failures[static_cast<size_t>(r)] == 0);
    CHECK(works[static_cast<size_t>(r)].nlanes == 2 * n);
    for (int p = 0; p < n; ++p)
      for (int m = 0; m < 2; ++m)
        CHECK_MESSAGE(in[static_cast<size_t>(r)][static_cast<size_t>(p * 2 + m)] ==
                          out[static_cast<size_t>(p)][static_cast<size_t>(r * 2 + m)],
                      "rank ", r, " message ", m, " from ", p);
  }
}

TEST_CASE("device waits end on the abort flag and on the deadline, naming the peer") {
  HostMesh mesh(2, 1, 2, 64);
  std::vector<float> buf(100, 1.0f);
  auto conns = mesh.ring_conns(0);  // rank 1 never runs
  DeviceCollWork w;
  w.send = buf.data();
  w.recv = buf.data();
  w.count = buf.size();
  w.size = 2;
  w.conns = conns.data();
  DeviceError err;
  w.ctl.error = &err;

  // The deadline: 50 ms with nobody on the other side.
  w.ctl.timeout_ns = 50'000'000;
  DeviceStatus s = run_rank<float>(w);
  CHECK(s.code == DeviceStatus::kTimeout);
  CHECK(err.code == DeviceStatus::kTimeout);
  CHECK(err.peer == 1);

  // The abort flag, raised by another thread while the rank waits (no deadline).
  HostMesh mesh2(2, 1, 2, 64);
  auto conns2 = mesh2.ring_conns(0);
  w.conns = conns2.data();
  w.ctl.timeout_ns = 0;
  err = DeviceError{};
  volatile int abort_flag = 0;
  w.ctl.abort = &abort_flag;
  std::thread raiser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    __atomic_store_n(&abort_flag, 1, __ATOMIC_RELEASE);  // as DeviceCommunicator::abort raises it
  });
  s = run_rank<float>(w);
  raiser.join();
  CHECK(s.code == DeviceStatus::kAborted);
  CHECK(err.code == DeviceStatus::kAborted);
  CHECK(err.peer == 1);
}

TEST_CASE("a device wait with no deadline polls past the poll counter's wrap and still sees the abort flag") {
  uint64_t counter = 0;
  volatile int abort_flag = 0;
  DeviceError err;
  DeviceControl ctl;
  ctl.abort = &abort_flag;
  ctl.error = &err;
  ctl.timeout_ns = 0;  // no deadline: the count runs as long as the wait does
  std::thread raiser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    __atomic_store_n(&abort_flag, 1, __ATOMIC_RELEASE);  // as DeviceCommunicator::abort raises it
  });
  // Starting 1000 polls before the wrap: the count wraps during the wait (a signed counter
  // would overflow there), and the abort still ends it.
  DeviceStatus s = detail::wait_counter(&counter, 1, ctl, 3, true, UINT32_MAX - 1000);
  raiser.join();
  CHECK(s.code == DeviceStatus::kAborted);
  CHECK(err.peer == 3);
  // And data that arrives ends it with success, wrap or not.
  counter = 5;
  CHECK(detail::wait_counter(&counter, 5, ctl, 3, true, UINT32_MAX).ok());
}
