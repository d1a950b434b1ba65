// Everything else another process sends: the first byte picks what the rest is.
//   0 a mesh hello (transport/mesh.hpp)       1 a roster entry (bootstrap/roster.hpp)
//   2 hex (UCX addresses, GIDs)               3 a wire run's length (transport/fifo.hpp)
//   4 a call stamp to describe (core/call.hpp) 5 device facts to agree on (comm/device_plan.hpp)
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dcomm/bootstrap/roster.hpp>
#include <dcomm/comm/device_plan.hpp>
#include <dcomm/core/bytes.hpp>
#include <dcomm/core/call.hpp>
#include <dcomm/transport/fifo.hpp>
#include <dcomm/transport/mesh.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      const std::vector<int> roles = {0, 2, 1, 3};
      auto h = detail::parse_mesh_hello(rest, 42, 0, 4, roles);
      if (h.ok() && (h->rank == 0 || h->rank >= 4 || static_cast<int>(h->role) > roles[h->rank])) __builtin_trap();
      break;
    }
    case 1: (void)detail::deserialize(std::string(rest)); break;
    case 2: {
      auto b = detail::from_hex(rest);
      if (b && detail::to_hex(b->data(), b->size()).size() != rest.size()) __builtin_trap();
      break;
    }
    case 3: {
      uint64_t wire = 0, bytes = 0;
      std::memcpy(&wire, rest.data(), std::min<size_t>(rest.size(), 8));
      if (FifoRef::payload_of_wire(wire, &bytes) && FifoRef::wire_bytes(bytes) != wire) __builtin_trap();
      break;
    }
    case 4: {
      CallStamp s;
      std::memcpy(&s, rest.data(), std::min(rest.size(), sizeof s));
      (void)describe(s, true);
      break;
    }
    case 5: {
      std::vector<DeviceRankFacts> facts(rest.size() / sizeof(DeviceRankFacts));
      if (facts.empty()) break;
      std::memcpy(facts.data(), rest.data(), facts.size() * sizeof(DeviceRankFacts));
      for (auto& f : facts) f.bus_id[sizeof f.bus_id - 1] = 0;
      const int c = agree_device_channels(facts);
      if (c < 1 || c > kMaxDeviceChannels) __builtin_trap();
      (void)check_device_shapes(facts, 0);
      break;
    }
  }
  return 0;
}
