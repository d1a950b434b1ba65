// The rendezvous store's wire protocol and its limits (bootstrap/store.hpp serves and uses
// it). After the authentication exchange (bootstrap/auth.hpp, magic "dcommKV2"), a client
// sends requests and the server answers each in order:
//
//   request: u8 op | u32 key_bytes | key | u64 value_bytes | value
//   reply:   u8 0 (ok) | what the op returns,  or  u8 1 (refused) | u32 bytes | message
//
//   op 1 set      key <- value                                  returns nothing
//   op 2 get      waits until key exists                        returns u64 bytes | value
//   op 3 add      key += value (an i64; absent counts as 0)     returns i64
//   op 4 check    does key exist                                returns u8
//   op 5 erase    removes key                                   returns u8 (it existed)
//   op 6 get_or   waits until key or key2 (the value) exists    returns u8 which | u64 bytes | value
//
// Every length is checked, in 64-bit arithmetic, against its limit before the bytes behind it
// are read or stored: keys up to 4 KiB, values up to StoreLimits::max_value_bytes. The parser
// takes bytes as they arrive and never buffers more than one request's key and value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

enum class StoreOp : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kErase = 5, kGetOr = 6 };
inline constexpr std::string_view kStoreMagic = "dcommKV2";

// What the store serves within: request sizes, memory, clients and how long they may lag.
struct StoreLimits {
  static constexpr uint64_t kMaxKeyBytes = 4096;
  uint64_t max_value_bytes = 64ull << 20;  // DCOMM_STORE_MAX_VALUE_BYTES
  uint64_t max_total_bytes = 1ull << 30;   // DCOMM_STORE_MAX_BYTES: keys and values held
  uint64_t max_queued_bytes = 0;           // replies queued for one client (0: 2 x max_value_bytes)
  int max_clients = 0;                     // DCOMM_STORE_MAX_CLIENTS (0: by the file-descriptor limit)
  int handshake_ms = 10'000;               // to finish authenticating
  int stall_ms = 10'000;  // DCOMM_STORE_STALL_MS: a client that leaves replies unread this long is dropped

  static Result<StoreLimits> from_env() {
    StoreLimits l;
    auto v = env_size("DCOMM_STORE_MAX_VALUE_BYTES", static_cast<long long>(l.max_value_bytes), 1024, 1LL << 34);
    auto t = env_size("DCOMM_STORE_MAX_BYTES", static_cast<long long>(l.max_total_bytes), 1 << 20, 1LL << 40);
    auto c = env_size("DCOMM_STORE_MAX_CLIENTS", l.max_clients, 0, 1 << 20);
    auto s = env_size("DCOMM_STORE_STALL_MS", l.stall_ms, 100, 1LL << 30);
    for (const Status& st : {v.status(), t.status(), c.status(), s.status()}) DCOMM_RETURN_IF_ERROR(st);
    l.max_value_bytes = static_cast<uint64_t>(*v);
    l.max_total_bytes = static_cast<uint64_t>(*t);
    l.max_clients = static_cast<int>(*c);
    l.stall_ms = static_cast<int>(*s);
    return l;
  }
  uint64_t queued_limit() const { return max_queued_bytes ? max_queued_bytes : 2 * max_value_bytes + 4096; }
};

struct StoreRequest {
  StoreOp op = StoreOp::kGet;
  std::string key;
  std::string value;
};

// Takes a client's bytes as they come and yields whole requests. A malformed or oversized
// request is an error that says what was wrong; the connection is then dropped.
class StoreRequestParser {
 public:
  explicit StoreRequestParser(const StoreLimits& limits) : limits_(limits) {}

  // Consumes all of [data, data + n); complete requests are appended to `out`.
  Status feed(const char* data, size_t n, std::vector<StoreRequest>& out) {
    while (n > 0) {
      if (stage_ == Stage::kHeader || stage_ == Stage::kValueLength) {
        const size_t want = (stage_ == Stage::kHeader ? 5 : 8) - header_.size();
        const size_t take = want < n ? want : n;
        header_.append(data, take);
        data += take, n -= take;
        if (header_.size() < (stage_ == Stage::kHeader ? 5u : 8u)) continue;
        DCOMM_RETURN_IF_ERROR(stage_ == Stage::kHeader ? header_done() : value_length_done());
        header_.clear();
        if (stage_ == Stage::kDone) finish(out);
        continue;
      }
      std::string& dst = stage_ == Stage::kKey ? cur_.key : cur_.value;
      const uint64_t want = (stage_ == Stage::kKey ? key_bytes_ : value_bytes_) - dst.size();
      const size_t take = want < n ? static_cast<size_t>(want) : n;
      dst.append(data, take);
      data += take, n -= take;
      if (dst.size() < (stage_ == Stage::kKey ? key_bytes_ : value_bytes_)) continue;
      stage_ = stage_ == Stage::kKey ? Stage::kValueLength : Stage::kDone;
      if (stage_ == Stage::kDone) finish(out);
    }
    return {};
  }
  // Bytes held for the request being read.
  size_t buffered() const { return header_.size() + cur_.key.capacity() + cur_.value.capacity(); }

 private:
  enum class Stage { kHeader, kKey, kValueLength, kValue, kDone };
  Status header_done() {
    const auto op = static_cast<uint8_t>(header_[0]);
    if (op < static_cast<uint8_t>(StoreOp::kSet) || op > static_cast<uint8_t>(StoreOp::kGetOr))
      return invalid_argument("unknown store request ", static_cast<int>(op));
    cur_.op = static_cast<StoreOp>(op);
    key_bytes_ = detail::get_pod<uint32_t>(header_.data() + 1);
    if (key_bytes_ > StoreLimits::kMaxKeyBytes)
      return invalid_argument("a store key of ", key_bytes_, " bytes is over the limit of ", StoreLimits::kMaxKeyBytes);
    cur_.key.reserve(static_cast<size_t>(key_bytes_));
    stage_ = key_bytes_ ? Stage::kKey : Stage::kValueLength;
    return {};
  }
  Status value_length_done() {
    value_bytes_ = detail::get_pod<uint64_t>(header_.data());
    if (value_bytes_ > limits_.max_value_bytes)
      return make_error(ErrorCode::kOutOfResources, "a store value of ", value_bytes_, " bytes is over the limit of ",
                        limits_.max_value_bytes, " (DCOMM_STORE_MAX_VALUE_BYTES)");
    if ((cur_.op == StoreOp::kAdd && value_bytes_ != 8) ||
        (cur_.op == StoreOp::kGetOr && value_bytes_ > StoreLimits::kMaxKeyBytes) ||
        ((cur_.op == StoreOp::kGet || cur_.op == StoreOp::kCheck || cur_.op == StoreOp::kErase) && value_bytes_ != 0))
      return invalid_argument("store request ", static_cast<int>(cur_.op), " with a ", value_bytes_, "-byte value");
    // Reserved as it arrives (a client that announces a large value and sends nothing holds
    // little); the server counts what every parser holds against its memory limit.
    cur_.value.reserve(static_cast<size_t>(value_bytes_ < (1u << 20) ? value_bytes_ : (1u << 20)));
    stage_ = value_bytes_ ? Stage::kValue : Stage::kDone;
    return {};
  }
  void finish(std::vector<StoreRequest>& out) {
    out.push_back(std::move(cur_));
    cur_ = StoreRequest{};
    stage_ = Stage::kHeader;
  }

  const StoreLimits& limits_;
  Stage stage_ = Stage::kHeader;
  std::string header_;
  uint64_t key_bytes_ = 0, value_bytes_ = 0;
  StoreRequest cur_;
};

namespace detail {
inline std::string store_request(StoreOp op, std::string_view key, std::string_view value) {
  std::string msg(1, static_cast<char>(op));
  put_pod<uint32_t>(msg, static_cast<uint32_t>(key.size()));
  msg.append(key);
  put_pod<uint64_t>(msg, value.size());
  return msg.append(value);
}
inline std::string store_refusal(std::string_view why) {
  std::string r(1, '\1');
  put_pod<uint32_t>(r, static_cast<uint32_t>(why.size()));
  return r.append(why);
}
}  // namespace detail

DCOMM_NAMESPACE_END
