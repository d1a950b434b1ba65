// A small JSON reader and writer for dcomm's own files (the topology file, topo/topology.hpp):
// objects, arrays, strings and integers, every error naming its offset.
#pragma once

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
// The little JSON dcomm's files need: objects, arrays, strings, integers.
struct Json {
  enum Kind { kNull, kNumber, kString, kArray, kObject } kind = kNull;
  long long number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  const Json* get(const std::string& k) const {
    auto it = fields.find(k);
    return it == fields.end() ? nullptr : &it->second;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}
  Result<Json> parse() {
    auto v = value();
    if (!v.ok()) return v;
    skip();
    if (i_ != s_.size()) return error("trailing characters");
    return v;
  }

 private:
  Status error(const char* what) const { return invalid_argument("JSON: ", what, " at offset ", i_); }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  Result<Json> value() {
    skip();
    if (i_ >= s_.size()) return error("unexpected end");
    Json j;
    char c = s_[i_];
    if (c == '{') {
      j.kind = Json::kObject;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, j;
      for (;;) {
        auto key = value();
        if (!key.ok()) return key;
        if (key->kind != Json::kString) return error("object key is not a string");
        skip();
        if (i_ >= s_.size() || s_[i_] != ':') return error("expected ':'");
        ++i_;
        auto v = value();
        if (!v.ok()) return v;
        j.fields[key->text] = std::move(*v);
        skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') return ++i_, j;
        return error("expected ',' or '}'");
      }
    }
    if (c == '[') {
      j.kind = Json::kArray;
      ++i_;
      skip();
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, j;
      for (;;) {
        auto v = value();
        if (!v.ok()) return v;
        j.items.push_back(std::move(*v));
        skip();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') return ++i_, j;
        return error("expected ',' or ']'");
      }
    }
    if (c == '"') {
      j.kind = Json::kString;
      for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
        if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
        j.text += s_[i_];
      }
      if (i_ >= s_.size()) return error("unterminated string");
      return ++i_, j;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      // strtoll, not stoll: a lone '-' or an out-of-range number is an error here, not an exception.
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(begin, &end, 10);
      if (end == begin || errno == ERANGE) return error("bad number");
      j.kind = Json::kNumber;
      j.number = v;
      i_ += static_cast<size_t>(end - begin);
      return j;
    }
    if (s_.compare(i_, 4, "null") == 0) return i_ += 4, j;
    return error("unexpected character");
  }

  const std::string& s_;
  size_t i_ = 0;
};

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace detail

DCOMM_NAMESPACE_END
