// The control sockets' protocol (the proxy, transport/proxy.hpp, speaks it to every peer in
// another process): frames of  u8 type | u32 bytes | bytes.
//   bye        this rank destroys its communicator (a closed socket after it is no failure)
//   abort      u8 error code | why: this rank aborted the communicator
//   heartbeat  nothing: this rank's proxy is alive (sent every kHeartbeatMs); a peer whose
//              heartbeats stop is stopped or hung, which is how a timeout names the right rank
//   query      nothing: which call are you in? (a rank whose wait on this one stalls asks)
//   call       u64 u64 u8 u64 u64: the call's stamp (core/call.hpp), whether the rank is in it,
//              and the stamp of the call before
// Frames longer than kMaxControlBytes, or of unknown types, fail the peer's link.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

enum class ControlType : uint8_t { kBye = 1, kAbort = 2, kHeartbeat = 3, kQuery = 4, kCall = 5 };
inline constexpr uint32_t kMaxControlBytes = 64 * 1024;
inline constexpr int kHeartbeatMs = 200;

inline std::string control_frame(ControlType type, std::string_view body = {}) {
  std::string msg(1, static_cast<char>(type));
  detail::put_pod<uint32_t>(msg, static_cast<uint32_t>(body.size()));
  return msg.append(body);
}

// Takes the frames complete in `in` (and removes them): on_frame(type, body) for each. An
// oversized or unknown frame is an error naming it; what remains is a frame's beginning.
template <class OnFrame>
Status take_control_frames(std::string& in, OnFrame on_frame) {
  size_t used = 0;
  Status status;
  for (;;) {
    detail::ByteReader r(std::string_view(in).substr(used));
    auto type = r.pod<uint8_t>();
    auto len = r.pod<uint32_t>();
    if (!type || !len) break;
    if (*type < static_cast<uint8_t>(ControlType::kBye) || *type > static_cast<uint8_t>(ControlType::kCall)) {
      status = invalid_argument("an unknown control frame (type ", static_cast<int>(*type), ")");
      break;
    }
    if (*len > kMaxControlBytes) {
      status = invalid_argument("a control frame of ", *len, " bytes (at most ", kMaxControlBytes, ")");
      break;
    }
    auto body = r.bytes(*len);
    if (!body) break;
    on_frame(static_cast<ControlType>(*type), *body);
    used += 5 + *len;
  }
  in.erase(0, used);
  return status;
}

// An abort frame's body: the error code, then why.
inline std::string abort_body(ErrorCode code, std::string_view why) {
  return std::string(1, static_cast<char>(code)).append(why.substr(0, kMaxControlBytes - 1));
}
inline ErrorCode abort_code(std::string_view body) {
  const int c = body.empty() ? 0 : static_cast<unsigned char>(body[0]);
  return c >= static_cast<int>(ErrorCode::kInvalidArgument) && c <= static_cast<int>(ErrorCode::kInternal)
             ? static_cast<ErrorCode>(c)
             : ErrorCode::kPeerFailure;
}
inline std::string_view abort_text(std::string_view body) { return body.empty() ? body : body.substr(1); }

DCOMM_NAMESPACE_END
