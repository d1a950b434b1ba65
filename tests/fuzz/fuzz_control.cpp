// The control sockets' frames (transport/control.hpp), as a peer, or anyone who got past the
// authentication, may send them; delivered in two pieces to exercise a frame split in two.
#include <cstdint>
#include <string>

#include <dcomm/transport/control.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string in;
  const size_t half = size / 2;
  for (size_t piece = 0; piece < 2; ++piece) {
    const size_t from = piece ? half : 0, to = piece ? size : half;
    in.append(reinterpret_cast<const char*>(data) + from, to - from);
    Status s = take_control_frames(in, [](ControlType type, std::string_view body) {
      if (body.size() > kMaxControlBytes) __builtin_trap();
      if (type == ControlType::kAbort) {
        (void)abort_code(body);
        (void)abort_text(body);
      }
    });
    if (!s.ok()) break;
  }
  return 0;
}
