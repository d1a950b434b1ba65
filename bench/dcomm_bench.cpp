// dcomm-bench: bus bandwidth of dcomm's collectives, with nccl-tests' flags and columns.
//
//   dcomm-bench [collective] [-N ranks] [-b minbytes] [-e maxbytes] [-f factor] [-o op]
//               [-d type] [-r root] [-n iters] [-w warmup] [-c 0|1] [-J file.json] [-M 0|1] [-R 0|1]
//               [-g gpus] [-t threads]
//   dcomm-bench ddp_step|fsdp_step [-B sizes] [-N ranks] [-d type] [-o op] [-n iters] [-w warmup]
//               [-c 0|1] [-J file.json] [-R 0|1] [-t threads]
//
// -J writes the results as JSON (as nccl-tests' -J); -M 1 reports the staging memory each
// rank holds (the largest over ranks); -R 1 takes the buffers from dcomm::mem_alloc (peers
// on the host read and write them without system calls), as nccl-tests' -R registers them.
// -g N runs on CUDA device memory through dcomm::DeviceCommunicator, rank r on GPU
// (local rank mod N), so -N 4 -g 1 puts four ranks on one GPU; calls are enqueued on a stream
// and the time is the host's around the loop and a final stream synchronize (nccl-tests' way).
// -g needs a build with CUDA (dcomm::cuda); -g 0, the default, runs on host memory.
// -t T runs T ranks as threads of this one process (instead of -N processes): ranks sharing a
// GPU then share one CUDA context, so their kernels run at the same time (processes sharing a
// GPU take turns unless MPS runs). Unlike nccl-tests' -t, each thread is one rank.
//
// collective: all_reduce (default), reduce_scatter, all_gather, broadcast, reduce,
// send_recv, all_to_all. Started under torchrun, mpirun or srun it is one rank of that job;
// started plainly it launches -N local ranks of itself (default 2) and waits for them.
//
// size is the bytes of the largest buffer, as in nccl-tests (all_gather: the gathered
// output; reduce_scatter: the input). time is the mean per iteration, the slowest rank's.
// algbw = size / time; busbw = algbw x the collective's factor: all_reduce 2(n-1)/n,
// reduce_scatter, all_gather and all_to_all (n-1)/n, broadcast, reduce and send_recv 1.
// Buffers are allocated and touched once, before timing, and reused for every size.
//
// ddp_step and fsdp_step replay one training step's calls as DDP and FSDP make them
// (bench/peers/step_shapes.hpp: DDP's buckets all-reduced in place, started asynchronously and
// waited together; FSDP's units reduce-scattered then all-gathered, out of place); -B lists the
// sizes. One row: the step's bytes, its time, algbw = bytes / time, busbw with all_reduce's
// factor (a reduce_scatter and an all_gather of a unit move what one all_reduce of it does).
// mpi-bench replays the same steps through MPI (bench/peers/compare.py -c ddp_step).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dcomm/bootstrap/local_launch.hpp>
#include <dcomm/dcomm.hpp>
#if DCOMM_HAS_CUDA
#include <dcomm/dcomm.cuh>
#endif

#include "../tools/cli.hpp"
#include "peers/step_shapes.hpp"
#include "support/values.hpp"

using namespace dcomm;
using Clock = std::chrono::steady_clock;

namespace {

enum class Coll {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kSendRecv,
  kAllToAll,
  kDdpStep,
  kFsdpStep
};

struct Options {
  std::string coll = "all_reduce";
  Coll kind = Coll::kAllReduce;  // coll, parsed once (no string compares inside the timing)
  int ranks = 2;
  size_t min_bytes = 32 << 20, max_bytes = 32 << 20;
  double factor = 2;
  ReduceOp op = ReduceOp::kSum;
  DataType type = DataType::kFloat32;
  int root = 0;
  int iters = 20, warmup = 5;
  bool check = true;
  std::string json;         // -J: write results here
  bool memory = false;      // -M: report staging memory per rank
  bool registered = false;  // -R: buffers from dcomm::mem_alloc
  int gpus = 0;             // -g: on CUDA devices, ranks spread over this many
  int threads = 0;          // -t: ranks as threads of one process
  std::string steps;        // -B: ddp_step's buckets, fsdp_step's units
};

dcomm_cli::Cli& command_line() {
  static dcomm_cli::Cli cli(
      "dcomm-bench", "[collective] [flags]",
      "Bus bandwidth of dcomm's collectives, with nccl-tests' flags and columns. Started under torchrun,\n"
      "mpirun or srun it is one rank of that job; started plainly it launches -N local ranks of itself.");
  return cli;
}
[[noreturn]] void usage(const std::string& why) { command_line().fail(why); }

Options parse(int argc, char** argv) {
  Options o;
  auto size = [](size_t* out) {
    return [out](const std::string& v) -> std::string {
      auto s = parse_size(v, "size");
      if (!s.ok()) return s.status().message();
      if (*s < 0) return "negative size";
      *out = static_cast<size_t>(*s);
      return "";
    };
  };
  auto integer = [](int* out) {
    return [out](const std::string& v) -> std::string {
      *out = std::atoi(v.c_str());
      return "";
    };
  };
  auto yes = [](bool* out) {
    return [out](const std::string& v) -> std::string {
      *out = v != "0";
      return "";
    };
  };
  command_line()
      .words(
          "collective: all_reduce (default), reduce_scatter, all_gather, broadcast, reduce, send_recv,\n"
          "  all_to_all, ddp_step, fsdp_step (a training step's calls, as DDP and FSDP make them)",
          [&](const std::string& v) -> std::string {
            o.coll = v;
            return "";
          })
      .flag("-N", "ranks", "local ranks to launch as processes (default 2)", integer(&o.ranks))
      .flag("-b", "bytes", "smallest size; K, M, G suffixes (default 32M)", size(&o.min_bytes))
      .flag("-e", "bytes", "largest size (default 32M)", size(&o.max_bytes))
      .flag("-f", "factor", "size multiplier from one row to the next (default 2)",
            [&](const std::string& v) -> std::string {
              o.factor = std::atof(v.c_str());
              return "";
            })
      .flag("-o", "op", "sum, prod, min, max or avg (default sum)",
            [&](const std::string& v) -> std::string {
              auto op = parse_reduce_op(v);
              if (!op) return "unknown op " + v;
              o.op = *op;
              return "";
            })
      .flag("-d", "type",
            "int8 uint8 int32 uint32 int64 uint64 float16|half bfloat16|bf16 float32|float\n"
            "float64|double float8_e4m3 float8_e5m2 (default float32)",
            [&](const std::string& v) -> std::string {
              auto t = parse_data_type(v);
              if (!t) return "unknown type " + v;
              o.type = *t;
              return "";
            })
      .flag("-r", "root", "root rank of broadcast and reduce (default 0)", integer(&o.root))
      .flag("-n", "iters", "timed iterations per size (default 20)", integer(&o.iters))
      .flag("-w", "warmup", "untimed iterations before them (default 5)", integer(&o.warmup))
      .flag("-c", "0|1", "check every result exactly (default 1)", yes(&o.check))
      .flag("-J", "file", "also write the results as JSON, as nccl-tests' -J",
            [&](const std::string& v) -> std::string {
              o.json = v;
              return "";
            })
      .flag("-M", "0|1", "report the staging memory each rank holds (the largest over ranks)", yes(&o.memory))
      .flag("-R", "0|1", "buffers from dcomm::mem_alloc, as nccl-tests' -R registers them", yes(&o.registered))
      .flag("-g", "gpus", "on CUDA device memory, rank r on GPU (local rank mod gpus); needs a CUDA build",
            integer(&o.gpus))
      .flag("-t", "threads", "this many ranks as threads of this process, instead of -N processes", integer(&o.threads))
      .flag("-B", "sizes", "ddp_step's buckets or fsdp_step's units, e.g. 1M,25M,25M or 8x32M",
            [&](const std::string& v) -> std::string {
              o.steps = v;
              return "";
            })
      .epilog(
          "size is the bytes of the largest buffer, as in nccl-tests; time is the mean per iteration, the\n"
          "slowest rank's; algbw = size / time; busbw = algbw x the collective's factor (docs/benchmarking.md).")
      .parse(argc, argv);
  static const char* kColls[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
                                 "send_recv",  "all_to_all",     "ddp_step",   "fsdp_step"};
  auto known = std::find(std::begin(kColls), std::end(kColls), o.coll);
  if (known == std::end(kColls)) usage(("unknown collective " + o.coll).c_str());
  o.kind = static_cast<Coll>(known - std::begin(kColls));
  if (o.ranks < 1 || o.iters < 1 || o.warmup < 0 || o.factor <= 1 || o.min_bytes > o.max_bytes || o.gpus < 0 ||
      o.threads < 0)
    usage("bad numbers: -N and -n at least 1, -w and -g and -t at least 0, -f above 1, -b at most -e");
#if !DCOMM_HAS_CUDA
  if (o.gpus > 0) usage("-g: this dcomm-bench was built without CUDA (configure with the CUDA toolkit)");
#endif
  if (o.kind == Coll::kDdpStep || o.kind == Coll::kFsdpStep) {
    if (o.gpus > 0) usage("-g: ddp_step and fsdp_step run on host memory");
    if (step_shapes::parse_list(o.steps.empty() ? step_shapes::kDdpDefault : o.steps).empty())
      usage("-B: a list of sizes, e.g. 1M,25M,25M or 8x32M");
  }
  return o;
}

// A benchmark buffer: ordinary memory, or from dcomm::mem_alloc (-R 1, as nccl-tests'
// registered buffers: peers on the host then reach it without a system call).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (registered_) mem_free(data_).ignore();
#if DCOMM_HAS_CUDA
    if (device_) cudaFree(data_);
#endif
  }
  Status allocate(size_t bytes, bool registered, bool device) {
#if DCOMM_HAS_CUDA
    if (device) {
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaMalloc(reinterpret_cast<void**>(&data_), bytes), "cudaMalloc"));
      device_ = true;
      // cudaMemset may return before it is done, and is not ordered with non-blocking streams.
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemset(data_, 1, bytes), "cudaMemset"));
      return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }
#endif
    (void)device;
    if (registered) {
      auto p = mem_alloc(bytes);
      if (!p.ok()) return p.status();
      data_ = static_cast<char*>(*p);
      registered_ = true;
    } else {
      plain_.assign(bytes, 0);
      data_ = plain_.data();
    }
    std::memset(data_, 1, bytes);
    return {};
  }
  char* data() const { return data_; }
  // Copies between this buffer (at `at`) and host memory, whichever memory it is. Device
  // copies go on the stream the collectives use and are waited for (a pageable cudaMemcpy
  // may return before the data lands, and is not ordered with a non-blocking stream).
  Status put(char* at, const void* from, size_t bytes, [[maybe_unused]] void* stream) const {
#if DCOMM_HAS_CUDA
    if (device_) return device_copy(at, from, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream));
#endif
    std::memcpy(at, from, bytes);
    return {};
  }
  Status get(void* to, const char* at, size_t bytes, [[maybe_unused]] void* stream) const {
#if DCOMM_HAS_CUDA
    if (device_) return device_copy(to, at, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream));
#endif
    std::memcpy(to, at, bytes);
    return {};
  }

 private:
  std::vector<char> plain_;
  char* data_ = nullptr;
  bool registered_ = false;
  bool device_ = false;
#if DCOMM_HAS_CUDA
  static Status device_copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
    DCOMM_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(to, from, bytes, kind, stream), "cudaMemcpyAsync"));
    return cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
#endif
};

// The collective of one iteration. count: elements of the size column's buffer.
struct Bench {
  Communicator& c;
  const Options& o;
  size_t eb;
  Buffer send, recv;  // allocated for max_bytes, touched once
#if DCOMM_HAS_CUDA
  std::unique_ptr<DeviceCommunicator> dev;  // -g: the calls go here, on `stream`
  cudaStream_t stream = nullptr;
#endif

  int n() const { return c.size(); }
  // (send elements, recv elements) of a call whose size column is `count` elements.
  std::pair<size_t, size_t> counts(size_t count) const {
    size_t un = static_cast<size_t>(n());
    if (o.kind == Coll::kReduceScatter) return {count / un * un, count / un};
    if (o.kind == Coll::kAllGather) return {count / un, count / un * un};
    if (o.kind == Coll::kAllToAll) return {count / un * un, count / un * un};
    return {count, count};
  }
  double bus_factor() const {
    double nn = n();
    if (o.kind == Coll::kAllReduce) return 2 * (nn - 1) / nn;
    if (o.kind == Coll::kReduceScatter || o.kind == Coll::kAllGather || o.kind == Coll::kAllToAll) return (nn - 1) / nn;
    return 1;
  }
  // In place: the output is where the collective reads its input, as nccl-tests. all_to_all
  // has no in-place form: its in-place column runs out of place again.
  void* in_ptr(bool in_place) {
    if (!in_place || o.kind == Coll::kAllToAll) return send.data();
    if (o.kind == Coll::kAllGather) return recv.data() + static_cast<size_t>(c.rank()) * counts(cur_count).first * eb;
    return recv.data();
  }
  void* out_ptr(bool in_place) {
    if (in_place && o.kind == Coll::kReduceScatter)
      return recv.data() + static_cast<size_t>(c.rank()) * counts(cur_count).second * eb;
    return recv.data();
  }
  size_t cur_count = 0;
  // The collective's kind, for asking the communicator which algorithm it runs.
  std::optional<OpKind> op_kind() const {
    switch (o.kind) {
      case Coll::kAllReduce: return OpKind::kAllReduce;
      case Coll::kReduceScatter: return OpKind::kReduceScatter;
      case Coll::kAllGather: return OpKind::kAllGather;
      case Coll::kBroadcast: return OpKind::kBroadcast;
      case Coll::kReduce: return OpKind::kReduce;
      default: return std::nullopt;
    }
  }

  void* stream_ptr() const {
#if DCOMM_HAS_CUDA
    return stream;
#else
    return nullptr;
#endif
  }
  // The device path's settings, for the JSON ("" on host memory).
  std::string device_settings() const {
#if DCOMM_HAS_CUDA
    if (dev)
      return detail::cat(dev->config().channels, " channels x ", dev->config().threads, " threads, ",
                         dev->config().nslots, " slots x ", dev->config().slot_bytes >> 10, " KiB");
#endif
    return "";
  }
  // -g: the time of one device-to-device cudaMemcpyAsync of `bytes` on this rank's stream
  // (mean of `iters`), the ceiling beside the collective's row; 0 on host memory.
  Result<double> copy_us(size_t bytes) {
#if DCOMM_HAS_CUDA
    if (dev && bytes > 0) {
      auto t0 = Clock::now();
      for (int i = 0; i < o.iters; ++i)
        DCOMM_RETURN_IF_ERROR(cuda_status(
            cudaMemcpyAsync(recv.data(), send.data(), bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync"));
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.iters;
    }
#endif
    (void)bytes;
    return 0.0;
  }
  // Waits for what run() enqueued (device calls); host calls are done when they return.
  Status sync() {
#if DCOMM_HAS_CUDA
    if (dev) {
      DCOMM_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
      return dev->error();
    }
#endif
    return {};
  }
  const char* path_to_next() const {
#if DCOMM_HAS_CUDA
    if (dev) return dev->path_to((c.rank() + 1) % c.size());
#endif
    return c.transport_to((c.rank() + 1) % c.size());
  }

  Status run(bool in_place) {
    auto [sc, rc] = counts(cur_count);
    const void* in = in_ptr(in_place);
    void* out = out_ptr(in_place);
#if DCOMM_HAS_CUDA
    if (dev) return run_device(in, out, sc, rc);
#endif
    if (o.kind == Coll::kAllReduce) return c.all_reduce(in, out, sc, o.type, o.op);
    if (o.kind == Coll::kReduceScatter) return c.reduce_scatter(in, out, rc, o.type, o.op);
    if (o.kind == Coll::kAllGather) return c.all_gather(in, out, sc, o.type);
    if (o.kind == Coll::kBroadcast) return c.broadcast(in, out, sc, o.type, o.root);
    if (o.kind == Coll::kReduce) return c.reduce(in, out, sc, o.type, o.op, o.root);
    if (o.kind == Coll::kSendRecv)
      return c.send_recv(in, sc, (c.rank() + 1) % n(), out, rc, (c.rank() + n() - 1) % n(), o.type);
    return c.all_to_all(in, out, sc / static_cast<size_t>(n()), o.type);
  }
#if DCOMM_HAS_CUDA
  Status run_device(const void* in, void* out, size_t sc, size_t rc) {
    DeviceCommunicator& d = *dev;
    cudaStream_t s = stream;
    if (o.kind == Coll::kAllReduce) return d.all_reduce(in, out, sc, o.type, o.op, s);
    if (o.kind == Coll::kReduceScatter) return d.reduce_scatter(in, out, rc, o.type, o.op, s);
    if (o.kind == Coll::kAllGather) return d.all_gather(in, out, sc, o.type, s);
    if (o.kind == Coll::kBroadcast) return d.broadcast(in, out, sc, o.type, o.root, s);
    if (o.kind == Coll::kReduce) return d.reduce(in, out, sc, o.type, o.op, o.root, s);
    d.group_start();
    Status first;
    auto keep = [&](Status st) {
      if (first.ok() && !st.ok()) first = st;
    };
    if (o.kind == Coll::kSendRecv) {
      keep(d.send(in, sc, o.type, (c.rank() + 1) % n(), s));
      keep(d.recv(out, rc, o.type, (c.rank() + n() - 1) % n(), s));
    } else {  // all_to_all: algo/exchange.hpp's batch
      auto ops =
          equal_exchange_ops(Exchange::kAllToAll, c.rank(), n(), 0, in, out, sc / static_cast<size_t>(n()), o.type);
      keep(ops.status());
      for (const P2POp& op : ops.ok() ? *ops : std::vector<P2POp>{})
        keep(op.kind == P2POp::Kind::kSend ? d.send(op.buffer, op.count, o.type, op.peer, s)
                                           : d.recv(op.buffer, op.count, o.type, op.peer, s));
    }
    keep(d.group_end());
    return first;
  }
#endif

  // Fills the input with verifiable values, runs once, counts wrong output elements.
  Result<int64_t> verify(bool in_place) {
    auto [sc, rc] = counts(cur_count);
    using namespace dcomm_test;
    const int r = c.rank();
    return dispatch_type(o.type, [&]<class T>() -> Result<int64_t> {
      std::vector<T> in(sc), out;
      for (size_t i = 0; i < sc; ++i) in[i] = from_int<T>(input_value(o.type, o.op, r, i));
      DCOMM_RETURN_IF_ERROR(send.put(static_cast<char*>(in_ptr(in_place)), in.data(), sc * sizeof(T), stream_ptr()));
      Status s = run(in_place);
      if (s.ok()) s = sync();
      if (!s.ok()) return s;
      out.resize(rc);
      DCOMM_RETURN_IF_ERROR(
          recv.get(out.data(), static_cast<const char*>(out_ptr(in_place)), rc * sizeof(T), stream_ptr()));
      size_t un = static_cast<size_t>(n());
      int64_t wrong = 0;
      auto expect = [&](size_t i) -> T {
        if (o.kind == Coll::kAllReduce || o.kind == Coll::kReduce) return expected_reduction<T>(o.type, o.op, n(), i);
        if (o.kind == Coll::kReduceScatter)
          return expected_reduction<T>(o.type, o.op, n(), static_cast<size_t>(r) * rc + i);
        if (o.kind == Coll::kAllGather) return from_int<T>(input_value(o.type, o.op, static_cast<int>(i / sc), i % sc));
        if (o.kind == Coll::kBroadcast) return from_int<T>(input_value(o.type, o.op, o.root, i));
        if (o.kind == Coll::kSendRecv) return from_int<T>(input_value(o.type, o.op, (r + n() - 1) % n(), i));
        size_t per = sc / un;  // all_to_all: block p came from rank p, its block r
        return from_int<T>(
            input_value(o.type, o.op, static_cast<int>(i / per), static_cast<size_t>(r) * per + i % per));
      };
      size_t out_count = (o.kind == Coll::kReduce && r != o.root) ? 0 : rc;
      for (size_t i = 0; i < out_count; ++i) wrong += !same_bits(out[i], expect(i));
      return wrong;
    });
  }
};

// -J: the run's settings and its rows (rank 0); false when the file cannot be written.
bool write_json(const Options& o, Communicator& c, const char* transport, uint64_t staging, const std::string& device,
                const std::string& rows) {
  if (o.json.empty()) return true;
  FILE* f = std::fopen(o.json.c_str(), "w");
  if (!f) return std::fprintf(stderr, "dcomm-bench: cannot write %s\n", o.json.c_str()), false;
  std::fprintf(f,
               "{\n  \"tool\": \"dcomm-bench\", \"collective\": \"%s\", \"ranks\": %d, \"type\": \"%s\", "
               "\"op\": \"%s\", \"root\": %d, \"iters\": %d, \"transport\": \"%s\", "
               "\"staging_bytes_per_rank\": %llu, \"device\": \"%s\",\n  \"results\": [\n%s\n  ]\n}\n",
               o.coll.c_str(), c.size(), to_string(o.type), to_string(o.op), o.root, o.iters, transport,
               static_cast<unsigned long long>(staging), device.c_str(), rows.c_str());
  std::fclose(f);
  return true;
}

// ddp_step, fsdp_step: one training step's calls (bench/peers/step_shapes.hpp), timed whole.
class Step {
 public:
  Step(const Options& o, Communicator& c) : o_(o), c_(c), eb_(size_of(o.type)), n_(static_cast<size_t>(c.size())) {
    const bool ddp = o.kind == Coll::kDdpStep;
    const auto bytes = step_shapes::parse_list(
        o.steps.empty() ? (ddp ? step_shapes::kDdpDefault : step_shapes::kFsdpDefault) : o.steps);
    counts_ = step_shapes::element_counts(bytes, eb_, n_);
    for (size_t k : counts_) total_ += k;
  }
  bool ddp() const { return o_.kind == Coll::kDdpStep; }
  size_t total() const { return total_; }
  size_t calls() const { return ddp() ? counts_.size() : 2 * counts_.size(); }
  // ddp: the flat gradient buffer the buckets are views of. fsdp: every unit's parameters
  // (all_gather's output) and gradients (reduce_scatter's input), and this rank's shards of both.
  Status allocate() {
    DCOMM_RETURN_IF_ERROR(full_.allocate(total_ * eb_ + 64, o_.registered, false));
    if (ddp()) return {};
    DCOMM_RETURN_IF_ERROR(grads_.allocate(total_ * eb_ + 64, o_.registered, false));
    return shards_.allocate(2 * total_ / n_ * eb_ + 64, o_.registered, false);
  }
  Status run() {
    size_t at = 0;
    if (ddp()) {
      std::vector<Work> buckets;
      for (size_t k : counts_) {
        buckets.push_back(c_.all_reduce_async(full_.data() + at * eb_, full_.data() + at * eb_, k, o_.type, o_.op));
        at += k;
      }
      Status first;
      for (const Work& w : buckets)
        if (Status s = w.wait(); first.ok() && !s.ok()) first = s;
      return first;
    }
    for (size_t k : counts_) {
      const size_t per = k / n_;
      DCOMM_RETURN_IF_ERROR(c_.reduce_scatter(grads_.data() + at * eb_, grad_shard(at), per, o_.type, o_.op));
      DCOMM_RETURN_IF_ERROR(c_.all_gather(param_shard(at), full_.data() + at * eb_, per, o_.type));
      at += k;
    }
    return {};
  }
  // Fills every input with verifiable values, runs the step once, counts wrong outputs.
  Result<int64_t> verify() {
    using namespace dcomm_test;
    const int r = c_.rank();
    return dispatch_type(o_.type, [&]<class T>() -> Result<int64_t> {
      T* inputs = reinterpret_cast<T*>(ddp() ? full_.data() : grads_.data());
      for (size_t i = 0; i < total_; ++i) inputs[i] = from_int<T>(input_value(o_.type, o_.op, r, i));
      if (!ddp())
        for (size_t i = 0; i < total_ / n_; ++i)
          reinterpret_cast<T*>(param_shard(0))[i] = from_int<T>(input_value(o_.type, o_.op, r, i));
      DCOMM_RETURN_IF_ERROR(run());
      int64_t wrong = 0;
      const T* full = reinterpret_cast<const T*>(full_.data());
      if (ddp()) {
        for (size_t i = 0; i < total_; ++i)
          wrong += !same_bits(full[i], expected_reduction<T>(o_.type, o_.op, c_.size(), i));
        return wrong;
      }
      size_t at = 0;
      for (size_t k : counts_) {  // unit by unit: this rank's block of the sum, and every rank's shard
        const size_t per = k / n_;
        const T* grads = reinterpret_cast<const T*>(grad_shard(at));
        for (size_t j = 0; j < per; ++j)
          wrong += !same_bits(grads[j],
                              expected_reduction<T>(o_.type, o_.op, c_.size(), at + static_cast<size_t>(r) * per + j));
        for (size_t j = 0; j < k; ++j)
          wrong += !same_bits(full[at + j],
                              from_int<T>(input_value(o_.type, o_.op, static_cast<int>(j / per), at / n_ + j % per)));
        at += k;
      }
      return wrong;
    });
  }

 private:
  // A unit at element `at` has its shards at `at / n` of each half of the shard buffer.
  char* grad_shard(size_t at) const { return shards_.data() + at / n_ * eb_; }
  char* param_shard(size_t at) const { return shards_.data() + (total_ + at) / n_ * eb_; }

  const Options& o_;
  Communicator& c_;
  size_t eb_, n_, total_ = 0;
  std::vector<size_t> counts_;
  Buffer full_, grads_, shards_;
};

// A call failed on this rank: says so, naming the rank, and gives the exit status (1).
int failed(const Communicator& c, const Status& s) {
  std::fprintf(stderr, "dcomm-bench: rank %d: %s\n", c.rank(), s.message().c_str());
  return 1;
}

int run_step(const Options& o, Communicator& c) {
  Step step(o, c);
  if (Status s = step.allocate(); !s.ok()) return failed(c, s);
  if (Status s = c.barrier(); !s.ok()) return failed(c, s);
  const char* transport = c.transport_to((c.rank() + 1) % c.size());
  if (c.rank() == 0) {
    std::printf(
        "# dcomm-bench %s: %d ranks (%d on this host, next rank via %s), %s %s, iters %d, warmup %d, check %d%s\n",
        o.coll.c_str(), c.size(), c.local_size(), transport, to_string(o.type), to_string(o.op), o.iters, o.warmup,
        o.check ? 1 : 0, o.registered ? ", buffers from mem_alloc" : "");
    std::printf("# %s\n#\n", step.ddp() ? "buckets all-reduced in place, started back to back and waited together"
                                        : "per unit: reduce_scatter, then all_gather, out of place");
    std::printf("# %10s %6s %11s %7s %7s %6s\n# %10s %6s %11s %7s %7s\n", "size", "calls", "time", "algbw", "busbw",
                "#wrong", "(B)", "", "(us/step)", "(GB/s)", "(GB/s)");
  }
  for (int i = 0; i < o.warmup; ++i)
    if (Status s = step.run(); !s.ok()) return failed(c, s);
  if (Status s = c.barrier(); !s.ok()) return failed(c, s);
  auto t0 = Clock::now();
  for (int i = 0; i < o.iters; ++i)
    if (Status s = step.run(); !s.ok()) return failed(c, s);
  double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.iters, us = 0;
  int64_t wrong = 0, wrong_sum = 0;
  if (Status s = c.all_reduce(&t, &us, 1, DataType::kFloat64, ReduceOp::kMax); !s.ok()) return failed(c, s);
  if (o.check) {
    auto w = step.verify();
    if (!w.ok()) return failed(c, w.status());
    wrong = *w;
  }
  if (Status s = c.all_reduce(&wrong, &wrong_sum, 1, DataType::kInt64, ReduceOp::kSum); !s.ok()) return failed(c, s);
  if (c.rank() != 0) return wrong_sum ? 1 : 0;
  const double bytes = static_cast<double>(step.total() * size_of(o.type)), algbw = bytes / us / 1e3;
  const double busbw = algbw * 2 * (c.size() - 1) / c.size();
  std::printf("  %10zu %6zu %11.2f %7.2f %7.2f %6lld\n", step.total() * size_of(o.type), step.calls(), us, algbw, busbw,
              static_cast<long long>(wrong_sum));
  std::printf("# Out of bounds values : %lld %s\n#\n", static_cast<long long>(wrong_sum), wrong_sum ? "FAILED" : "OK");
  const std::string row = detail::cat("    {\"size\": ", step.total() * size_of(o.type), ", \"count\": ", step.total(),
                                      ", \"in_place\": ", step.ddp() ? "true" : "false", ", \"time_us\": ", us,
                                      ", \"algbw\": ", algbw, ", \"busbw\": ", busbw, ", \"wrong\": ", wrong_sum,
                                      ", \"calls\": ", step.calls(), ", \"algorithm\": \"step\"}");
  if (!write_json(o, c, transport, c.staging_bytes(), "", row)) return 1;
  return wrong_sum ? 1 : 0;
}

int run_rank(const Options& o, Communicator& c) {
  if (o.kind == Coll::kDdpStep || o.kind == Coll::kFsdpStep) return run_step(o, c);
  if (o.root >= c.size()) usage("root out of range");
  const size_t eb = size_of(o.type);
  Bench b{c, o, eb, {}, {}};
#if DCOMM_HAS_CUDA
  if (o.gpus > 0) {
    const int gpu = c.local_rank() % o.gpus;
    cudaSetDevice(gpu);
    auto d = DeviceCommunicator::create(c, gpu);
    if (!d.ok()) return failed(c, d.status());
    b.dev = std::move(*d);
    if (cudaError_t e = cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking); e != cudaSuccess)
      return failed(c, make_error(ErrorCode::kSystemError, "cudaStreamCreateWithFlags: ", cudaGetErrorString(e)));
  }
#endif
  // Touched now: no page faults inside the timing.
  for (Buffer* buf : {&b.send, &b.recv})
    if (Status s = buf->allocate(o.max_bytes + 64, o.registered, o.gpus > 0); !s.ok()) return failed(c, s);
  // Ranks sharing a GPU: no allocation while another's kernels wait for this rank (an
  // allocation may wait for the whole GPU).
  if (Status s = c.barrier(); !s.ok()) return failed(c, s);
  if (c.rank() == 0) {
    std::printf(
        "# dcomm-bench %s: %d ranks (%d on this host, next rank via %s), %s %s, root %d, iters %d, warmup %d, "
        "check %d%s\n#\n",
        o.coll.c_str(), c.size(), c.local_size(), b.path_to_next(), to_string(o.type), to_string(o.op), o.root, o.iters,
        o.warmup, o.check ? 1 : 0, o.registered ? ", buffers from mem_alloc" : "");
    std::printf("# %10s %12s %8s %6s %6s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "", "", "", "", "", "out-of-place", "",
                "", "", "in-place", "", "", "");
    std::printf("# %10s %12s %8s %6s %6s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
                "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s %12s %8s %6s %6s  %9s %7s %7s %6s  %9s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }
  double bus_sum = 0;
  int rows = 0;
  int64_t total_wrong = 0;
  std::string json_rows;
  for (size_t bytes = o.min_bytes; bytes <= o.max_bytes;) {
    size_t count = std::max<size_t>(bytes / eb, 1);
    auto [sc, rc] = b.counts(count);
    size_t shown = std::max(sc, rc);
    b.cur_count = count;
    double us[2] = {0, 0};
    int64_t wrong[2] = {0, 0};
    for (int in_place = 0; in_place < 2; ++in_place) {
      for (int i = 0; i < o.warmup; ++i)
        if (Status s = b.run(in_place); !s.ok()) return failed(c, s);
      if (Status s = b.sync(); !s.ok()) return failed(c, s);
      if (Status s = c.barrier(); !s.ok()) return failed(c, s);
      auto t0 = Clock::now();
      for (int i = 0; i < o.iters; ++i)
        if (Status s = b.run(in_place); !s.ok()) return failed(c, s);
      if (Status s = b.sync(); !s.ok()) return failed(c, s);
      double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / o.iters;
      if (Status s = c.all_reduce(&t, &us[in_place], 1, DataType::kFloat64, ReduceOp::kMax); !s.ok())
        return failed(c, s);
      // In-place send_recv sends a buffer while receiving into it: what arrives first is a race,
      // as in nccl-tests, whose in-place column says N/A for it.
      if (o.check && in_place && o.kind == Coll::kSendRecv) {
        wrong[in_place] = -1;
      } else if (o.check) {
        auto w = b.verify(in_place);
        if (!w.ok()) return failed(c, w.status());
        if (Status s = c.all_reduce(&*w, &wrong[in_place], 1, DataType::kInt64, ReduceOp::kSum); !s.ok())
          return failed(c, s);
      }
    }
    // -g: rank 0 alone copies the same bytes on the device while the others wait, the row's ceiling.
    double copy = 0;
    if (o.gpus > 0) {
      if (c.rank() == 0) {
        auto t = b.copy_us(shown * eb);
        if (!t.ok()) return failed(c, t.status());
        copy = *t;
      }
      if (Status s = c.barrier(); !s.ok()) return failed(c, s);
    }
    if (c.rank() == 0) {
      double size_b = static_cast<double>(shown * eb);
      std::printf("  %10zu %12zu %8s %6s %6d", shown * eb, shown, to_string(o.type), to_string(o.op),
                  (o.kind == Coll::kBroadcast || o.kind == Coll::kReduce) ? o.root : -1);
      for (int k = 0; k < 2; ++k) {
        double algbw = size_b / us[k] / 1e3;
        std::printf("  %9.2f %7.2f %7.2f %6s", us[k], algbw, algbw * b.bus_factor(),
                    wrong[k] < 0 ? "N/A" : std::to_string(wrong[k]).c_str());
      }
      std::printf("\n");
      std::fflush(stdout);
      for (int k = 0; k < 2; ++k) {
        double algbw = size_b / us[k] / 1e3;
        std::string algo = "p2p";
        if (o.gpus > 0) algo = "device_ring";
        else if (auto kind = b.op_kind(); kind)
          algo = to_string(c.algorithm_for(*kind, kind == OpKind::kReduceScatter ? rc : sc, o.type, k == 1).algorithm);
        json_rows += detail::cat(json_rows.empty() ? "" : ",\n", "    {\"size\": ", shown * eb, ", \"count\": ", shown,
                                 ", \"in_place\": ", k ? "true" : "false", ", \"time_us\": ", us[k],
                                 ", \"algbw\": ", algbw, ", \"busbw\": ", algbw * b.bus_factor(),
                                 ", \"wrong\": ", wrong[k] < 0 ? std::string("null") : std::to_string(wrong[k]),
                                 ", \"algorithm\": \"", algo, "\"",
                                 copy > 0 ? detail::cat(", \"copy_us\": ", copy) : std::string(), "}");
      }
      bus_sum += size_b / us[0] / 1e3 * b.bus_factor();
      ++rows;
    }
    total_wrong += std::max<int64_t>(wrong[0], 0) + std::max<int64_t>(wrong[1], 0);
    size_t next = static_cast<size_t>(static_cast<double>(bytes) * o.factor);
    if (next <= bytes) break;
    bytes = next;
  }
  uint64_t staging = c.staging_bytes(), staging_max = 0;
  if (Status s = c.all_reduce(&staging, &staging_max, 1, DataType::kUint64, ReduceOp::kMax); !s.ok())
    return failed(c, s);
  if (c.rank() == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %.3f\n", rows ? bus_sum / rows : 0.0);
    if (o.memory)
      std::printf(
          "# Staging memory       : %.2f MiB per rank (largest over ranks; DCOMM_SLOTS x DCOMM_SLOT_BYTES per link)\n",
          static_cast<double>(staging_max) / (1 << 20));
    std::printf("#\n");
    if (!write_json(o, c, b.path_to_next(), staging_max, b.device_settings(), json_rows)) return 1;
  }
  return total_wrong ? 1 : 0;
}

int run_rank(const Options& o) {
  auto comm = Communicator::from_env();
  if (!comm.ok()) {
    std::fprintf(stderr, "dcomm-bench: %s\n", comm.status().message().c_str());
    return 1;
  }
  return run_rank(o, **comm);
}

// -t: every rank a thread of this process.
int run_threads(const Options& o) {
  auto comms = Communicator::create_local(o.threads);
  if (!comms.ok()) return std::fprintf(stderr, "dcomm-bench: %s\n", comms.status().message().c_str()), 1;
  std::vector<int> codes(comms->size(), 0);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms->size(); ++r) threads.emplace_back([&, r] { codes[r] = run_rank(o, *(*comms)[r]); });
  for (auto& t : threads) t.join();
  return *std::max_element(codes.begin(), codes.end());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.threads > 0) return run_threads(o);
  if (detect_launch().ok()) return run_rank(o);
  // Not launched by anyone: become the launcher of -N local ranks.
  std::vector<std::string> args(argv, argv + argc);
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) args[0] = std::string(self, static_cast<size_t>(n));
  auto ranks = spawn_local_ranks(args, o.ranks);
  if (!ranks.ok()) return std::fprintf(stderr, "dcomm-bench: %s\n", ranks.status().message().c_str()), 1;
  Status s = wait_local_ranks(*ranks, std::chrono::hours(24));
  int worst = 0;
  for (int code : ranks->exit_codes) worst = std::max(worst, code != 0 ? 1 : 0);
  if (!s.ok()) std::fprintf(stderr, "dcomm-bench: %s\n", s.message().c_str());
  return worst;
}
