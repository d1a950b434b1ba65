// The device communicator behind plain functions (include/dcomm/adapter/device_glue.hpp), so
// that the torch code of the CUDA path compiles with the host compiler.
#pragma once

#include <dcomm/adapter/device_glue.hpp>

namespace dcomm_torch {
using dcomm::adapter::DeviceHandle;
using namespace dcomm::adapter;
}  // namespace dcomm_torch
