// ddp_trainer: data-parallel training of a small CNN (or MLP) on Fashion-MNIST, with libtorch
// for the model, autograd and optimizer and dcomm for every byte of communication. The
// program to copy when starting a trainer of your own; README.md says how to run each mode.
//
//   torchrun --nproc-per-node 2 --no_python build/examples/ddp_trainer/ddp_trainer [flags]
//   mpirun -np 2 ddp_trainer [flags]        srun -n 2 ddp_trainer [flags]
//   ddp_trainer --local-ranks 2 [flags]     (ranks as threads of this process)
//   dcomm-run -n 4 ddp_trainer --elastic [flags]   (a rank that dies is left behind: elastic.hpp)
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <dcomm/dcomm.hpp>

#include "fashion_mnist.hpp"
#include "elastic.hpp"
#include "grad_sync.hpp"
#include "sampler.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  std::string out = "ddp_trainer_out";
  int epochs = 3;
  int batch = 64;  // per rank
  int accum = 1;
  double lr = 0.05;
  double momentum = 0.9;
  double bucket_mb = 25;
  std::string grad_dtype = "fp32";
  bool amp = false;
  bool overlap = true;
  bool resume = false;
  int stop_after = 0;       // stop after this epoch (as if interrupted); 0: run every epoch
  int64_t steps = 0;        // at most this many optimizer steps per epoch; 0: the whole shard
  int64_t train_limit = 0;  // use the first N training samples; 0: all
  int local_ranks = 0;
  int threads = 1;  // torch threads per rank
  uint64_t seed = 1;
  std::string dump_params;  // rank 0 writes the final parameters here (raw float32)
  bool quiet = false;
  bool elastic = false;  // survive a rank's death: shrink and go on (elastic.hpp)
  int kill_rank = -1;    // for the tests: this rank kills itself (SIGKILL) inside step kill_step
  int kill_epoch = 1;    // of epoch kill_epoch (--kill-at E:S)
  int64_t kill_step = -1;
  std::string log_samples;  // each rank appends the sample indices of its applied steps to FILE.<rank>
  std::string rejoin;       // --elastic: a restarted rank joins again, through this file (elastic.hpp)
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "ddp_trainer: %s\n"
               "usage: ddp_trainer [--data DIR] [--model cnn|mlp] [--epochs N] [--batch B (per rank)] [--accum K]\n"
               "                   [--lr X] [--momentum X] [--bucket-mb X] [--grad-dtype fp32|bf16|fp16] [--amp]\n"
               "                   [--no-overlap] [--out DIR] [--resume] [--stop-after E] [--steps N]\n"
               "                   [--train-limit N] [--local-ranks N] [--threads N] [--seed S]\n"
               "                   [--dump-params FILE] [--quiet] [--elastic [--rejoin FILE]] [--log-samples FILE]\n"
               "                   [--kill-rank R --kill-at E:S (tests: rank R dies in step S of epoch E)]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + f);
      return argv[++i];
    };
    auto number = [&](double lo, double hi) {
      const std::string v = value();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(x >= lo && x <= hi))
        usage(f + " takes a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not '" + v + "'");
      return x;
    };
    if (f == "--data") o.data = value();
    else if (f == "--model") o.model = value();
    else if (f == "--out") o.out = value();
    else if (f == "--epochs") o.epochs = static_cast<int>(number(1, 1000));
    else if (f == "--batch") o.batch = static_cast<int>(number(1, 1 << 16));
    else if (f == "--accum") o.accum = static_cast<int>(number(1, 1024));
    else if (f == "--lr") o.lr = number(0, 100);
    else if (f == "--momentum") o.momentum = number(0, 1);
    else if (f == "--bucket-mb") o.bucket_mb = number(0.001, 4096);
    else if (f == "--grad-dtype") o.grad_dtype = value();
    else if (f == "--amp") o.amp = true;
    else if (f == "--no-overlap") o.overlap = false;
    else if (f == "--resume") o.resume = true;
    else if (f == "--stop-after") o.stop_after = static_cast<int>(number(0, 1000));
    else if (f == "--steps") o.steps = static_cast<int64_t>(number(0, 1e9));
    else if (f == "--train-limit") o.train_limit = static_cast<int64_t>(number(0, 1e9));
    else if (f == "--local-ranks") o.local_ranks = static_cast<int>(number(1, 256));
    else if (f == "--threads") o.threads = static_cast<int>(number(1, 256));
    else if (f == "--seed") o.seed = static_cast<uint64_t>(number(0, 1e15));
    else if (f == "--dump-params") o.dump_params = value();
    else if (f == "--quiet") o.quiet = true;
    else if (f == "--elastic") o.elastic = true;
    else if (f == "--log-samples") o.log_samples = value();
    else if (f == "--rejoin") o.rejoin = value();
    else if (f == "--kill-rank") o.kill_rank = static_cast<int>(number(0, 1 << 20));
    else if (f == "--kill-at") {
      const std::string v = value();
      long long e = 0, st = 0;
      if (std::sscanf(v.c_str(), "%lld:%lld", &e, &st) != 2 || e < 1 || st < 0) usage("--kill-at takes E:S, not " + v);
      o.kill_epoch = static_cast<int>(e), o.kill_step = st;
    } else usage("unknown flag " + f);
  }
  if (o.model != "cnn" && o.model != "mlp") usage("--model is cnn or mlp, not " + o.model);
  if (o.grad_dtype != "fp32" && o.grad_dtype != "bf16" && o.grad_dtype != "fp16")
    usage("--grad-dtype is fp32, bf16 or fp16, not " + o.grad_dtype);
  if (!o.rejoin.empty() && !o.elastic) usage("--rejoin needs --elastic");
  return o;
}

// The models. Both end in 10 logits.
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    a = register_module("a", torch::nn::Linear(784, 256));
    b = register_module("b", torch::nn::Linear(256, 128));
    c = register_module("c", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(a(x.flatten(1)));
    return c(torch::relu(b(x)));
  }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
};
TORCH_MODULE(Mlp);

struct CnnImpl : torch::nn::Module {
  CnnImpl() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)));
    f1 = register_module("f1", torch::nn::Linear(64 * 7 * 7, 128));
    f2 = register_module("f2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    return f2(torch::relu(f1(x.flatten(1))));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::Linear f1{nullptr}, f2{nullptr};
};
TORCH_MODULE(Cnn);

// fp16 gradients: the loss is scaled so that small gradients survive the 16-bit trip; a step
// whose averaged gradients hold inf or NaN is skipped and the scale halved; after 2000 good
// steps it doubles (torch.cuda.amp.GradScaler's defaults). Every rank sees the same averages,
// so every rank decides alike without further communication.
struct LossScale {
  bool on = false;
  double scale = 65536.0;
  int good = 0;
  bool unscale_and_check(const std::vector<torch::Tensor>& params) {
    torch::NoGradGuard no_grad;
    // One test over every gradient (one host sync, not one per parameter).
    std::vector<torch::Tensor> all_finite;
    for (const auto& p : params) all_finite.push_back(p.grad().isfinite().all());
    if (!torch::stack(all_finite).all().item<bool>()) {
      scale /= 2;
      good = 0;
      return false;
    }
    for (const auto& p : params) p.grad().div_(scale);
    if (++good == 2000) scale *= 2, good = 0;
    return true;
  }
};

// The checkpoint: parameters, optimizer state, the epoch done and the loss scale. Rank 0
// writes a temporary file and renames it over the last one, so a crash never leaves half a
// checkpoint; every rank reads it on --resume (a path all of them see).
std::string checkpoint_path(const Options& o) { return o.out + "/checkpoint.pt"; }

void save_checkpoint(const Options& o, torch::nn::Module& model, torch::optim::SGD& opt, int epoch,
                     const LossScale& ls) {
  torch::serialize::OutputArchive ar;
  model.save(ar);
  torch::serialize::OutputArchive os;
  opt.save(os);
  ar.write("optimizer", os);
  ar.write("epoch", torch::tensor(static_cast<int64_t>(epoch)));
  ar.write("loss_scale", torch::tensor(ls.scale, torch::kFloat64));
  ar.write("loss_scale_good", torch::tensor(static_cast<int64_t>(ls.good)));
  const std::string path = checkpoint_path(o), tmp = path + ".tmp";
  ar.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

int load_checkpoint(const Options& o, torch::nn::Module& model, torch::optim::SGD& opt, LossScale& ls) {
  const std::string path = checkpoint_path(o);
  if (access(path.c_str(), R_OK) != 0) throw std::runtime_error("--resume: no checkpoint at " + path);
  torch::serialize::InputArchive ar;
  ar.load_from(path);
  model.load(ar);
  torch::serialize::InputArchive os;
  ar.read("optimizer", os);
  opt.load(os);
  torch::Tensor epoch, scale, good;
  ar.read("epoch", epoch);
  ar.read("loss_scale", scale);
  ar.read("loss_scale_good", good);
  ls.scale = scale.item<double>();
  ls.good = static_cast<int>(good.item<int64_t>());
  return static_cast<int>(epoch.item<int64_t>());
}

// The sum over ranks of a few doubles.
std::vector<double> sum_over_ranks(dcomm::Communicator& comm, std::vector<double> v) {
  trainer::check(comm.all_reduce(std::span<double>(v), dcomm::ReduceOp::kSum), "summing the epoch's figures");
  return v;
}

double evaluate(dcomm::Communicator& comm, torch::nn::AnyModule& model, const trainer::Split& test) {
  torch::NoGradGuard no_grad;
  const int64_t n = test.images.size(0);
  double correct = 0, count = 0;
  std::vector<int64_t> mine;
  for (int64_t i = comm.rank(); i < n; i += comm.size()) mine.push_back(i);  // every test image once
  for (size_t at = 0; at < mine.size(); at += 1000) {
    const auto idx = torch::tensor(std::vector<int64_t>(
        mine.begin() + static_cast<long>(at), mine.begin() + static_cast<long>(std::min(mine.size(), at + 1000))));
    auto logits = model.forward(test.images.index_select(0, idx));
    correct += logits.argmax(1).eq(test.labels.index_select(0, idx)).sum().item<double>();
    count += static_cast<double>(idx.size(0));
  }
  auto s = sum_over_ranks(comm, {correct, count});
  return s[0] / s[1];
}

// --log-samples: one line per applied step ("step E S LOSS i i ...": this rank's share of the
// step's loss, then its samples), or a rollback ("rollback E S": this rank had applied steps
// from S on that the survivors redo).
std::string detail_line(const char* what, int epoch, int64_t step, const std::vector<int64_t>& used, double loss = 0) {
  std::string line = std::string(what) + " " + std::to_string(epoch) + " " + std::to_string(step);
  if (std::string(what) == "step") line += " " + std::to_string(loss);
  for (int64_t i : used) line += " " + std::to_string(i);
  return line + "\n";
}
void log_samples(const Options& o, int rank, const std::string& line) {
  if (o.log_samples.empty()) return;
  std::ofstream(o.log_samples + "." + std::to_string(rank), std::ios::app) << line << std::flush;
}

// launch_rank: the rank the launcher gave this process (its --kill-rank and --log-samples name);
// joined: it was started again in a dead rank's place and joined the survivors (--rejoin).
int train_rank(const Options& o, dcomm::Communicator& first, const trainer::Split& train_all,
               const trainer::Split& test, int launch_rank, bool joined) {
  trainer::Elastic elastic(first);  // comm(): the survivors' communicator after a death (--elastic)
  const auto comm = [&]() -> dcomm::Communicator& { return elastic.comm(); };
  int rank = first.rank(), size = first.size();
  bool lead = rank == 0;
  std::shared_ptr<torch::nn::Module> net;
  torch::nn::AnyModule model;
  {
    // torch's default generator is one per process: ranks that are threads take turns, so each
    // draws its initial parameters from the seed alone (rank 0's are broadcast anyway).
    static std::mutex init;
    std::lock_guard<std::mutex> lock(init);
    torch::manual_seed(o.seed);
    if (o.model == "cnn") {
      Cnn m;
      net = m.ptr();
      model = torch::nn::AnyModule(m);
    } else {
      Mlp m;
      net = m.ptr();
      model = torch::nn::AnyModule(m);
    }
  }
  std::vector<torch::Tensor> params = net->parameters();
  torch::optim::SGD opt(params, torch::optim::SGDOptions(o.lr).momentum(o.momentum));
  const torch::Dtype wire = o.grad_dtype == "bf16"   ? torch::kBFloat16
                            : o.grad_dtype == "fp16" ? torch::kFloat16
                                                     : torch::kFloat32;
  trainer::GradSync sync(first, params, static_cast<size_t>(o.bucket_mb * (1 << 20)), wire, o.overlap);
  LossScale ls;
  ls.on = wire == torch::kFloat16;
  int first_epoch = 1;
  if (o.resume && !joined) first_epoch = load_checkpoint(o, *net, opt, ls) + 1;
  trainer::Position at;  // a process that joins starts where rank 0 stands
  if (joined) {
    trainer::share_state(first, sync, opt, params, 0, &at);
    first_epoch = static_cast<int>(at.epoch), ls.scale = at.loss_scale;
  } else {
    sync.broadcast_parameters();
  }

  const int64_t n =
      o.train_limit > 0 ? std::min<int64_t>(o.train_limit, train_all.images.size(0)) : train_all.images.size(0);
  // The global batch stays micro * first_size samples per micro-batch, however many ranks are left.
  trainer::DistributedSampler sampler(n, rank, size, o.seed);
  const int first_size = joined ? static_cast<int>(at.global_micro / o.batch) : first.size();  // the launch's
  const int64_t global_micro = static_cast<int64_t>(o.batch) * first_size;
  const int64_t micro = o.batch, per_step = micro * o.accum;
  int64_t steps = sampler.per_rank() / per_step;  // the last partial batch is dropped, alike on every rank
  if (o.steps > 0) steps = std::min(steps, o.steps);
  if (joined) steps = at.steps;
  if (lead && !o.quiet)
    std::printf(
        "# ddp_trainer: %s, %d ranks, batch %d per rank x %d accumulated (global %lld), %lld steps per epoch, "
        "gradients as %s in %zu buckets, overlap %s%s, torch threads %d\n",
        o.model.c_str(), size, o.batch, o.accum, static_cast<long long>(per_step * size), static_cast<long long>(steps),
        o.grad_dtype.c_str(), sync.buckets(), o.overlap ? "on" : "off", o.amp ? ", bf16 autocast forward" : "",
        o.threads);
  std::FILE* csv = nullptr;
  // Rank 0 writes the metrics; after a death (--elastic) the survivors' rank 0 takes the file over.
  const auto open_csv = [&](bool fresh) {
    mkdir(o.out.c_str(), 0755);
    const std::string path = o.out + "/metrics.csv";
    csv = std::fopen(path.c_str(), fresh ? "w" : "a");
    if (!csv) throw std::runtime_error("cannot write " + path);
    if (fresh) std::fprintf(csv, "epoch,loss,test_accuracy,samples_per_s,exposed_comm_share,step_ms\n");
    std::fflush(csv);  // a rank 0 that dies leaves the header for the next
  };
  if (lead) open_csv(!o.resume);
  const bool tty = isatty(1);
  for (int epoch = first_epoch; epoch <= o.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const auto order = sampler.global_order();
    double loss_sum = 0, exposed = 0, step_time = 0;
    const auto t_epoch = Clock::now();
    for (int64_t s = joined && epoch == first_epoch ? at.step : 0; s < steps; ++s) {
      const auto t_step = Clock::now();
      std::vector<int64_t> used;
      double step_loss = 0;  // this rank's share: the ranks' shares average to the step's loss
      // The tests' death: before this rank's gradients of step s leave, so no survivor can finish it.
      if (launch_rank == o.kill_rank && !joined && epoch == o.kill_epoch && s == o.kill_step) raise(SIGKILL);
      try {
        for (int k = 0; k < o.accum; ++k) {
          // Micro-batch k of step s is positions base .. base + global_micro of the epoch's order;
          // this rank takes every size-th from its rank (the sampler's shard while no rank is lost).
          std::vector<int64_t> mine;
          const int64_t base = (s * o.accum + k) * global_micro;
          for (int64_t p = base + rank; p < base + global_micro; p += size)
            mine.push_back(order[static_cast<size_t>(p)]);
          used.insert(used.end(), mine.begin(), mine.end());
          const auto batch = torch::tensor(mine);
          // Each sample weighs 1/global_micro in the average over ranks (exactly the mean while
          // every rank takes micro samples).
          const double weight = static_cast<double>(mine.size()) * size / static_cast<double>(global_micro);
          auto x = train_all.images.index_select(0, batch), y = train_all.labels.index_select(0, batch);
          torch::Tensor logits;
          {
            at::autocast::set_cpu_enabled(o.amp);
            if (o.amp) at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
            logits = model.forward(x);
            at::autocast::set_cpu_enabled(false);
            if (o.amp) at::autocast::clear_cache();
          }
          auto loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), y) * weight / o.accum;
          step_loss += loss.item<double>();
          sync.begin(/*sync=*/k == o.accum - 1);
          (ls.on ? loss * ls.scale : loss).backward();
        }
        exposed += sync.finish();
        if (!ls.on || ls.unscale_and_check(params)) opt.step();
        opt.zero_grad();
      } catch (const std::exception& e) {
        if (!o.elastic) throw;
        opt.zero_grad();
        const int64_t redo = elastic.recover(s, sync, opt, params, e.what());
        if (redo < s) log_samples(o, launch_rank, detail_line("rollback", epoch, redo, {}));
        if (!o.rejoin.empty())
          elastic.grow_back(o.rejoin, launch_rank, {epoch, redo, steps, global_micro, ls.scale}, sync, opt, params,
                            first_size);
        rank = comm().rank(), size = comm().size(), lead = rank == 0;
        s = redo - 1;
        continue;
      }
      loss_sum += step_loss;
      if (!o.log_samples.empty()) log_samples(o, launch_rank, detail_line("step", epoch, s, used, step_loss));
      step_time += seconds_since(t_step);
      if (lead && !o.quiet && (tty ? s % 10 == 9 || s + 1 == steps : (s + 1) % std::max<int64_t>(1, steps / 4) == 0))
        std::printf(tty ? "\r  epoch %d  step %lld/%lld  loss %.4f   " : "  epoch %d  step %lld/%lld  loss %.4f\n",
                    epoch, static_cast<long long>(s + 1), static_cast<long long>(steps),
                    loss_sum / static_cast<double>(s + 1));
      std::fflush(stdout);
    }
    const double took = seconds_since(t_epoch);
    if (lead && !o.quiet && tty) std::printf("\n");
    const double acc = evaluate(comm(), model, test);
    auto figs =
        sum_over_ranks(comm(), {loss_sum / std::max<double>(1, static_cast<double>(steps)), exposed, step_time, took});
    const double samples_per_s = static_cast<double>(steps * per_step * size) / (figs[3] / size);
    const double share = figs[2] > 0 ? figs[1] / figs[2] : 0;
    const double step_ms = 1e3 * figs[2] / size / std::max<double>(1, static_cast<double>(steps));
    if (lead) {
      if (!o.quiet)
        std::printf(
            "epoch %d  loss %.4f  test accuracy %.2f%%  %.0f samples/s  exposed communication %.1f%% of step time  "
            "(%.2f ms per step)\n",
            epoch, figs[0] / size, 100 * acc, samples_per_s, 100 * share, step_ms);
      if (!csv) open_csv(false);
      std::fprintf(csv, "%d,%.6f,%.6f,%.1f,%.5f,%.4f\n", epoch, figs[0] / size, acc, samples_per_s, share, step_ms);
      std::fflush(csv);
      save_checkpoint(o, *net, opt, epoch, ls);
    }
    trainer::check(comm().barrier(), "the end of the epoch");  // the checkpoint is written before anyone stops
    if (o.stop_after == epoch) break;
  }
  if (csv) std::fclose(csv);
  if (lead && !o.dump_params.empty()) {
    std::ofstream f(o.dump_params, std::ios::binary);
    for (const auto& p : params) {
      auto c = p.detach().contiguous();
      f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * 4));
    }
    if (!f) throw std::runtime_error("cannot write " + o.dump_params);
  }
  return 0;
}

int run(const Options& o, dcomm::Communicator& comm, const trainer::Split& train, const trainer::Split& test,
        int launch_rank, bool joined = false) {
  try {
    torch::set_num_threads(o.threads);
    return train_rank(o, comm, train, test, launch_rank, joined);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_trainer: rank %d: %s\n", comm.rank(), e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  // Started plainly (no launcher's variables): one rank.
  if (o.local_ranks == 0 && !std::getenv("RANK") && !std::getenv("OMPI_COMM_WORLD_RANK") &&
      !std::getenv("SLURM_PROCID"))
    o.local_ranks = 1;
  trainer::Split train, test;
  try {
    train = trainer::load_fashion_mnist(o.data, "train");
    test = trainer::load_fashion_mnist(o.data, "t10k");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_trainer: %s\n", e.what());
    return 1;
  }
  if (o.local_ranks > 0) {
    auto comms = dcomm::Communicator::create_local(o.local_ranks);
    if (!comms.ok()) return std::fprintf(stderr, "ddp_trainer: %s\n", comms.status().message().c_str()), 1;
    std::vector<int> codes(comms->size());
    std::vector<std::thread> ranks;
    for (size_t r = 0; r < comms->size(); ++r)
      ranks.emplace_back([&, r] { codes[r] = run(o, *(*comms)[r], train, test, static_cast<int>(r)); });
    for (auto& t : ranks) t.join();
    for (int c : codes)
      if (c) return c;
    return 0;
  }
  const int launch_rank = std::getenv("RANK") ? std::atoi(std::getenv("RANK")) : -1;
  // Started again in a dead rank's place (dcomm-run --max-restarts): join the survivors.
  if (const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
      !o.rejoin.empty() && restarts && std::atoi(restarts) > 0) {
    try {
      auto joined = trainer::rejoin(o.rejoin, launch_rank, std::chrono::seconds(60));
      return run(o, *joined, train, test, launch_rank, /*joined=*/true);
    } catch (const std::exception& e) {
      return std::fprintf(stderr, "ddp_trainer: launch rank %d: %s\n", launch_rank, e.what()), 1;
    }
  }
  auto comm = dcomm::Communicator::from_env();
  if (!comm.ok()) return std::fprintf(stderr, "ddp_trainer: %s\n", comm.status().message().c_str()), 1;
  return run(o, **comm, train, test, launch_rank >= 0 ? launch_rank : (*comm)->rank());
}
