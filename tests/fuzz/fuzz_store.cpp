// The rendezvous store's request parser and the authentication exchange's response check:
// what a client, authenticated or not, can send the store. The input is cut into the chunks
// a socket might deliver (the first byte of each chunk says its length).
#include <cstdint>
#include <vector>

#include <dcomm/bootstrap/auth.hpp>
#include <dcomm/bootstrap/store_protocol.hpp>

using namespace dcomm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  StoreLimits limits;
  limits.max_value_bytes = 1 << 16;
  StoreRequestParser parser(limits);
  std::vector<StoreRequest> out;
  size_t at = 0;
  while (at < size) {
    const size_t chunk = std::min<size_t>(size - at - 1, data[at] + 1u);
    ++at;
    Status s = parser.feed(reinterpret_cast<const char*>(data + at), chunk, out);
    at += chunk;
    if (!s.ok()) break;
    for (const auto& r : out)
      if (r.key.size() > StoreLimits::kMaxKeyBytes || r.value.size() > limits.max_value_bytes) __builtin_trap();
    out.clear();
  }
  const auth::Nonce nonce{};
  (void)auth::check_response(JobSecret{}, kStoreMagic, nonce,
                             std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
