// dcomm with its CUDA device path; include from .cu files compiled by nvcc (CMake: link
// dcomm::cuda). Everything of dcomm.hpp, plus:
//   dcomm::DeviceCommunicator   collectives and send/recv on device memory, stream-ordered
//   dcomm::reduce_on_device     the reduction kernels (every type and op, fp8 included)
//   dcomm::copy_on_device
//   dcomm::DeviceOneSided       one-sided windows on device memory (put, signal, wait, peer pointers)
//
//   auto host = dcomm::Communicator::from_env();
//   auto dev = dcomm::DeviceCommunicator::create(**host, local_gpu);
//   (*dev)->all_reduce(buf, buf, n, dcomm::DataType::kBfloat16, dcomm::ReduceOp::kSum, stream);
#pragma once

#if !defined(__CUDACC__)
#error "dcomm/dcomm.cuh needs nvcc; host code includes dcomm/dcomm.hpp"
#endif

#include "dcomm/dcomm.hpp"
#include "dcomm/comm/device_comm.cuh"
#include "dcomm/comm/device_one_sided.cuh"
#include "dcomm/reduce/kernels.cuh"
