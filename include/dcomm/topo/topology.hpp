// What a host is made of, for ordering ranks and for the cost model: NUMA nodes, packages,
// cores, and the GPUs and NICs with the PCI path from their host bridge down to them. Read
// from hwloc (topo/hwloc_detect.hpp, when built with it: target dcomm::topo) or from a JSON
// file in the format to_json() writes, so that a cluster's host can be described and tested
// on any machine:
//
//   DCOMM_TOPO_FILE=f       use f instead of detecting
//   DCOMM_TOPO_DUMP_FILE=f  write what was detected (or loaded) to f
//
// How two devices connect, as `nvidia-smi topo -m` says it: X (itself), PIX (through one PCIe
// switch), PXB (through several PCIe bridges, not the host bridge), PHB (through the host
// bridge), NODE (between host bridges of one NUMA node), SYS (across NUMA nodes). NVLink is
// not visible to hwloc; it comes with the CUDA path.
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/json.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

struct TopoDevice {
  std::string kind;    // "gpu" or "nic"
  std::string name;    // "cuda0", "eth0", "mlx5_0"
  std::string bus_id;  // PCI address, "0000:3b:00.0"
  int numa = -1;       // NUMA node it is attached to
  // The bridges above it, from its host bridge ("hostbridge<N>") down to its parent switch.
  std::vector<std::string> path;
};

enum class PathType { kSelf, kPix, kPxb, kPhb, kNode, kSys };

inline const char* to_string(PathType t) {
  switch (t) {
    case PathType::kSelf: return "X";
    case PathType::kPix: return "PIX";
    case PathType::kPxb: return "PXB";
    case PathType::kPhb: return "PHB";
    case PathType::kNode: return "NODE";
    case PathType::kSys: return "SYS";
  }
  return "?";
}

inline PathType path_between(const TopoDevice& a, const TopoDevice& b) {
  if (&a == &b || (a.bus_id == b.bus_id && a.name == b.name)) return PathType::kSelf;
  if (a.numa != b.numa) return PathType::kSys;
  if (a.path.empty() || b.path.empty() || a.path[0] != b.path[0]) return PathType::kNode;
  size_t common = 0;
  while (common < a.path.size() && common < b.path.size() && a.path[common] == b.path[common]) ++common;
  if (common == 1) return PathType::kPhb;  // only the host bridge in common
  // Sharing the switch right above both of them is PIX; sharing one further up is PXB.
  return common == a.path.size() && common == b.path.size() ? PathType::kPix : PathType::kPxb;
}

struct Topology {
  std::string host;
  int numa_nodes = 1, packages = 1, cores = 1, pus = 1;
  std::vector<TopoDevice> devices;
  std::string source;  // "hwloc" or the file it came from

  std::string to_json() const {
    std::ostringstream o;
    o << "{\n  \"host\": " << detail::json_string(host) << ",\n  \"numa_nodes\": " << numa_nodes
      << ",\n  \"packages\": " << packages << ",\n  \"cores\": " << cores << ",\n  \"pus\": " << pus
      << ",\n  \"devices\": [";
    for (size_t i = 0; i < devices.size(); ++i) {
      const auto& d = devices[i];
      o << (i ? "," : "") << "\n    {\"kind\": " << detail::json_string(d.kind)
        << ", \"name\": " << detail::json_string(d.name) << ", \"bus_id\": " << detail::json_string(d.bus_id)
        << ", \"numa\": " << d.numa << ", \"path\": [";
      for (size_t k = 0; k < d.path.size(); ++k) o << (k ? ", " : "") << detail::json_string(d.path[k]);
      o << "]}";
    }
    o << (devices.empty() ? "" : "\n  ") << "]\n}\n";
    return o.str();
  }

  static Result<Topology> from_json(const std::string& text, const std::string& source) {
    auto parsed = detail::JsonParser(text).parse();
    if (!parsed.ok()) return parsed.status().with_context(source);
    const detail::Json& j = *parsed;
    if (j.kind != detail::Json::kObject) return invalid_argument(source, ": the topology is not a JSON object");
    Topology t;
    t.source = source;
    auto number = [&](const detail::Json& obj, const char* key, int& out) -> Status {
      if (const auto* v = obj.get(key)) {
        if (v->kind != detail::Json::kNumber) return invalid_argument(source, ": '", key, "' is not a number");
        out = static_cast<int>(v->number);
      }
      return {};
    };
    auto string = [&](const detail::Json& obj, const char* key, std::string& out) -> Status {
      if (const auto* v = obj.get(key)) {
        if (v->kind != detail::Json::kString) return invalid_argument(source, ": '", key, "' is not a string");
        out = v->text;
      }
      return {};
    };
    DCOMM_RETURN_IF_ERROR(string(j, "host", t.host));
    for (auto [key, out] : {std::pair{"numa_nodes", &t.numa_nodes}, std::pair{"packages", &t.packages},
                            std::pair{"cores", &t.cores}, std::pair{"pus", &t.pus}})
      DCOMM_RETURN_IF_ERROR(number(j, key, *out));
    if (const auto* devs = j.get("devices")) {
      if (devs->kind != detail::Json::kArray) return invalid_argument(source, ": 'devices' is not an array");
      for (const auto& dj : devs->items) {
        TopoDevice d;
        DCOMM_RETURN_IF_ERROR(string(dj, "kind", d.kind));
        DCOMM_RETURN_IF_ERROR(string(dj, "name", d.name));
        DCOMM_RETURN_IF_ERROR(string(dj, "bus_id", d.bus_id));
        DCOMM_RETURN_IF_ERROR(number(dj, "numa", d.numa));
        if (d.kind != "gpu" && d.kind != "nic")
          return invalid_argument(source, ": device '", d.name, "' has kind '", d.kind, "' (gpu or nic)");
        if (const auto* p = dj.get("path"))
          for (const auto& b : p->items) d.path.push_back(b.text);
        t.devices.push_back(std::move(d));
      }
    }
    return t;
  }

  // The matrix of `nvidia-smi topo -m`: every pair of devices, then each device's NUMA node.
  std::string matrix() const {
    std::ostringstream o;
    auto cell = [&](const std::string& s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%-9s", s.c_str());
      o << buf;
    };
    cell("");
    for (const auto& d : devices) cell(d.name);
    cell("NUMA");
    o << "\n";
    for (const auto& a : devices) {
      cell(a.name);
      for (const auto& b : devices) cell(to_string(path_between(a, b)));
      cell(a.numa < 0 ? "N/A" : std::to_string(a.numa));
      o << "\n";
    }
    o << "\n"
      << host << ": " << numa_nodes << " NUMA node(s), " << packages << " package(s), " << cores << " core(s), " << pus
      << " hardware thread(s); from " << source << "\n"
      << "Legend: X = self; PIX = one PCIe switch; PXB = several PCIe bridges (not the host bridge); "
         "PHB = through the host bridge; NODE = between host bridges of one NUMA node; SYS = across NUMA nodes\n";
    return o.str();
  }
};

inline Result<Topology> detect_topology();  // topo/hwloc_detect.hpp, when built with hwloc

// DCOMM_TOPO_FILE, else detection; then DCOMM_TOPO_DUMP_FILE.
inline Result<Topology> load_topology() {
  Result<Topology> t = Topology{};
  if (std::string file = env_or("DCOMM_TOPO_FILE"); !file.empty()) {
    std::ifstream in(file);
    if (!in) return invalid_argument("DCOMM_TOPO_FILE=", file, ": cannot read it");
    std::stringstream ss;
    ss << in.rdbuf();
    t = Topology::from_json(ss.str(), "DCOMM_TOPO_FILE=" + file);
  } else {
#if DCOMM_HAS_HWLOC
    t = detect_topology();
#else
    return make_error(ErrorCode::kUnsupported,
                      "topology detection needs hwloc (link dcomm::topo); or set DCOMM_TOPO_FILE");
#endif
  }
  if (!t.ok()) return t;
  if (std::string dump = env_or("DCOMM_TOPO_DUMP_FILE"); !dump.empty()) {
    std::ofstream out(dump);
    if (!(out << t->to_json())) return invalid_argument("DCOMM_TOPO_DUMP_FILE=", dump, ": cannot write it");
  }
  return t;
}

DCOMM_NAMESPACE_END

#if DCOMM_HAS_HWLOC
#include "dcomm/topo/hwloc_detect.hpp"
#endif
