// DCOMM_* values and the launchers' variables: "NAME=value" lines become the environment the
// settings parsers read (through EnvTable, leaving the process's own alone).
#include <cstdint>
#include <map>
#include <sstream>
#include <string>

#include <dcomm/bootstrap/launcher.hpp>
#include <dcomm/bootstrap/store_protocol.hpp>
#include <dcomm/core/env.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> env;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  env.erase("DCOMM_SECRET_FILE");  // names a file to read: not the parser's input
  EnvTable scope(env);
  (void)Config::from_env();
  (void)StoreLimits::from_env();
  (void)JobSecret::from_env();
  (void)detect_launch();
  (void)parse_algo(env_or("DCOMM_ALGO"));
  (void)parse_size(env_or("DCOMM_SLOT_BYTES", "1"), "DCOMM_SLOT_BYTES");
  return 0;
}
