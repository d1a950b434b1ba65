// Bytes on the wire and in the store: a bounds-checked reader (every length is checked in
// 64-bit arithmetic against what is left before anything is read), a writer, and hex text
// for binary values. Everything that parses bytes another process sent goes through these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (an empty range shares none).
inline bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const char *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

template <class T>
void put_pod(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T get_pod(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads little-endian integers and byte runs from a buffer; every read checks what is left
// (no arithmetic on untrusted lengths can wrap: they are compared with the remainder, never
// added to an offset first). A failed read leaves the reader failed.
class ByteReader {
 public:
  ByteReader(const void* data, size_t size) : p_(static_cast<const char*>(data)), left_(size) {}
  explicit ByteReader(std::string_view s) : ByteReader(s.data(), s.size()) {}
  template <class T>
  std::optional<T> pod() {
    if (!ok_ || left_ < sizeof(T)) return fail<T>();
    T v = get_pod<T>(p_);
    p_ += sizeof(T), left_ -= sizeof(T);
    return v;
  }
  // `n` bytes (n is untrusted: compared with what is left, never added to anything first).
  std::optional<std::string_view> bytes(uint64_t n) {
    if (!ok_ || n > left_) return fail<std::string_view>();
    std::string_view v(p_, static_cast<size_t>(n));
    p_ += n, left_ -= static_cast<size_t>(n);
    return v;
  }
  size_t left() const { return left_; }
  bool ok() const { return ok_; }

 private:
  template <class T>
  std::optional<T> fail() {
    ok_ = false;
    return std::nullopt;
  }
  const char* p_;
  size_t left_;
  bool ok_ = true;
};

inline std::string to_hex(const void* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out += digits[b >> 4], out += digits[b & 15];
  }
  return out;
}
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// The bytes of a hex string, or nothing when it has an odd length or a non-hex digit.
inline std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}
}  // namespace detail

DCOMM_NAMESPACE_END
