// One-sided put + signal against dcomm's own send/recv (issue 38's target: at least 80% of
// send/recv's bandwidth at 16 MiB): 2 ranks as forked processes on this host. Rank 0 sends
// `iters` messages of each size to rank 1, then puts them into rank 1's window, each with a
// signal, while rank 1 waits for them all; the window is once from mem_alloc (plain stores
// into a mapping) and once from the heap (cross-memory attach). Alternating passes; medians.
// With DCOMM_TRANSPORT=tcp both go over the wire (records on a socket) against send/recv over
// TCP.
//   dcomm-one-sided-bench [passes (3)] [max bytes (16M)]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <dcomm/comm/one_sided.hpp>
#include <dcomm/dcomm.hpp>

#include "forked.hpp"

namespace {

int run_rank(int rank, const std::string& id_text, int passes, size_t max_bytes) {
  auto id = dcomm::UniqueId::parse(id_text);
  if (!id.ok()) return 4;
  auto comm = dcomm::Communicator::init(rank, 2, *id);
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().message().c_str()), 4;
  dcomm::Communicator& c = **comm;
  auto one = dcomm::OneSided::create(c);
  if (!one.ok()) return std::fprintf(stderr, "%s\n", one.status().message().c_str()), 5;
  dcomm::OneSided& o = **one;
  auto shared = dcomm::mem_alloc(max_bytes);
  if (!shared.ok()) return 5;
  std::vector<char> heap(max_bytes), src(max_bytes, static_cast<char>(rank + 1));
  auto win_shared = o.register_window(*shared, max_bytes);
  auto win_heap = o.register_window(heap.data(), max_bytes);
  if (!win_shared.ok() || !win_heap.ok()) return 5;
  if (rank == 0) {
    const std::string via = c.transport_to(1);
    std::printf("# rank 1 via %s: puts %s\n", via.c_str(), via == "shm" ? "direct" : "over TCP (the wire)");
    std::printf("%10s %6s %16s %16s %16s %10s %10s\n", "size (B)", "iters", "send/recv GB/s", "put mem_alloc",
                "put heap", "ratio", "ratio heap");
  }
  for (size_t bytes = 64 << 10; bytes <= max_bytes; bytes *= 4) {
    const int iters = bytes >= (4u << 20) ? 20 : 100;
    std::vector<double> t_p2p, t_shared, t_heap;
    auto puts = [&](int win) {
      return [&, win]() -> dcomm::Status {
        if (rank == 1) return o.wait({{iters, 0, 0, 0}});
        for (int i = 0; i < iters; ++i) DCOMM_RETURN_IF_ERROR(o.put(src.data(), bytes, 1, win, 0, 0, 0));
        return {};
      };
    };
    for (int p = 0; p < passes; ++p) {
      t_p2p.push_back(slowest_seconds(c, [&]() -> dcomm::Status {
        for (int i = 0; i < iters; ++i)
          DCOMM_RETURN_IF_ERROR(rank == 0 ? c.send(src.data(), bytes, dcomm::DataType::kUint8, 1)
                                          : c.recv(heap.data(), bytes, dcomm::DataType::kUint8, 0));
        return {};
      }));
      t_shared.push_back(slowest_seconds(c, puts(*win_shared)));
      t_heap.push_back(slowest_seconds(c, puts(*win_heap)));
    }
    const double gb = static_cast<double>(bytes) * iters / 1e9;
    const double p2p = gb / median(t_p2p), sh = gb / median(t_shared), hp = gb / median(t_heap);
    if (rank == 0)
      std::printf("%10zu %6d %16.2f %16.2f %16.2f %10.2f %10.2f\n", bytes, iters, p2p, sh, hp, sh / p2p, hp / p2p);
  }
  c.barrier().ignore();
  dcomm::mem_free(*shared).ignore();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int passes = 3;
  size_t max_bytes = 16 << 20;
  if (!count_and_max_bytes(argc, argv, &passes, &max_bytes)) return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return run_forked_with_id(2,
                            [&](int r, const std::string& id_text) { return run_rank(r, id_text, passes, max_bytes); });
}
