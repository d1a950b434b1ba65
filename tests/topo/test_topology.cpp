#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <dcomm/topo/order.hpp>
#include <dcomm/topo/topology.hpp>

#include "support/files.hpp"

using namespace dcomm;

namespace {
// A host like a DGX: two NUMA nodes, a host bridge each, two PCIe switches under each holding a
// GPU and a NIC, and a fifth NIC straight on the second host bridge.
const char* kDgxLike = R"({
  "host": "node17", "numa_nodes": 2, "packages": 2, "cores": 64, "pus": 128,
  "devices": [
    {"kind": "gpu", "name": "cuda0", "bus_id": "0000:07:00.0", "numa": 0, "path": ["hostbridge0", "0000:03:00.0", "0000:04:00.0"]},
    {"kind": "nic", "name": "mlx5_0", "bus_id": "0000:08:00.0", "numa": 0, "path": ["hostbridge0", "0000:03:00.0", "0000:04:00.0"]},
    {"kind": "gpu", "name": "cuda1", "bus_id": "0000:0f:00.0", "numa": 0, "path": ["hostbridge0", "0000:03:00.0", "0000:0c:00.0"]},
    {"kind": "gpu", "name": "cuda2", "bus_id": "0000:47:00.0", "numa": 0, "path": ["hostbridge1", "0000:43:00.0"]},
    {"kind": "gpu", "name": "cuda3", "bus_id": "0000:87:00.0", "numa": 1, "path": ["hostbridge2", "0000:83:00.0"]},
    {"kind": "nic", "name": "eth0", "bus_id": "0000:c1:00.0", "numa": 1, "path": ["hostbridge2"]}
  ]
})";

using dcomm_test::read_file;
}  // namespace

TEST_CASE("topology file: every kind of path between devices, as nvidia-smi topo -m names them") {
  auto t = Topology::from_json(kDgxLike, "test");
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  REQUIRE(t->devices.size() == 6);
  const auto& d = t->devices;
  CHECK(path_between(d[0], d[0]) == PathType::kSelf);
  CHECK(path_between(d[0], d[1]) == PathType::kPix);   // the same switch
  CHECK(path_between(d[0], d[2]) == PathType::kPxb);   // switches under one upstream bridge
  CHECK(path_between(d[0], d[3]) == PathType::kNode);  // two host bridges of NUMA node 0
  CHECK(path_between(d[2], d[3]) == PathType::kNode);
  CHECK(path_between(d[3], d[4]) == PathType::kSys);  // across NUMA nodes
  CHECK(path_between(d[4], d[5]) == PathType::kPhb);  // only the host bridge in common
  CHECK(path_between(d[1], d[0]) == path_between(d[0], d[1]));
  std::string m = t->matrix();
  CHECK(m.find("cuda0    X        PIX      PXB      NODE     SYS      SYS      0") != std::string::npos);
  CHECK(m.find("node17: 2 NUMA node(s), 2 package(s), 64 core(s), 128 hardware thread(s)") != std::string::npos);
  CHECK(m.find("Legend") != std::string::npos);
}

namespace {
// The DGX-like host's GPUs as the kernel shows them under a sysfs root: each device's directory
// under devices/ below its host bridge and switches, with its NUMA node, and bus/pci/devices/
// linking to it.
std::string fake_sysfs(const dcomm_test::TempDir& dir) {
  namespace fs = std::filesystem;
  const std::string root = dir.path() + "/sys";
  const struct {
    const char* bus_id;
    int numa;
    const char* below;
  } gpus[] = {{"0000:07:00.0", 0, "pci0000:00/0000:03:00.0/0000:04:00.0"},
              {"0000:0f:00.0", 0, "pci0000:00/0000:03:00.0/0000:0c:00.0"},
              {"0000:47:00.0", 0, "pci0000:40/0000:43:00.0"},
              {"0000:87:00.0", 1, "pci0000:80/0000:83:00.0"}};
  fs::create_directories(root + "/bus/pci/devices");
  for (const auto& g : gpus) {
    const std::string at = root + "/devices/" + g.below + "/" + g.bus_id;
    fs::create_directories(at);
    std::ofstream(at + "/numa_node") << g.numa << "\n";
    fs::create_directory_symlink("../../../devices/" + std::string(g.below) + "/" + g.bus_id,
                                 root + "/bus/pci/devices/" + g.bus_id);
  }
  return root;
}
}  // namespace

// Ranks on the DGX-like host's GPUs, given out of order (CUDA's spelling of an address too): the
// ring order puts GPUs under one PCIe switch side by side and crosses NUMA nodes once; hosts
// come first.
TEST_CASE("ring order from the PCI tree: host, NUMA node, PCIe path") {
  dcomm_test::TempDir dir;
  const std::string sysfs = fake_sysfs(dir);
  const std::vector<std::string> gpu_of_rank = {"0000:87:00.0", "00000000:07:00.0", "0000:47:00.0", "0000:0F:00.0"};
  std::vector<RankPlace> places(8);
  for (int r = 0; r < 8; ++r) {
    places[static_cast<size_t>(r)].host = r < 4 ? 0 : 1;
    REQUIRE(place_at_pci_device(gpu_of_rank[static_cast<size_t>(r % 4)], places[static_cast<size_t>(r)], sysfs));
  }
  CHECK(places[1].path == std::vector<std::string>{"pci0000:00", "0000:03:00.0", "0000:04:00.0"});
  CHECK(places[1].bus_id == "0000:07:00.0");
  CHECK(places[3].bus_id == "0000:0f:00.0");
  CHECK(places[0].numa == 1);
  const std::vector<int> order = ring_order(places);
  CHECK(order == std::vector<int>{1, 3, 2, 0, 5, 7, 6, 4});  // cuda0, cuda1 (one upper switch), cuda2, then NUMA 1
  CHECK(positions_of(order) == std::vector<int>{3, 0, 2, 1, 7, 4, 6, 5});
  RankPlace none;
  CHECK(!place_at_pci_device("0000:99:00.0", none, sysfs));
  CHECK(!place_at_pci_device("", none, sysfs));
  CHECK(none.path.empty());
  // Without devices: by host, then NUMA node, then rank.
  std::vector<RankPlace> cpus(6);
  for (int r = 0; r < 6; ++r)
    cpus[static_cast<size_t>(r)].host = r % 2, cpus[static_cast<size_t>(r)].numa = r % 3 == 0 ? 1 : 0;
  CHECK(ring_order(cpus) == std::vector<int>{2, 4, 0, 1, 5, 3});
  CHECK(detail::parse_id_list("0-3,8,10-11") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(numa_node_of_this_thread() >= -1);
}

TEST_CASE("topology JSON round-trips, and bad files are errors that name the file and the field") {
  auto t = Topology::from_json(kDgxLike, "test");
  REQUIRE(t.ok());
  auto again = Topology::from_json(t->to_json(), "again");
  REQUIRE_MESSAGE(again.ok(), again.status().message());
  CHECK(again->to_json() == t->to_json());
  CHECK(again->devices[1].path == t->devices[1].path);

  auto bad_kind = Topology::from_json(R"({"devices": [{"kind": "fpga", "name": "x"}]})", "f.json");
  CHECK(bad_kind.status().code() == ErrorCode::kInvalidArgument);
  CHECK(bad_kind.status().message().find("f.json: device 'x' has kind 'fpga'") != std::string::npos);
  auto bad_number = Topology::from_json(R"({"cores": "many"})", "g.json");
  CHECK(bad_number.status().message().find("g.json: 'cores' is not a number") != std::string::npos);
  auto bad_syntax = Topology::from_json(R"({"cores": 4,})", "h.json");
  CHECK(bad_syntax.status().code() == ErrorCode::kInvalidArgument);
  CHECK(bad_syntax.status().message().find("h.json") != std::string::npos);
}

TEST_CASE("DCOMM_TOPO_FILE replaces detection; DCOMM_TOPO_DUMP_FILE writes what was used") {
  const std::string in = "/tmp/dcomm-test-topo-in.json", out = "/tmp/dcomm-test-topo-out.json";
  std::ofstream(in) << kDgxLike;
  setenv("DCOMM_TOPO_FILE", in.c_str(), 1);
  setenv("DCOMM_TOPO_DUMP_FILE", out.c_str(), 1);
  auto t = load_topology();
  unsetenv("DCOMM_TOPO_FILE");
  unsetenv("DCOMM_TOPO_DUMP_FILE");
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  CHECK(t->host == "node17");
  CHECK(t->source == "DCOMM_TOPO_FILE=" + in);
  CHECK(read_file(out) == t->to_json());
  setenv("DCOMM_TOPO_FILE", "/nonexistent/topo.json", 1);
  auto missing = load_topology();
  unsetenv("DCOMM_TOPO_FILE");
  CHECK(missing.status().message().find("DCOMM_TOPO_FILE=/nonexistent/topo.json: cannot read it") != std::string::npos);
  std::remove(in.c_str());
  std::remove(out.c_str());
}

#if DCOMM_HAS_HWLOC
TEST_CASE("hwloc detection: this machine's cores and devices, and dcomm-topo prints them") {
  auto t = load_topology();
  REQUIRE_MESSAGE(t.ok(), t.status().message());
  CHECK(t->source == "hwloc");
  CHECK(t->cores >= 1);
  CHECK(t->pus >= t->cores);
  CHECK(t->numa_nodes >= 1);
  for (const auto& d : t->devices) {
    CAPTURE(d.name);
    CHECK((d.kind == "gpu" || d.kind == "nic"));
    CHECK(d.bus_id.size() == 12);  // dddd:bb:dd.f
  }
  auto again = Topology::from_json(t->to_json(), "detected");
  REQUIRE(again.ok());
  CHECK(again->to_json() == t->to_json());
#ifdef DCOMM_TOPO_TOOL
  const std::string json = "/tmp/dcomm-test-topo-tool.json";
  std::string cmd = std::string(DCOMM_TOPO_TOOL) + " -j " + json;
  REQUIRE(std::system(cmd.c_str()) == 0);
  auto from_tool = Topology::from_json(read_file(json), json);
  REQUIRE(from_tool.ok());
  CHECK(from_tool->cores == t->cores);
  CHECK(from_tool->devices.size() == t->devices.size());
  std::remove(json.c_str());
#endif
}
#endif
