// Topology detection with hwloc (libhwloc-dev): counts of NUMA nodes, packages, cores and
// hardware threads, and the GPUs and NICs hwloc's I/O discovery finds, each with its PCI
// address, NUMA node and the bridges above it. Included by topo/topology.hpp when the build
// defines DCOMM_HAS_HWLOC (CMake target dcomm::topo).
#pragma once

#include <hwloc.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/topo/topology.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
inline std::string pci_address(const hwloc_obj_t pci) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return buf;
}
}  // namespace detail

inline Result<Topology> detect_topology() {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return make_error(ErrorCode::kSystemError, "hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return make_error(ErrorCode::kSystemError, "hwloc_topology_load failed");
  }
  Topology t;
  t.source = "hwloc";
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  t.host = host;
  auto count = [&](hwloc_obj_type_t type) { return std::max(1, hwloc_get_nbobjs_by_type(topo, type)); };
  t.numa_nodes = count(HWLOC_OBJ_NUMANODE);
  t.packages = count(HWLOC_OBJ_PACKAGE);
  t.cores = count(HWLOC_OBJ_CORE);
  t.pus = count(HWLOC_OBJ_PU);
  for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os; os = hwloc_get_next_osdev(topo, os)) {
    const auto type = os->attr->osdev.type;
    const bool gpu = type == HWLOC_OBJ_OSDEV_COPROC || type == HWLOC_OBJ_OSDEV_GPU;
    const bool nic = type == HWLOC_OBJ_OSDEV_NETWORK || type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    if (!gpu && !nic) continue;
    TopoDevice d;
    d.kind = gpu ? "gpu" : "nic";
    d.name = os->name ? os->name : "?";
    // Bridges from the device up to its host bridge; recorded top down.
    std::vector<std::string> up;
    for (hwloc_obj_t p = os->parent; p; p = p->parent) {
      if (p->type == HWLOC_OBJ_PCI_DEVICE && d.bus_id.empty()) d.bus_id = detail::pci_address(p);
      if (p->type == HWLOC_OBJ_BRIDGE) {
        if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
          up.push_back("hostbridge" + std::to_string(p->logical_index));
        else up.push_back(detail::pci_address(p));
      }
      if (!hwloc_obj_type_is_io(p->type)) break;  // reached the CPU side
    }
    d.path.assign(up.rbegin(), up.rend());
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, os);
    if (cpu_side && cpu_side->nodeset) {
      int node = hwloc_bitmap_first(cpu_side->nodeset);
      d.numa = node < 0 ? 0 : node;
    }
    t.devices.push_back(std::move(d));
  }
  hwloc_topology_destroy(topo);
  return t;
}

DCOMM_NAMESPACE_END
