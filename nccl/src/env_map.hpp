// The NCCL variables users already set, mapped onto dcomm's when the library loads: each
// NCCL_X with an equivalent sets DCOMM_Y unless DCOMM_Y is set (dcomm's own wins); an NCCL
// variable with no equivalent is named once in the log at INFO. docs/nccl.md lists them.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dcomm/core/log.hpp>

extern char** environ;

namespace dcomm_nccl {

struct EnvMapping {
  const char* nccl;
  const char* dcomm;
  // NCCL's value in dcomm's terms; empty: no equivalent for this value (logged, not set).
  std::string (*translate)(const std::string&);
};

inline std::string same(const std::string& v) { return v; }

// NCCL_DEBUG: VERSION, WARN, INFO, ABORT, TRACE; dcomm has NONE, WARN, INFO, TRACE.
inline std::string debug_level(const std::string& v) {
  if (v == "VERSION" || v == "ABORT") return "WARN";
  if (v == "WARN" || v == "INFO" || v == "TRACE" || v == "NONE") return v;
  return "";
}

// The first plain entry of an NCCL interface or device list ("=eth0", "eth0,eth1",
// "mlx5_0:1,mlx5_1"): dcomm takes one name. An exclusion list ("^docker") has no equivalent.
inline std::string first_name(const std::string& v) {
  if (v.empty() || v[0] == '^') return "";
  std::string s = v[0] == '=' ? v.substr(1) : v;
  return s.substr(0, s.find(','));
}

// NCCL_ALGO: "Ring", "Tree", "allreduce:tree;broadcast:ring", ... (case-insensitive): Ring is
// dcomm's ring, Tree its double binary tree (all_reduce only); the rest have no equivalent.
inline std::string algo(const std::string& v) {
  if (v.empty() || v[0] == '^') return "";
  std::string out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t end = v.find_first_of(";", start);
    if (end == std::string::npos) end = v.size();
    std::string entry = v.substr(start, end - start);
    start = end + 1;
    std::string coll;
    if (size_t colon = entry.find(':'); colon != std::string::npos)
      coll = entry.substr(0, colon), entry = entry.substr(colon + 1);
    for (char& c : coll) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : entry) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    entry = entry.substr(0, entry.find(','));  // NCCL allows a list; dcomm forces one
    static const struct {
      const char* nccl;
      const char* dcomm;
    } kColls[] = {{"allreduce", "all_reduce"},
                  {"reducescatter", "reduce_scatter"},
                  {"allgather", "all_gather"},
                  {"broadcast", "broadcast"},
                  {"reduce", "reduce"}};
    std::string dcoll;
    for (const auto& c : kColls)
      if (coll == c.nccl) dcoll = c.dcomm;
    if (!coll.empty() && dcoll.empty()) return "";
    std::string name = entry == "ring" ? "ring" : entry == "tree" ? "double_tree" : "";
    if (name.empty()) return "";
    if (name == "double_tree") dcoll = "all_reduce";
    out += (out.empty() ? "" : ";") + (dcoll.empty() ? name : dcoll + ":" + name);
  }
  return out;
}

// One mapping a line.
// clang-format off
inline const EnvMapping kEnvMappings[] = {
    {"NCCL_DEBUG", "DCOMM_DEBUG", debug_level},
    {"NCCL_DEBUG_SUBSYS", "DCOMM_DEBUG_SUBSYS", same},
    {"NCCL_DEBUG_FILE", "DCOMM_DEBUG_FILE", same},
    {"NCCL_SOCKET_IFNAME", "DCOMM_SOCKET_IFNAME", first_name},
    {"NCCL_IB_HCA", "DCOMM_IB_HCA", first_name},
    {"NCCL_IB_GID_INDEX", "DCOMM_IB_GID_INDEX", same},
    {"NCCL_IB_TIMEOUT", "DCOMM_IB_TIMEOUT", same},
    {"NCCL_ALGO", "DCOMM_ALGO", algo},
    {"NCCL_COMM_ID", "DCOMM_COMM_ID", same},
    {"NCCL_P2P_DISABLE", "DCOMM_CUDA_P2P_DISABLE", same},
};
// clang-format on

// Applies the mappings to this process's environment; returns what to log (the logger reads
// DCOMM_DEBUG once, so the lines are written after the mapping).
inline std::vector<std::string> map_nccl_environment() {
  std::vector<std::string> lines;
  for (const EnvMapping& m : kEnvMappings) {
    const char* v = std::getenv(m.nccl);
    if (!v) continue;
    if (std::getenv(m.dcomm)) {
      lines.push_back(std::string(m.nccl) + " is set but " + m.dcomm + " wins");
      continue;
    }
    std::string t = m.translate(v);
    if (t.empty()) {
      lines.push_back(std::string(m.nccl) + "='" + v + "' has no dcomm equivalent; ignored");
      continue;
    }
    setenv(m.dcomm, t.c_str(), 0);
    lines.push_back(std::string(m.nccl) + "='" + v + "' taken as " + m.dcomm + "='" + t + "'");
  }
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "NCCL_", 5) != 0) continue;
    std::string name(*e, std::strcspn(*e, "="));
    bool known = false;
    for (const EnvMapping& m : kEnvMappings) known = known || name == m.nccl;
    if (!known) lines.push_back(name + " has no dcomm equivalent; ignored");
  }
  return lines;
}

}  // namespace dcomm_nccl
