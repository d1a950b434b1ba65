// Unique id text (DCOMM_UNIQUE_ID, what one rank hands the others) and host:port addresses.
#include <cstdint>
#include <string>

#include <dcomm/bootstrap/launcher.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto id = UniqueId::parse(text);
  if (id.ok() && UniqueId::parse(id->to_string()).ok() == false) __builtin_trap();  // what parses, round-trips
  (void)parse_address(text);
  return 0;
}
