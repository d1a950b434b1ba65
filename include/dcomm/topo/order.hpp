// The order ranks take in rings, chains and trees, built from where each rank sits: its host,
// the NUMA node its CPUs are on, and (for a rank driving a device) the PCI path to that device
// from the host's topology. Every rank publishes its place at init and computes the same order
// from the same facts.
//
// The order groups ranks by host (hosts in order of their first rank), then by NUMA node,
// then by device path (devices under one PCIe switch next to each other), then by rank. A ring
// in that order crosses between hosts once per host and between NUMA nodes once per node; the
// trees (algo/tree.hpp) cover contiguous ranges of it, so their subtrees stay local.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sched.h>
#include <string>
#include <tuple>
#include <vector>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

struct RankPlace {
  int host = 0;   // hosts numbered in order of their first rank
  int numa = -1;  // NUMA node of the rank's CPUs; -1: unknown
  // The rank's device (a GPU), as the topology places it: the bridges above it and its PCI
  // address. Empty for a rank without one.
  std::vector<std::string> path;
  std::string bus_id;
};

// Position -> rank. The identity when ranks are already grouped that way.
inline std::vector<int> ring_order(const std::vector<RankPlace>& places) {
  std::vector<int> order(places.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const RankPlace &x = places[static_cast<size_t>(a)], &y = places[static_cast<size_t>(b)];
    return std::tie(x.host, x.numa, x.path, x.bus_id) < std::tie(y.host, y.numa, y.path, y.bus_id);
  });
  return order;
}

// Rank -> position, the inverse of an order.
inline std::vector<int> positions_of(const std::vector<int>& order) {
  std::vector<int> pos(order.size());
  for (size_t p = 0; p < order.size(); ++p) pos[static_cast<size_t>(order[p])] = static_cast<int>(p);
  return pos;
}

namespace detail {
// The numbers in a Linux list such as "0-3,8,10-11" (sysfs cpulists and node lists).
inline std::vector<int> parse_id_list(const std::string& list) {
  std::vector<int> ids;
  const char* s = list.c_str();
  for (;;) {
    int lo = 0, hi = 0, used = 0;
    if (std::sscanf(s, "%d-%d%n", &lo, &hi, &used) == 2) s += used;
    else if (std::sscanf(s, "%d%n", &lo, &used) == 1) hi = lo, s += used;
    else break;
    for (int i = lo; i <= hi && i - lo < (1 << 16); ++i) ids.push_back(i);
    if (*s != ',') break;
    ++s;
  }
  return ids;
}
inline std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}
// A PCI address as sysfs names it: lower case, a 4-digit domain (CUDA gives 8 digits).
inline std::string sysfs_pci_address(std::string id) {
  for (char& ch : id) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const size_t colon = id.find(':');
  if (colon != std::string::npos && colon > 4 && id.find(':', colon + 1) != std::string::npos) id.erase(0, colon - 4);
  return id;
}
}  // namespace detail

// Places a rank at the PCI device `address` (its GPU) as the kernel sees it under `sysfs`: the
// bridges above it (from the device's canonical sysfs path, /sys/devices/pci0000:00/...), its
// address and its NUMA node when the kernel knows one. False when sysfs has no such device.
inline bool place_at_pci_device(const std::string& address, RankPlace& place, const std::string& sysfs = "/sys") {
  const std::string id = detail::sysfs_pci_address(address);
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(sysfs + "/bus/pci/devices/" + id, ec);
  const std::filesystem::path devices = std::filesystem::canonical(sysfs + "/devices", ec);
  if (ec || id.empty() || real.filename() != id) return false;
  std::vector<std::string> path;
  for (const auto& part : real.lexically_relative(devices)) path.push_back(part.string());
  if (path.empty() || path.front() == "..") return false;
  path.pop_back();
  place.path = std::move(path);
  place.bus_id = id;
  const std::string node = detail::first_line(real.string() + "/numa_node");
  if (!node.empty() && std::atoi(node.c_str()) >= 0) place.numa = std::atoi(node.c_str());
  return true;
}

// The NUMA node holding most of the CPUs this thread may run on (from sysfs); -1 when the
// kernel does not say.
inline int numa_node_of_this_thread() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) return -1;
  int best = -1, best_count = 0;
  const std::string root = "/sys/devices/system/node/";
  for (int node : detail::parse_id_list(detail::first_line(root + "online"))) {
    int count = 0;
    for (int cpu : detail::parse_id_list(detail::first_line(root + "node" + std::to_string(node) + "/cpulist")))
      count += cpu < CPU_SETSIZE && CPU_ISSET(cpu, &cpus) ? 1 : 0;
    if (count > best_count) best = node, best_count = count;
  }
  return best;
}

DCOMM_NAMESPACE_END
