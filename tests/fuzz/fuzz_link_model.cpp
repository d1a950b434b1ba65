// The link model file (DCOMM_LINK_MODEL_FILE): one line of four numbers.
#include <cmath>
#include <cstdint>
#include <string>

#include <dcomm/comm/cost_model.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = parse_link_model(std::string(reinterpret_cast<const char*>(data), size));
  if (f) {
    for (double v : {f->load, f->alpha_us, f->beta_us_per_byte, f->gamma_us_per_byte})
      if (!std::isfinite(v) || v <= 0) __builtin_trap();
    auto again = parse_link_model(format_link_model(*f));
    if (!again) __builtin_trap();
  }
  return 0;
}
