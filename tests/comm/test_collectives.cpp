// Every collective x type x op x count on threads as ranks, for world sizes 1-5 and 8, over the
// in-process transport; and the same matrix over shared memory and TCP between threads.
#include <doctest/doctest.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <mutex>

#include "support/files.hpp"
#include "support/matrix.hpp"
#include "support/ranks.hpp"

using namespace dcomm;
using namespace dcomm_test;

namespace {
// ranks_per_host > 0: pretended hosts of that many consecutive ranks; < 0: rank r on pretended
// host r % -ranks_per_host (interleaved, so the ring order differs from rank order).
void run_full_matrix(int size, const Config& config) {
  auto comms = Communicator::create_local(size, config);
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  std::mutex mu;
  int checked = 0;
  std::vector<std::string> failures;
  on_ranks(*comms, [&](Communicator& c) {
    MatrixReport rep = run_matrix(c, full_matrix(size, config.slot_bytes));
    std::lock_guard<std::mutex> lock(mu);
    checked += rep.checked;
    failures.insert(failures.end(), rep.failures.begin(), rep.failures.end());
  });
  for (const auto& f : failures) FAIL_CHECK(f);
  CHECK(failures.empty());
  // 10 types x 5 counts x (2 x (5 ops x 3 reductions + all_gather + broadcast) + 2 p2p checks), per rank
  // (reduce is checked on the root only, so count at least the rest).
  CHECK(checked >= size * 10 * 5 * 2 * (5 * 2 + 2));
}

void run_full_matrix(int size, TransportChoice transport, const std::string& algo = "", int ranks_per_host = 0,
                     bool deterministic = false) {
  Config config = test_config(transport);
  config.deterministic = deterministic;
  config.test_ranks_per_host = ranks_per_host > 0 ? ranks_per_host : 0;
  config.test_cyclic_hosts = ranks_per_host < 0 ? -ranks_per_host : 0;
  auto forced = parse_algo(algo);
  REQUIRE(forced.ok());
  config.algo = *forced;
  run_full_matrix(size, config);
}
}  // namespace

TEST_CASE("matrix, threads as ranks, in-process transport") {
  for (int size : {1, 2, 3, 4, 5, 8}) {
    CAPTURE(size);
    run_full_matrix(size, TransportChoice::kAuto);
  }
}

// Each algorithm forced for every collective that has it (DCOMM_ALGO), on world sizes 1-8 and
// 16, powers of two and not.
TEST_CASE("matrix, threads as ranks, every algorithm forced") {
  for (const char* algo :
       {"ring", "direct", "recursive_doubling", "rabenseifner;halving_doubling", "tree", "double_tree"}) {
    for (int size : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
      CAPTURE(algo);
      CAPTURE(size);
      run_full_matrix(size, TransportChoice::kAuto, algo);
    }
  }
}

// DCOMM_DETERMINISTIC=1: the reductions run in fixed order (algo/ordered.hpp), and stay exact.
TEST_CASE("matrix, threads as ranks, deterministic reductions") {
  for (int size : {1, 2, 3, 4, 5, 8}) {
    CAPTURE(size);
    run_full_matrix(size, TransportChoice::kAuto, "", 0, /*deterministic=*/true);
  }
}

// Hosts of 1, 2 and 3 ranks (pretended: DCOMM_TEST_RANKS_PER_HOST), uneven last hosts included.
TEST_CASE("matrix, threads as ranks, hierarchical all_reduce over pretended hosts") {
  for (int per_host : {1, 2, 3}) {
    for (int size : {2, 4, 5, 8, 16}) {
      CAPTURE(per_host);
      CAPTURE(size);
      run_full_matrix(size, TransportChoice::kAuto, "all_reduce:hierarchical", per_host);
    }
  }
}

// Ranks interleaved over pretended hosts (DCOMM_TEST_CYCLIC_HOSTS): rings, chains and trees
// run in the topology's order, which groups each host's ranks; reduce_scatter's and
// all_gather's blocks still belong to ranks.
TEST_CASE("ring order from the hosts: ranks grouped by host, and every algorithm exact in that order") {
  Config config = test_config();
  config.test_cyclic_hosts = 3;
  auto comms = Communicator::create_local(8, config);
  REQUIRE(comms.ok());
  CHECK((*comms)[0]->ring_order() == std::vector<int>{0, 3, 6, 1, 4, 7, 2, 5});
  for (auto& c : *comms) CHECK(c->ring_order() == (*comms)[0]->ring_order());
  for (const char* algo : {"ring", "tree", "double_tree", "rabenseifner;halving_doubling", "all_reduce:hierarchical"}) {
    for (int size : {3, 5, 8}) {
      CAPTURE(algo);
      CAPTURE(size);
      run_full_matrix(size, TransportChoice::kAuto, algo, -2);
      run_full_matrix(size, TransportChoice::kAuto, algo, -3);
    }
  }
}

// config.device through init: each rank names a PCI device of this host (as the NCCL library
// does with its GPU's address); the ranks agree on one order by the device's place, here three
// devices under one bridge, so by address. A device sysfs does not show leaves the order alone.
TEST_CASE("ring order from the ranks' devices: config.device placed through /sys at init") {
  namespace fs = std::filesystem;
  std::vector<std::string> devices;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/bus/pci/devices", ec)) devices.push_back(e.path().filename());
  std::sort(devices.begin(), devices.end());
  std::vector<std::string> siblings;
  RankPlace first;
  for (const std::string& d : devices) {
    RankPlace p;
    if (!place_at_pci_device(d, p)) continue;
    if (siblings.empty()) first = p;
    if (p.path == first.path && p.numa == first.numa) siblings.push_back(d);
  }
  if (siblings.size() < 3) {
    MESSAGE("skipped: this host's /sys shows fewer than 3 PCI devices under one bridge");
    return;
  }
  auto order_with = [](const std::vector<std::string>& device_of_rank) {
    auto id = UniqueId::create();
    REQUIRE(id.ok());
    std::vector<std::vector<int>> orders(device_of_rank.size());
    std::vector<std::thread> ranks;
    for (size_t r = 0; r < device_of_rank.size(); ++r)
      ranks.emplace_back([&, r] {
        Config config = test_config();
        config.device = device_of_rank[r];
        auto c = Communicator::init(static_cast<int>(r), static_cast<int>(device_of_rank.size()), *id, config);
        if (c.ok()) orders[r] = (*c)->ring_order();
      });
    for (auto& t : ranks) t.join();
    for (const auto& o : orders) CHECK(o == orders[0]);
    return orders[0];
  };
  std::string cuda_spelling = "0000" + siblings[0];  // an 8-digit domain, upper case
  for (char& ch : cuda_spelling) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  CHECK(order_with({siblings[2], cuda_spelling, siblings[1]}) == std::vector<int>{1, 2, 0});
  CHECK(order_with({siblings[1], siblings[0], siblings[2]}) == std::vector<int>{1, 0, 2});
  CHECK(order_with({"0000:ff:1f.7", "not-a-device", ""}) == std::vector<int>{0, 1, 2});
}

#if DCOMM_HAS_UCX
// UCX between threads (one worker each), over its shared-memory and its TCP transports.
TEST_CASE("matrix, threads as ranks over UCX (UCX_TLS=sm,self and tcp,self)") {
  for (const char* tls : {"sm,self", "tcp,self"}) {
    setenv("UCX_TLS", tls, 1);
    for (int size : {2, 3}) {
      CAPTURE(tls);
      CAPTURE(size);
      run_full_matrix(size, TransportChoice::kUcx);
    }
  }
  unsetenv("UCX_TLS");
}
#else
TEST_CASE("DCOMM_TRANSPORT=ucx without UCX built in is an error that says how to get it") {
  auto comms = Communicator::create_local(2, test_config(TransportChoice::kUcx));
  REQUIRE(!comms.ok());
  CHECK(comms.status().message().find("built without UCX") != std::string::npos);
}
#endif

#if DCOMM_HAS_VERBS
// Over RC queue pairs where an RDMA device exists (Soft-RoCE in the guest of
// scripts/rdma-vm.sh); where none does, asking for verbs is an error that says so.
TEST_CASE("verbs: the matrix over RC queue pairs, or a clear error without a device") {
  auto comms = Communicator::create_local(2, test_config(TransportChoice::kVerbs));
  if (!dcomm::detail::has_rdma_device()) {
    REQUIRE(!comms.ok());
    CHECK(comms.status().message().find("no RDMA device found") != std::string::npos);
    MESSAGE("no RDMA device here: the verbs matrix runs under scripts/rdma-vm.sh");
    return;
  }
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  for (int size : {2, 3, 4}) {
    CAPTURE(size);
    run_full_matrix(size, TransportChoice::kVerbs);
  }
}

TEST_CASE("verbs: the registration cache registers a buffer once, and again after it was freed") {
  if (!dcomm::detail::has_rdma_device()) {
    MESSAGE("no RDMA device here: skipped (runs under scripts/rdma-vm.sh)");
    return;
  }
  auto dev = VerbsDevice::open();
  REQUIRE_MESSAGE(dev.ok(), dev.status().message());
  ibv_pd* pd = (*dev)->pd();
  RegistrationCache cache(
      [pd](void* a, size_t n, int access, MemoryKind) -> void* { return ibv_reg_mr(pd, a, n, access); },
      [](void* mr) { ibv_dereg_mr(static_cast<ibv_mr*>(mr)); }, 4, PageIdentity::available());
  std::vector<char> a(1 << 20), b(4096);
  auto first = cache.acquire(a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(first.ok());
  cache.release(*first);
  auto again = cache.acquire(a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE);
  auto inside = cache.acquire(a.data() + 4096, 8192, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE((again.ok() && inside.ok()));
  CHECK(*inside == *again);
  CHECK(cache.registrations() == (cache.checked() ? 1 : 2));  // unchecked: each lives while held
  cache.release(*again);
  cache.release(*inside);
  // Wider access than registered: a new region.
  auto remote = cache.acquire(a.data(), a.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(remote.ok());
  CHECK(*remote != *again);
  cache.release(*remote);
  // The same address mapped anew (as free and malloc do): never the old region.
  void* p = mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 1, 1 << 20);
  auto old = cache.acquire(p, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(old.ok());
  void* old_mr = (*old)->handle;
  cache.release(*old);
  const size_t before = cache.registrations();
  REQUIRE(mmap(p, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == p);
  std::memset(p, 2, 1 << 20);
  auto fresh = cache.acquire(p, 1 << 20, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(fresh.ok());
  CHECK(cache.registrations() == before + 1);
  if (cache.checked()) CHECK(cache.stale() == 1);
  (void)old_mr;
  cache.release(*fresh);
  munmap(p, 1 << 20);
}
#endif

TEST_CASE("matrix, threads as ranks, the single-copy paths from 1 KiB") {
  for (int size : {2, 4}) {
    CAPTURE(size);
    Config config = test_config();
    config.cma_bytes = 1024;
    config.cma_reduce_bytes = config.cma_reduce_scatter_bytes = config.cma_reduce_root_bytes = 1024;
    auto comms = Communicator::create_local(size, config);
    REQUIRE(comms.ok());
    std::atomic<int> failures{0};
    on_ranks(*comms, [&](Communicator& c) {
      MatrixReport rep = run_matrix(c, full_matrix(size, config.slot_bytes));
      for (const auto& f : rep.failures) MESSAGE(f);
      failures += static_cast<int>(rep.failures.size());
    });
    CHECK(failures == 0);
  }
}

// In place, single copy's root writes the tail of the buffer into the receivers where each
// receiver's share of it (bytes / ranks) is DCOMM_CMA_BYTES or more; below, they read it whole.
// Exact either side, from every root, single copy forced.
TEST_CASE("single-copy broadcast in place either side of where the root writes the tail") {
  for (int size : {2, 3}) {
    CAPTURE(size);
    Config config = test_config();
    config.cma_bytes = 1024;
    config.algo[static_cast<size_t>(algo_index(OpKind::kBroadcast))] = "single_copy";
    auto comms = Communicator::create_local(size, config);
    REQUIRE(comms.ok());
    std::atomic<int> wrong{0};
    on_ranks(*comms, [&](Communicator& c) {
      const size_t at = 1024 / 4 * static_cast<size_t>(size);  // floats where the share is 1 KiB
      for (size_t count : {at / 2, at - 16, at, at + 17, 4 * at + 5})
        for (int root = 0; root < size; ++root) {
          std::vector<float> buf(count);
          for (size_t i = 0; i < count; ++i) buf[i] = c.rank() == root ? static_cast<float>(i % 1009 + root) : -1.0f;
          if (!c.broadcast(buf.data(), buf.data(), count, DataType::kFloat32, root).ok()) ++wrong;
          for (size_t i = 0; i < count; ++i) wrong += buf[i] != static_cast<float>(i % 1009 + root);
        }
    });
    CHECK(wrong == 0);
  }
}

// Point-to-point messages from DCOMM_CMA_BYTES go single copy (the receiver copies from the
// sender's buffer): exact at a block 4 bytes under, at, and 4 bytes over it, as all_to_all's
// blocks (in and out of place) and as a send_recv round the ring, over shared memory and
// between threads.
TEST_CASE("all_to_all and send_recv either side of the single-copy threshold") {
  for (TransportChoice t : {TransportChoice::kShm, TransportChoice::kInproc})
    for (int size : {2, 3}) {
      CAPTURE(size);
      Config config = test_config(t);
      config.cma_bytes = 1024;
      auto comms = Communicator::create_local(size, config);
      REQUIRE(comms.ok());
      std::atomic<int> wrong{0};
      on_ranks(*comms, [&](Communicator& c) {
        const int r = c.rank(), n = c.size();
        for (size_t count : {size_t{255}, size_t{256}, size_t{257}}) {
          auto value = [&](int from, int to, size_t i) {
            return static_cast<float>(from * 100000 + to * 1000 + i % 997);
          };
          std::vector<float> in(count * static_cast<size_t>(n)), out(in.size(), -1.0f);
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) in[static_cast<size_t>(p) * count + i] = value(r, p, i);
          std::vector<float> place = in;
          if (!c.all_to_all(in.data(), out.data(), count, DataType::kFloat32).ok()) ++wrong;
          if (!c.all_to_all(place.data(), place.data(), count, DataType::kFloat32).ok()) ++wrong;
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) {
              wrong += out[static_cast<size_t>(p) * count + i] != value(p, r, i);
              wrong += place[static_cast<size_t>(p) * count + i] != value(p, r, i);
            }
          std::vector<float> got(count, -1.0f);
          if (!c.send_recv(in.data(), count, (r + 1) % n, got.data(), count, (r + n - 1) % n, DataType::kFloat32).ok())
            ++wrong;
          for (size_t i = 0; i < count; ++i) wrong += got[i] != value((r + n - 1) % n, 0, i);
        }
      });
      CHECK(wrong == 0);
    }
}

TEST_CASE("matrix, threads as ranks, shared-memory transport") {
  for (int size : {2, 3}) {
    CAPTURE(size);
    run_full_matrix(size, TransportChoice::kShm);
  }
}

// The test slots (256 bytes) fit in a FIFO's lines (kSmallBytes), so the matrices above never
// use a data area of a FIFO with more lines than slots: here slots of 1 KiB do (every count
// but the largest fits a line, the largest takes several rounds of data areas), and FIFOs of
// one line per slot (DCOMM_SMALL_SLOTS no more than DCOMM_SLOTS, the layout before lines).
TEST_CASE("matrix, threads as ranks: FIFOs with lines apart from their data areas, and one line per slot") {
  for (bool shm : {false, true})
    for (int small_slots : {3, 64})
      for (int size : {2, 3, 8}) {
        CAPTURE(shm);
        CAPTURE(small_slots);
        CAPTURE(size);
        Config config = test_config(shm ? TransportChoice::kShm : TransportChoice::kInproc);
        config.slot_bytes = 1024;
        config.slots = 3;
        config.small_slots = small_slots;
        run_full_matrix(size, config);
      }
}

TEST_CASE("matrix, threads as ranks, TCP transport") {
  for (int size : {2, 3}) {
    CAPTURE(size);
    run_full_matrix(size, TransportChoice::kTcp);
  }
}

TEST_CASE("typed spans deduce the type and check their sizes") {
  auto comms = Communicator::create_local(3, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    std::vector<float> grads(1000, static_cast<float>(c.rank() + 1));
    CHECK(c.all_reduce(std::span(grads), ReduceOp::kAvg).ok());
    CHECK(grads[999] == 2.0f);  // (1 + 2 + 3) / 3
    std::vector<double> shard(4, c.rank()), full(12);
    CHECK(c.all_gather(std::span(shard), std::span(full)).ok());
    CHECK(full[4] == 1.0);
    CHECK(full[11] == 2.0);
    std::vector<double> too_small(11);
    Status s = c.all_gather(std::span(shard), std::span(too_small));
    CHECK(s.code() == ErrorCode::kInvalidArgument);
    const std::vector<int32_t> in(6, c.rank() + 1);
    std::vector<int32_t> out(2);
    CHECK(c.reduce_scatter(std::span(in), std::span(out), ReduceOp::kProd).ok());
    CHECK(out[1] == 6);
    std::vector<uint8_t> bytes(5, static_cast<uint8_t>(c.rank() == 2 ? 9 : 0));
    CHECK(c.broadcast(std::span(bytes), 2).ok());
    CHECK(bytes[4] == 9);
  });
}

TEST_CASE("DCOMM_LINK_MODEL_FILE: the link model is measured once, written, and read back by the next communicator") {
  const std::string file = "/tmp/dcomm-test-link-model.txt";
  std::remove(file.c_str());
  setenv("DCOMM_LINK_MODEL_FILE", file.c_str(), 1);
  {
    auto comms = Communicator::create_local(3, test_config());
    REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  }
  std::string written = read_file(file);
  CHECK(written.rfind("load ", 0) == 0);
  CHECK(written.find("alpha_us") != std::string::npos);
  {
    auto comms = Communicator::create_local(3, test_config());  // reads it; writes nothing
    REQUIRE(comms.ok());
  }
  CHECK(read_file(file) == written);
  unsetenv("DCOMM_LINK_MODEL_FILE");
  std::remove(file.c_str());
  setenv("DCOMM_LINK_MODEL", "sometimes", 1);
  auto bad = Communicator::create_local(2, test_config());
  unsetenv("DCOMM_LINK_MODEL");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("DCOMM_LINK_MODEL='sometimes'") != std::string::npos);
}

// An in-place ring shift (send to the next rank and receive from the previous into the same
// buffer) larger than the FIFOs: the receive must not overwrite what is still to be sent.
TEST_CASE("in-place send_recv larger than the FIFOs moves every element") {
  for (TransportChoice t : {TransportChoice::kAuto, TransportChoice::kShm, TransportChoice::kTcp}) {
    auto comms = Communicator::create_local(3, test_config(t));
    REQUIRE(comms.ok());
    const size_t count = 64 * 1024;  // 256 KiB of int32 through 4 slots of 256 bytes
    on_ranks(*comms, [&](Communicator& c) {
      const int r = c.rank(), n = c.size();
      std::vector<int32_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(r * 1000003 + static_cast<int>(i));
      Status s = c.send_recv(buf.data(), count, (r + 1) % n, buf.data(), count, (r + n - 1) % n, DataType::kInt32);
      CHECK_MESSAGE(s.ok(), s.message());
      const int from = (r + n - 1) % n;
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += buf[i] != static_cast<int32_t>(from * 1000003 + static_cast<int>(i));
      CHECK(wrong == 0);
    });
  }
}

// The copies of in-place sends live in working memory the communicator keeps: calls that
// grow and shrink it, collectives between them (which use it too), and a batch with two
// in-place sends (each from its own part of it) all move the right elements.
TEST_CASE("in-place sends reuse the communicator's working memory exactly") {
  auto comms = Communicator::create_local(3, test_config());
  REQUIRE(comms.ok());
  on_ranks(*comms, [&](Communicator& c) {
    const int r = c.rank(), n = c.size(), next = (r + 1) % n, prev = (r + n - 1) % n;
    auto value = [](int rank, size_t i, int round) { return static_cast<int32_t>(rank * 1000003 + round * 7919 + i); };
    int round = 0;
    for (size_t count : {size_t{4096}, size_t{300000}, size_t{1000}, size_t{70000}}) {
      ++round;
      std::vector<int32_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = value(r, i, round);
      // Two in-place sends in one batch: the first half to the next rank, the second to the
      // previous; the halves come back from the other side into the same places.
      const size_t half = count / 2;
      Status s = c.p2p({P2POp::send(buf.data(), half, DataType::kInt32, next),
                        P2POp::send(buf.data() + half, count - half, DataType::kInt32, prev),
                        P2POp::recv(buf.data(), half, DataType::kInt32, prev),
                        P2POp::recv(buf.data() + half, count - half, DataType::kInt32, next)});
      REQUIRE_MESSAGE(s.ok(), s.message());
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) wrong += buf[i] != value(i < half ? prev : next, i, round);
      CHECK(wrong == 0);
      std::vector<float> sum(count, 1.0f);  // a collective in between
      REQUIRE(c.all_reduce(sum.data(), sum.data(), count, DataType::kFloat32, ReduceOp::kSum).ok());
      CHECK(std::count(sum.begin(), sum.end(), static_cast<float>(n)) == static_cast<long>(count));
    }
  });
}
