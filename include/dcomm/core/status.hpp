// Status and Result<T>: the error model of every recoverable failure in dcomm.
//
// A Status reads like a sentence and names what went wrong: the operation, the rank, the peer
// and the cause ("all_reduce on rank 2: peer rank 3 (host b, pid 811) died ..."). Lower layers
// say what they know; each layer above prepends its context with with_context().
#pragma once

#include <concepts>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller passed something wrong; nothing was sent
  kTimeout,          // a wait reached its deadline without progress
  kPeerFailure,      // a peer died, closed its connection, or aborted
  kSystemError,      // an OS call failed (errno is in the message)
  kOutOfResources,   // memory, /dev/shm space, file descriptors
  kAborted,          // the communicator was aborted earlier; later calls fail fast
  kUnsupported,      // valid request this build or machine cannot serve
  kInternal,         // a bug in dcomm
};

inline const char* to_string(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kPeerFailure: return "peer failure";
    case ErrorCode::kSystemError: return "system error";
    case ErrorCode::kOutOfResources: return "out of resources";
    case ErrorCode::kAborted: return "aborted";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

namespace detail {
// Concatenates anything streamable; the one string builder used for messages.
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message"; used by each layer to say where it was when the error came up.
  Status with_context(std::string_view context) const {
    if (ok()) return *this;
    return {code_, detail::cat(context, ": ", message_)};
  }
  // The same, with the context made (make() -> a string) only on failure: for paths that run
  // per tile or per call, where building the string every time would cost more than the work.
  template <std::invocable MakeContext>
  Status with_context(MakeContext&& make) const {
    return ok() ? *this : with_context(std::string_view(make()));
  }
  std::string to_string() const { return ok() ? "ok" : message_; }
  void ignore() const {}

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

template <class... Args>
Status make_error(ErrorCode code, const Args&... args) {
  return {code, detail::cat(args...)};
}
template <class... Args>
Status invalid_argument(const Args&... args) {
  return make_error(ErrorCode::kInvalidArgument, args...);
}

// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  // By reference rather than by value: `return local;` then moves the local into the Result
  // under every compiler's rules (nvcc's front end does not apply C++20's wider implicit move).
  Result(T&& value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(const T& value) : v_(std::in_place_index<0>, value) {}        // NOLINT
  Result(Status status) : v_(std::move(status)) {}                     // NOLINT
  bool ok() const { return v_.index() == 0; }
  Status status() const { return ok() ? Status{} : std::get<1>(v_); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

DCOMM_NAMESPACE_END

// Returns the Status of `expr` from the enclosing function when it is an error.
#define DCOMM_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::dcomm::Status dcomm_status_ = (expr);        \
    if (!dcomm_status_.ok()) return dcomm_status_; \
  } while (0)
