// The smallest dcomm program: every rank contributes a vector, all_reduce averages it.
//
//   mpirun -np 4 ./allreduce_example
//   torchrun --nproc-per-node 4 ./allreduce_example          (torchrun runs any executable)
//   DCOMM_RANK=0 DCOMM_WORLD_SIZE=2 DCOMM_COMM_ID=127.0.0.1:29555 ./allreduce_example & \
//   DCOMM_RANK=1 DCOMM_WORLD_SIZE=2 DCOMM_COMM_ID=127.0.0.1:29555 ./allreduce_example
#include <dcomm/dcomm.hpp>

#include <cstdio>
#include <vector>

int main() {
  auto comm = dcomm::Communicator::from_env();
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().message().c_str());
    return 1;
  }
  dcomm::Communicator& c = **comm;
  std::vector<float> grads(1 << 20, static_cast<float>(c.rank()));
  dcomm::Status s = c.all_reduce(std::span(grads), dcomm::ReduceOp::kAvg);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  // The average of 0, 1, ..., n-1.
  std::printf("rank %d of %d: grads[0] = %g (expected %g)\n", c.rank(), c.size(), grads[0], (c.size() - 1) / 2.0);
  return grads[0] == static_cast<float>((c.size() - 1) / 2.0) ? 0 : 1;
}
