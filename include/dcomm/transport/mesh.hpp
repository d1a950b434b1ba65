// The socket mesh a communicator builds at start-up: one control socket to every peer in
// another process (liveness, goodbyes, abort notices; see proxy.hpp), plus the data sockets
// of the peers that talk over TCP. The higher rank of each pair connects; every connection
// authenticates, and its hello names the communicator, the rank and the socket's role.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dcomm/bootstrap/auth.hpp"
#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/bytes.hpp"
#include "dcomm/core/log.hpp"
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
inline constexpr std::string_view kMeshMagic = "dcommMS2";

// A hello that arrived (authenticated) at this rank's listener: it must be for this
// communicator, from a higher rank, for a socket role that rank has.
inline Result<MeshHello> parse_mesh_hello(std::string_view payload, uint64_t nonce, int rank, int size,
                                          const std::vector<int>& data_sockets) {
  ByteReader r(payload);
  auto n = r.pod<uint64_t>();
  auto from = r.pod<uint32_t>();
  auto role = r.pod<uint32_t>();
  if (!n || !from || !role || r.left() != 0) return invalid_argument("a malformed hello (", payload.size(), " bytes)");
  if (*n != nonce) return invalid_argument("a hello for another communicator");
  if (*from <= static_cast<uint32_t>(rank) || *from >= static_cast<uint32_t>(size))
    return invalid_argument("a hello claiming to be rank ", *from, ", which does not connect to rank ", rank);
  if (*role > static_cast<uint32_t>(data_sockets[*from]))
    return invalid_argument("a hello from rank ", *from, " for socket role ", *role, ", which it does not have");
  return MeshHello{*n, *from, *role};
}
}  // namespace detail

// Connects the mesh: every connection authenticates (bootstrap/auth.hpp) with the job
// secret, and its hello (communicator, rank, socket role) is covered by the MAC. A stray or
// unauthenticated connection is closed and counted, and the wait goes on; `should_stop` is
// asked between waits (a rank that gave up during set-up), and the deadline bounds it all.
template <class ShouldStop>
Result<MeshSockets> build_mesh(int rank, uint64_t nonce, const std::vector<PeerInfo>& peers, const MeshPlan& plan,
                               const Socket& listener, std::chrono::milliseconds timeout, const JobSecret& secret,
                               ShouldStop should_stop) {
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
      std::string hello;
      detail::put_pod<uint64_t>(hello, nonce);
      detail::put_pod<uint32_t>(hello, static_cast<uint32_t>(rank));
      detail::put_pod<uint32_t>(hello, static_cast<uint32_t>(role));
      DCOMM_RETURN_IF_ERROR(auth::connect_handshake(s->fd(), secret, detail::kMeshMagic, hello, deadline)
                                .with_context(detail::cat("connecting to ", peers[up].describe())));
      (role == 0 ? mesh.control[up] : mesh.data[up][static_cast<size_t>(role - 1)]) = std::move(*s);
    }
  }
  int refused = 0;
  for (int got = 0; got < expected;) {
    auto s = accept_one(listener,
                        Deadline(std::chrono::milliseconds(std::min<long long>(200, deadline.remaining_ms() + 1))));
    if (!s.ok()) {
      DCOMM_RETURN_IF_ERROR(should_stop());
      if (!deadline.expired()) continue;
      std::string missing;
      for (int p = rank + 1; p < size; ++p)
        if (plan.control[static_cast<size_t>(p)] && !mesh.control[static_cast<size_t>(p)].valid())
          missing += detail::cat(missing.empty() ? "" : ", ", p);
      return make_error(ErrorCode::kTimeout, "waiting for connections from ranks [", missing, "]: none within ",
                        timeout.count(), " ms (DCOMM_TIMEOUT_MS)",
                        refused ? detail::cat("; ", refused, " connection(s) refused") : "");
    }
    auto payload = auth::accept_handshake(s->fd(), secret, detail::kMeshMagic,
                                          auth::handshake_deadline(deadline.remaining_ms() + 1));
    auto hello = payload.ok() ? detail::parse_mesh_hello(*payload, nonce, rank, size, plan.data_sockets)
                              : Result<detail::MeshHello>(payload.status());
    if (!hello.ok()) {
      ++refused;
      DCOMM_LOG(kWarn, kSubsysBootstrap, rank,
                "refused a connection to this rank's listener: ", hello.status().message(), " (", refused, " so far)");
      continue;
    }
    size_t up = hello->rank;
    Socket& slot = hello->role == 0 ? mesh.control[up] : mesh.data[up][hello->role - 1];
    if (slot.valid())
      return invalid_argument("two processes connected as rank ", hello->rank, "; each rank must be claimed once");
    slot = std::move(*s);
    ++got;
  }
  return mesh;
}

DCOMM_NAMESPACE_END
