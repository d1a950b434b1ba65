// dcomm: collective communication on host memory (and, with dcomm.cuh, device memory).
//
//   #include <dcomm/dcomm.hpp>
//   auto comm = dcomm::Communicator::from_env();   // torchrun, mpirun or srun
//   if (!comm.ok()) { /* comm.status().message() says why */ }
//   (*comm)->all_reduce(std::span(grads), dcomm::ReduceOp::kAvg);
#pragma once

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"
#include "dcomm/core/half.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/bootstrap/launcher.hpp"
#include "dcomm/comm/communicator.hpp"
