// A rank in its own process, for the process tests and for real launchers (mpirun, srun,
// torchrun). It builds its communicator from the environment and runs one scenario:
//   matrix          the full collective matrix; exit 0 when every result is exact
//   die RANK N      all_reduce in a loop; rank RANK kills itself (SIGKILL) after N rounds;
//                   survivors exit 3 when their error names rank RANK as dead (or a peer's
//                   abort naming it), 4 otherwise
//   abort_leave RANK N  all_reduce in a loop; rank RANK aborts with a reason after N rounds
//                   and leaves at once; survivors exit 3 when their error carries that reason
//   init            create the communicator and report its error, if any (exit 5)
//   quick           one all_reduce, checked (exit 0)
//   stop RANK N     all_reduce in a loop; rank RANK stops itself (SIGSTOP) after N rounds;
//                   survivors exit 3 when their error says rank RANK stopped responding, 4 otherwise
//   cycles N        N times: a new communicator (from a unique id rank 0 broadcasts), an
//                   all_reduce, destroy (every other one aborted first); exit 0 when this
//                   process's descriptors, threads, shared-memory files and pinned memory
//                   (verbs registrations) are as before
//   one_sided [mem_alloc|heap]: puts with signals around the ring into each rank's window
//   broadcast_pieces  broadcasts either side of where a staged one (algo/single_copy.hpp) takes
//                   a second piece, a third (a slot used again), an eighth over a tile, and the
//                   4 MiB cap; in place and out of place, every root; exit 0 when all are exact
//   all_gather_pieces  all_gathers either side of where a staged one (algo/single_copy.hpp) takes
//                   a second piece (a tile of each rank's block), a third (a slot used again);
//                   in place and out of place; exit 0 when all are exact
//   duel             all_gather (in and out of place), broadcast, all_reduce and reduce_scatter of
//                   32 KiB, 200 calls each, through the duels' trials (comm/duel.hpp); exit 0
//                   when every call is exact
//   all_reduce_pieces  all_reduces (sum and max) either side of where a staged one takes a
//                   second piece (a tile a rank), a third (a slot used again), and with fewer
//                   elements than ranks; in place and out of place; exit 0 when all are exact
// Output: one line per failure, then "rank R: ..." summaries.
#include <chrono>
#include <thread>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <fstream>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <dcomm/comm/one_sided.hpp>

#include "support/footprint.hpp"
#include "support/matrix.hpp"

using namespace dcomm;

namespace {
// Prints a line, and appends it to $DCOMM_TEST_OUT when set, for the driver to read.
template <class... Args>
void report(const char* fmt, Args... args) {
  std::printf(fmt, args...);
  std::fflush(stdout);
  if (const char* path = std::getenv("DCOMM_TEST_OUT")) {
    if (FILE* f = std::fopen(path, "a")) {
      std::fprintf(f, fmt, args...);
      std::fclose(f);
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "matrix";
  auto comm = Communicator::from_env();
  if (!comm.ok()) {
    report("init error: %s\n", comm.status().message().c_str());
    return 5;
  }
  Communicator& c = **comm;
  if (mode == "init") {
    std::printf("rank %d of %d: local %d of %d, next via %s\n", c.rank(), c.size(), c.local_rank(), c.local_size(),
                c.transport_to((c.rank() + 1) % c.size()));
    return 0;
  }
  if (mode == "matrix") {
    // "registered": buffers from mem_alloc on every rank; "mixed": on even ranks only.
    auto m = dcomm_test::full_matrix(c.size(), c.config().slot_bytes);
    std::string buffers = argc > 2 ? argv[2] : "";
    m.registered = buffers == "registered" || (buffers == "mixed" && c.rank() % 2 == 0);
    auto rep = dcomm_test::run_matrix(c, m);
    for (const auto& f : rep.failures) std::printf("FAIL %s\n", f.c_str());
    std::printf("rank %d: %d checks, %zu failures\n", c.rank(), rep.checked, rep.failures.size());
    return rep.failures.empty() && rep.checked > 0 ? 0 : 1;
  }
  // One-sided between processes: each rank puts into its right neighbour's window (mem_alloc
  // memory, mapped; or heap, cross-memory attach: argv[2]) with a signal, three rounds.
  if (mode == "one_sided") {
    auto o = OneSided::create(c);
    if (!o.ok()) return report("rank %d one_sided: %s\n", c.rank(), o.status().message().c_str()), 1;
    const bool shared = argc > 2 && std::string(argv[2]) == "mem_alloc";
    const size_t n = 300000;  // elements: 1.2 MB, several pages
    std::vector<int32_t> heap(shared ? 0 : n), mine(n);
    auto region = shared ? mem_alloc(n * sizeof(int32_t)) : Result<void*>(static_cast<void*>(heap.data()));
    if (!region.ok()) return 1;
    auto* window = static_cast<int32_t*>(*region);
    auto id = (*o)->register_window(window, n * sizeof(int32_t));
    const int right = (c.rank() + 1) % c.size(), left = (c.rank() + c.size() - 1) % c.size();
    for (int round = 0; id.ok() && round < 3; ++round) {
      for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(c.rank() * 1000000 + round * 1000 + i % 1000);
      Status s = (*o)->put(mine.data(), n * sizeof(int32_t), right, *id, 0, 1, 0);
      if (s.ok()) s = (*o)->wait({{1, left, 1, 0}});
      const int32_t want = static_cast<int32_t>(left * 1000000 + round * 1000 + (n - 1) % 1000);
      if (!s.ok() || window[n - 1] != want || window[0] != left * 1000000 + round * 1000)
        return report("rank %d one_sided round %d: %s (last %d, want %d)\n", c.rank(), round,
                      s.ok() ? "wrong data" : s.message().c_str(), window[n - 1], want),
               1;
      c.barrier().ignore();  // the window is read before the next round overwrites it
    }
    if (!id.ok()) return report("rank %d: %s\n", c.rank(), id.status().message().c_str()), 1;
    c.barrier().ignore();
    if (shared) mem_free(window).ignore();
    return 0;
  }
  if (mode == "broadcast_pieces") {
    const size_t tile = dcomm::detail::kTileBytes / sizeof(float);  // in floats
    int wrong = 0;
    for (size_t count : {size_t{1}, tile - 1, tile, tile + 1, 2 * tile, 3 * tile + 1, 8 * tile + 17, 128 * tile + 1})
      for (int root = 0; root < c.size(); ++root) {
        if (count > 8 * tile + 17 && root != c.size() - 1) continue;  // the 32 MiB case: one root
        for (bool in_place : {true, false}) {
          std::vector<float> send(count), recv(count, -1.0f);
          auto want = [&](size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(root)) % 4093); };
          if (c.rank() == root)
            for (size_t i = 0; i < count; ++i) send[i] = want(i);
          float* out = in_place ? send.data() : recv.data();
          Status s = c.broadcast(send.data(), out, count, DataType::kFloat32, root);
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) bad += out[i] != want(i);
          if (!s.ok() || bad) {
            report("rank %d broadcast_pieces: %zu floats from root %d%s: %s (%zu wrong)\n", c.rank(), count, root,
                   in_place ? " in place" : "", s.ok() ? "wrong data" : s.message().c_str(), bad);
            ++wrong;
          }
        }
      }
    return wrong ? 1 : 0;
  }
  if (mode == "all_gather_pieces") {
    const size_t tile = dcomm::detail::kTileBytes / sizeof(float);  // in floats
    const auto ranks = static_cast<size_t>(c.size());
    int wrong = 0;
    for (size_t count : {size_t{1}, tile - 1, tile, tile + 1, 2 * tile, 2 * tile + 1, 3 * tile + 17})
      for (bool in_place : {true, false}) {
        auto want = [&](size_t i) { return static_cast<float>((i * 7 + i / count * 13) % 4093); };  // i of the output
        std::vector<float> send(count), recv(count * ranks, -1.0f);
        const size_t at = static_cast<size_t>(c.rank()) * count;
        float* in = in_place ? recv.data() + at : send.data();
        for (size_t i = 0; i < count; ++i) in[i] = want(at + i);
        Status s = c.all_gather(in, recv.data(), count, DataType::kFloat32);
        size_t bad = 0;
        for (size_t i = 0; i < recv.size(); ++i) bad += recv[i] != want(i);
        if (!s.ok() || bad) {
          report("rank %d all_gather_pieces: %zu floats a rank%s: %s (%zu wrong)\n", c.rank(), count,
                 in_place ? " in place" : "", s.ok() ? "wrong data" : s.message().c_str(), bad);
          ++wrong;
        }
      }
    return wrong ? 1 : 0;
  }
  if (mode == "duel") {
    const size_t n = 8192, ranks = static_cast<size_t>(c.size()), me = static_cast<size_t>(c.rank());
    auto term = [](size_t i, size_t r, int call) { return static_cast<float>((i * 7 + r * 13 + call) % 4093); };
    int wrong = 0;
    auto check = [&](const char* what, int call, const Status& s, const float* out, size_t count, auto want) {
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) bad += out[i] != want(i);
      if (s.ok() && !bad) return;
      report("rank %d duel: %s, call %d: %s (%zu wrong)\n", c.rank(), what, call,
             s.ok() ? "wrong data" : s.message().c_str(), bad);
      ++wrong;
    };
    for (int call = 0; call < 200 && !wrong; ++call) {
      std::vector<float> in(n * ranks), out(n * ranks, -1.0f);
      for (size_t i = 0; i < n; ++i) in[i] = term(i, me, call);
      // all_gather out of place, then in place (rank r's block at r * n of the output)
      auto block = [&](size_t i) { return term(i % n, i / n, call); };
      check("all_gather", call, c.all_gather(in.data(), out.data(), n, DataType::kFloat32), out.data(), n * ranks,
            block);
      for (size_t i = 0; i < n; ++i) out[me * n + i] = term(i, me, call);
      check("all_gather in place", call, c.all_gather(out.data() + me * n, out.data(), n, DataType::kFloat32),
            out.data(), n * ranks, block);
      const int root = 1 % c.size();
      std::vector<float> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = c.rank() == root ? term(i, 99, call) : -1.0f;
      check("broadcast", call, c.broadcast(b.data(), b.data(), n, DataType::kFloat32, root), b.data(), n,
            [&](size_t i) { return term(i, 99, call); });
      // all_reduce of n floats, then reduce_scatter of n a rank: sums of every rank's term
      for (size_t i = 0; i < n * ranks; ++i) in[i] = term(i, me, call);
      auto sum = [&](size_t i) {
        float v = 0;
        for (size_t r = 0; r < ranks; ++r) v += term(i, r, call);
        return v;
      };
      check("all_reduce", call, c.all_reduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum), out.data(),
            n, sum);
      check("reduce_scatter", call, c.reduce_scatter(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum),
            out.data(), n, [&](size_t i) { return sum(me * n + i); });
    }
    return wrong ? 1 : 0;
  }
  if (mode == "all_reduce_pieces") {
    const size_t piece = dcomm::detail::kTileBytes / sizeof(float) * static_cast<size_t>(c.size());  // in floats
    int wrong = 0;
    for (size_t count : {size_t{1}, static_cast<size_t>(c.size()) - 1, static_cast<size_t>(c.size()) + 1, piece - 1,
                         piece, piece + 1, 2 * piece + 1, 3 * piece + 17})
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax})
        for (bool in_place : {true, false}) {
          auto term = [&](size_t i, int r) { return static_cast<float>((i * 7 + static_cast<size_t>(r) * 13) % 4093); };
          std::vector<float> send(count), recv(count, -1.0f);
          for (size_t i = 0; i < count; ++i) send[i] = term(i, c.rank());
          float* out = in_place ? send.data() : recv.data();
          Status s = c.all_reduce(send.data(), out, count, DataType::kFloat32, op);
          size_t bad = 0;
          for (size_t i = 0; i < count; ++i) {
            float want = term(i, 0);
            for (int r = 1; r < c.size(); ++r)
              want = op == ReduceOp::kSum ? want + term(i, r) : std::max(want, term(i, r));
            bad += out[i] != want;
          }
          if (!s.ok() || bad) {
            report("rank %d all_reduce_pieces: %zu floats, %s%s: %s (%zu wrong)\n", c.rank(), count,
                   op == ReduceOp::kSum ? "sum" : "max", in_place ? " in place" : "",
                   s.ok() ? "wrong data" : s.message().c_str(), bad);
            ++wrong;
          }
        }
    return wrong ? 1 : 0;
  }
  if (mode == "quick") {
    std::vector<float> buf(1000, static_cast<float>(c.rank() + 1));
    Status s = c.all_reduce(std::span(buf), ReduceOp::kSum);
    const float want = static_cast<float>(c.size() * (c.size() + 1) / 2);
    if (!s.ok() || buf[999] != want) {
      report("rank %d quick: %s\n", c.rank(), s.ok() ? "wrong result" : s.message().c_str());
      return 1;
    }
    return 0;
  }
  if (mode == "cycles" && argc > 2) {
    const int n = std::atoi(argv[2]);
    dcomm_test::Footprint before;
    for (int i = 0; i < n + 3; ++i) {
      if (i == 3) before = dcomm_test::Footprint::now();  // after warm-up
      char id_text[256] = {};
      if (c.rank() == 0) {
        auto id = UniqueId::create();
        if (!id.ok()) return report("rank 0: %s\n", id.status().message().c_str()), 1;
        std::snprintf(id_text, sizeof id_text, "%s", id->to_string().c_str());
      }
      if (!c.broadcast(id_text, id_text, sizeof id_text, DataType::kUint8, 0).ok()) return 1;
      auto id = UniqueId::parse(id_text);
      if (!id.ok()) return report("rank %d: %s\n", c.rank(), id.status().message().c_str()), 1;
      auto child = Communicator::init(c.rank(), c.size(), *id);
      if (!child.ok()) return report("rank %d cycle %d: %s\n", c.rank(), i, child.status().message().c_str()), 1;
      std::vector<int32_t> v(1000, 1);
      if (!(*child)->all_reduce(std::span(v), ReduceOp::kSum).ok())
        return report("rank %d cycle %d failed\n", c.rank(), i), 1;
      // A ring shift of 1 MiB: a rendezvous over TCP, UCX and verbs (registered buffers).
      std::vector<int32_t> mine_(1 << 18, c.rank()), theirs(mine_.size(), -1);
      const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
      if (!(*child)
               ->send_recv(mine_.data(), mine_.size(), next, theirs.data(), theirs.size(), prev, DataType::kInt32)
               .ok() ||
          theirs.back() != prev)
        return report("rank %d cycle %d: send_recv failed\n", c.rank(), i), 1;
      if (!c.barrier().ok()) return 1;  // every rank done with the child before one aborts it
      if (i % 2 && c.rank() == 1) (*child)->abort("the test re-creates it");
      child->reset();
      if (!c.barrier().ok()) return 1;
    }
    // A leak is more than before, still there after up to 2 s (Footprint::settled).
    const auto after = dcomm_test::Footprint::settled(before);
    if (after.holds_more_than(before)) {
      report("rank %d: %s\n", c.rank(), after.describe(before).c_str());
      return 1;
    }
    return 0;
  }
  if (mode == "realloc") {
    // Buffers freed and allocated again between calls (malloc hands back the same addresses):
    // large enough that their slices go by reference over a proxied link, each round's values
    // its own, so a call served from a stale buffer or an unfinished send shows.
    const size_t n = c.config().slot_bytes;  // floats: several slots, both sides of the threshold
    const int size = c.size(), rank = c.rank();
    for (int round = 0; round < 8; ++round) {
      const size_t count = round % 2 ? n : n / 8 + 3;
      auto* buf = static_cast<float*>(std::malloc(count * sizeof(float)));
      auto* out = static_cast<float*>(std::malloc(count * sizeof(float)));
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(rank + round + static_cast<int>(i % 7));
      Status s = c.all_reduce(buf, out, count, DataType::kFloat32, ReduceOp::kSum);
      bool ok = s.ok();
      for (size_t i = 0; ok && i < count; ++i)
        ok = out[i] == static_cast<float>(size * (round + static_cast<int>(i % 7)) + size * (size - 1) / 2);
      if (ok) s = c.send_recv(buf, count, (rank + 1) % size, out, count, (rank + size - 1) % size, DataType::kFloat32);
      const int prev = (rank + size - 1) % size;
      for (size_t i = 0; ok && i < count; ++i)
        ok = s.ok() && out[i] == static_cast<float>(prev + round + static_cast<int>(i % 7));
      std::free(buf);
      std::free(out);
      if (!ok) {
        report("rank %d realloc round %d: %s\n", rank, round, s.ok() ? "wrong result" : s.message().c_str());
        return 1;
      }
    }
    return 0;
  }
  if (mode == "p2p_mismatch") {
    // Rank 0 sends 4 MiB (a rendezvous over TCP and UCX) where rank 1 receives 32 KiB (below
    // DCOMM_RENDEZVOUS_BYTES: in slot-sized pieces): rank 1 must say that the sizes disagree,
    // at once. Rank 0's send may complete (TCP's socket buffers can take it all) or fail when
    // rank 1 aborts.
    std::vector<float> buf(c.rank() == 0 ? 1 << 20 : 1 << 13, 1.0f);
    P2POp op = c.rank() == 0 ? P2POp::send(buf.data(), buf.size(), DataType::kFloat32, 1)
                             : P2POp::recv(buf.data(), buf.size(), DataType::kFloat32, 0);
    Status s = c.p2p({op});
    report("rank %d: %s\n", c.rank(), s.ok() ? "ok" : s.message().c_str());
    if (c.rank() == 0) return 3;
    return !s.ok() && s.message().find("as one rendezvous where this rank receives") != std::string::npos ? 3 : 4;
  }
  if ((mode == "die" || mode == "stop" || mode == "abort_leave") && argc > 3) {
    // The victim kills (SIGKILL) or stops (SIGSTOP) itself after `rounds` all_reduces (with
    // "p2p": ring shifts of 4 MiB, rendezvous over TCP and UCX, so survivors wait with their
    // receives posted into their buffers); a survivor passes when its error names the victim
    // as dead, or as stopped responding. "abort_leave": the victim aborts with a reason and
    // leaves at once; a survivor passes when its error carries that reason, though the
    // victim's closed links (and those of survivors that failed first and left) may reach it
    // before the abort does.
    const int victim = std::atoi(argv[2]), rounds = std::atoi(argv[3]);
    const bool die = mode == "die", stop = mode == "stop", p2p = argc > 4 && std::string(argv[4]) == "p2p";
    std::vector<float> buf(die ? 1 << 20 : 1 << 18, 1.0f), out(buf.size());
    const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
    for (int i = 0;; ++i) {
      if (c.rank() == victim && i == rounds) {
        if (!die && !stop) {
          c.abort("leaving on purpose");
          return 3;
        }
        raise(die ? SIGKILL : SIGSTOP);
      }
      Status s = p2p ? c.send_recv(buf.data(), buf.size(), next, out.data(), out.size(), prev, DataType::kFloat32)
                     : c.all_reduce(std::span(buf), ReduceOp::kMax);
      if (!s.ok()) {
        report("rank %d error: %s\n", c.rank(), s.message().c_str());
        const std::string who = "rank " + std::to_string(victim);
        const bool named = die    ? s.message().find(who) != std::string::npos && s.code() == ErrorCode::kPeerFailure
                           : stop ? s.message().find("stopped responding (" + who + " (host") != std::string::npos
                                  : s.message().find(who + " called abort(): leaving on purpose") != std::string::npos;
        return named ? 3 : 4;
      }
    }
  }
  std::printf("unknown mode %s\n", mode.c_str());
  return 2;
}
