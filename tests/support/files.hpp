// Small file helpers for tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace dcomm_test {
// The whole file, or "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace dcomm_test
