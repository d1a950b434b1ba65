// The rendezvous store's client (bootstrap/store.hpp): what a rank uses to publish what others
// need to connect to it and to wait for what it needs. Every call has a deadline.
#pragma once

#include <fcntl.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dcomm/bootstrap/auth.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/bootstrap/store_protocol.hpp"
#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

class StoreClient {
 public:
  // Connects to the store at addr, or, with port_span > 1, at the first of ports addr.port ..
  // addr.port + port_span - 1 whose store accepts this job (a port taken by another service,
  // or by another job's store, is skipped). Retries until the timeout: the store may not be up yet.
  static Result<std::unique_ptr<StoreClient>> connect(const SocketAddress& addr, std::chrono::milliseconds timeout,
                                                      const StoreAccess& access = {}, int port_span = 1) {
    auto limits = StoreLimits::from_env();
    if (!limits.ok()) return limits.status();
    Deadline deadline(timeout);
    Status last;
    for (;;) {
      for (int k = 0; k < port_span; ++k) {
        SocketAddress at{addr.host, addr.port + k};
        auto s = connect_to(at, Deadline(std::chrono::milliseconds(port_span > 1 ? 50 : timeout.count())));
        if (!s.ok()) {
          last = s.status();
          continue;
        }
        // 2 s, not auth::kHandshakeCapMs: a port in a scan that never greets (another service)
        // costs that long; a slow network's timeout is tried again, until the deadline.
        Status h =
            auth::connect_handshake(s->fd(), access.secret, kStoreMagic, access.job_tag,
                                    Deadline(std::chrono::milliseconds(std::min<long long>(timeout.count(), 2000))));
        if (h.ok()) return std::unique_ptr<StoreClient>(new StoreClient(std::move(*s), at, timeout, *limits));
        last = h.with_context(detail::cat("rendezvous store at ", at.to_string()));
        // A store that refused us is up: with one port to try, waiting will not change that.
        if (port_span == 1 && h.code() == ErrorCode::kInvalidArgument) return last;
      }
      if (deadline.expired())
        return last.with_context(
            detail::cat("cannot reach the rendezvous store at ", addr.to_string(),
                        port_span > 1 ? detail::cat(" (or the next ", port_span - 1, " ports)") : ""));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  Status set(const std::string& key, const std::string& value) {
    std::lock_guard<std::mutex> lock(mu_);
    DCOMM_RETURN_IF_ERROR(request(StoreOp::kSet, key, value));
    return receive_status(key);
  }

  // Waits (up to the timeout) until some rank sets `key`. With an abort key set
  // (set_abort_key), a rank that gives up during set-up ends the wait at once with its reason.
  Result<std::string> get(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool either = !abort_key_.empty();
    DCOMM_RETURN_IF_ERROR(either ? request(StoreOp::kGetOr, key, abort_key_) : request(StoreOp::kGet, key, {}));
    DCOMM_RETURN_IF_ERROR(receive_status(key));
    uint8_t which = 0;
    if (either) DCOMM_RETURN_IF_ERROR(receive(&which, 1, key));
    uint64_t len = 0;
    DCOMM_RETURN_IF_ERROR(receive(&len, sizeof len, key));
    if (len > limits_.max_value_bytes) {
      sock_.close();
      return make_error(ErrorCode::kPeerFailure, "rendezvous store ", addr_.to_string(), " sent a ", len,
                        "-byte value, over the limit of ", limits_.max_value_bytes);
    }
    std::string value(len, '\0');
    DCOMM_RETURN_IF_ERROR(receive(value.data(), len, key));
    if (which == 1) return make_error(ErrorCode::kAborted, value);
    return value;
  }

  Result<int64_t> add(const std::string& key, int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string v;
    detail::put_pod(v, delta);
    DCOMM_RETURN_IF_ERROR(request(StoreOp::kAdd, key, v));
    DCOMM_RETURN_IF_ERROR(receive_status(key));
    int64_t result = 0;
    DCOMM_RETURN_IF_ERROR(receive(&result, sizeof result, key));
    return result;
  }
  // Whether `key` is set now (no waiting).
  Result<bool> check(const std::string& key) { return flag_op(StoreOp::kCheck, key); }
  // Removes `key`; true when it was there.
  Result<bool> erase(const std::string& key) { return flag_op(StoreOp::kErase, key); }

  // Waits on this key too, from now on: its value, once set, is the reason every wait fails.
  void set_abort_key(std::string key) {
    std::lock_guard<std::mutex> lock(mu_);
    abort_key_ = std::move(key);
  }
  const std::string& abort_key() const { return abort_key_; }

  const SocketAddress& server_address() const { return addr_; }
  // The IP address this host used to reach the store: routable from the other ranks.
  std::string local_address() const { return local_ip(sock_.fd()); }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  StoreClient(Socket s, SocketAddress addr, std::chrono::milliseconds timeout, const StoreLimits& limits)
      : sock_(std::move(s)), addr_(std::move(addr)), timeout_(timeout), limits_(limits) {}

  Result<bool> flag_op(StoreOp op, const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    DCOMM_RETURN_IF_ERROR(request(op, key, {}));
    DCOMM_RETURN_IF_ERROR(receive_status(key));
    uint8_t v = 0;
    DCOMM_RETURN_IF_ERROR(receive(&v, 1, key));
    return v != 0;
  }

  Status request(StoreOp op, const std::string& key, const std::string& value) {
    if (!sock_.valid()) return make_error(ErrorCode::kAborted, "rendezvous store connection was lost earlier");
    if (key.size() > StoreLimits::kMaxKeyBytes || value.size() > limits_.max_value_bytes)
      return make_error(ErrorCode::kOutOfResources, "rendezvous store: a key of ", key.size(), " bytes or a value of ",
                        value.size(), " bytes is over the store's limits (DCOMM_STORE_MAX_VALUE_BYTES)");
    const std::string msg = detail::store_request(op, key, value);
    Status s = send_all(sock_.fd(), msg.data(), msg.size(), Deadline(timeout_));
    if (!s.ok()) sock_.close();
    return s.with_context(detail::cat("rendezvous store ", addr_.to_string()));
  }
  // The reply's first byte: ok, or the store's refusal and why.
  Status receive_status(const std::string& key) {
    uint8_t status = 0;
    DCOMM_RETURN_IF_ERROR(receive(&status, 1, key));
    if (status == 0) return {};
    uint32_t len = 0;
    DCOMM_RETURN_IF_ERROR(receive(&len, sizeof len, key));
    std::string why(std::min<uint32_t>(len, 4096), '\0');
    DCOMM_RETURN_IF_ERROR(receive(why.data(), why.size(), key));
    return make_error(ErrorCode::kOutOfResources, "rendezvous store ", addr_.to_string(), " refused '", key,
                      "': ", why);
  }
  Status receive(void* buf, size_t bytes, const std::string& key) {
    Status s = recv_all(sock_.fd(), buf, bytes, Deadline(timeout_));
    if (s.ok()) return s;
    sock_.close();  // a late reply would desynchronize the stream
    if (s.code() == ErrorCode::kTimeout)
      return make_error(ErrorCode::kTimeout, "rendezvous store ", addr_.to_string(), ": key '", key,
                        "' was not published within ", timeout_.count(), " ms");
    return s.with_context(detail::cat("rendezvous store ", addr_.to_string()));
  }

  std::mutex mu_;
  Socket sock_;
  SocketAddress addr_;
  std::chrono::milliseconds timeout_;
  StoreLimits limits_;
  std::string abort_key_;
};

DCOMM_NAMESPACE_END
