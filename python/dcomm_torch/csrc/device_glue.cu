// The device glue's definitions (include/dcomm/adapter/device_glue_impl.cuh), built by nvcc.
#include <dcomm/adapter/device_glue_impl.cuh>
