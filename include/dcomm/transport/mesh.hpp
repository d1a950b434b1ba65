// The socket mesh a communicator builds at start-up: one control socket to every peer in
// another process (liveness, goodbyes, abort notices; see proxy.hpp), plus the data sockets
// of the peers that talk over TCP. The higher rank of each pair connects; every connection
// opens with a hello that names the communicator, the rank and the socket's role.
#pragma once

#include <cstdint>
#include <vector>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/wait.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

struct MeshPlan {
  std::vector<bool> control;      // by peer rank: a control socket to it
  std::vector<int> data_sockets;  // by peer rank: TCP data sockets to it (0: another transport)
};

struct MeshSockets {
  std::vector<Socket> control;            // by peer rank
  std::vector<std::vector<Socket>> data;  // by peer rank
};

namespace detail {
struct MeshHello {
  uint64_t nonce;
  uint32_t rank;
  uint32_t role;  // 0 control, k > 0 data socket k-1
};
}  // namespace detail

inline Result<MeshSockets> build_mesh(int rank, uint64_t nonce, const std::vector<PeerInfo>& peers,
                                      const MeshPlan& plan, const Socket& listener, std::chrono::milliseconds timeout) {
  const int size = static_cast<int>(peers.size());
  MeshSockets mesh;
  mesh.control.resize(static_cast<size_t>(size));
  mesh.data.resize(static_cast<size_t>(size));
  Deadline deadline(timeout);
  int expected = 0;
  for (int p = 0; p < size; ++p) {
    size_t up = static_cast<size_t>(p);
    int roles = (plan.control[up] ? 1 : 0) + plan.data_sockets[up];
    mesh.data[up].resize(static_cast<size_t>(plan.data_sockets[up]));
    if (p > rank) {
      expected += roles;
      continue;
    }
    if (p == rank || roles == 0) continue;
    auto addr = parse_address(peers[up].address);
    if (!addr.ok()) return addr.status();
    for (int role = plan.control[up] ? 0 : 1; role <= plan.data_sockets[up]; ++role) {
      auto s = connect_to(*addr, deadline);
      if (!s.ok()) return s.status().with_context(detail::cat("connecting to ", peers[up].describe()));
      detail::MeshHello hello{nonce, static_cast<uint32_t>(rank), static_cast<uint32_t>(role)};
      DCOMM_RETURN_IF_ERROR(send_all(s->fd(), &hello, sizeof hello, deadline));
      (role == 0 ? mesh.control[up] : mesh.data[up][static_cast<size_t>(role - 1)]) = std::move(*s);
    }
  }
  for (int got = 0; got < expected; ++got) {
    auto s = accept_one(listener, deadline);
    if (!s.ok()) {
      std::string missing;
      for (int p = rank + 1; p < size; ++p)
        if (plan.control[static_cast<size_t>(p)] && !mesh.control[static_cast<size_t>(p)].valid())
          missing += detail::cat(missing.empty() ? "" : ", ", p);
      return s.status().with_context(detail::cat("waiting for connections from ranks [", missing, "]"));
    }
    detail::MeshHello hello{};
    DCOMM_RETURN_IF_ERROR(recv_all(s->fd(), &hello, sizeof hello, deadline).with_context("reading a peer's hello"));
    if (hello.nonce != nonce || static_cast<int>(hello.rank) <= rank || static_cast<int>(hello.rank) >= size)
      return make_error(ErrorCode::kInvalidArgument, "a connection claiming to be rank ", hello.rank,
                        " of another communicator (or a stray client) reached this rank's listener");
    size_t up = hello.rank;
    if (hello.role > static_cast<uint32_t>(plan.data_sockets[up]))
      return make_error(ErrorCode::kInternal, "rank ", hello.rank, " opened an unexpected socket role ", hello.role);
    Socket& slot = hello.role == 0 ? mesh.control[up] : mesh.data[up][hello.role - 1];
    if (slot.valid())
      return invalid_argument("two processes connected as rank ", hello.rank, "; each rank must be claimed once");
    slot = std::move(*s);
  }
  return mesh;
}

DCOMM_NAMESPACE_END
