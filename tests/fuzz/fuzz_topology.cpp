// The topology file (DCOMM_TOPO_FILE): the JSON a cluster's host is described in.
#include <cstdint>
#include <string>

#include <dcomm/topo/topology.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = Topology::from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (t.ok()) (void)Topology::from_json(t->to_json(), "round trip");
  return 0;
}
