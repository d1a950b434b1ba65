// UCX's own ceiling for a ring shift between two processes: each process sends a message to
// the other and receives one from it at once (ucp_tag_send_nbx and ucp_tag_recv_nbx, both
// posted, then progressed until both complete), on the same UCX_TLS as dcomm. This is the
// shape of dcomm-bench send_recv with 2 ranks; `ucx_perftest -t tag_bw` sends one way only,
// which on a CPU-bound wire (TCP over loopback) has the cores to itself. bench/peers/ucx.sh
// prints both beside dcomm.
//   ucx-bidir server ADDR PORT SIZE ITERS    (one process)
//   ucx-bidir client ADDR PORT SIZE ITERS    (the other; prints GB/s per direction)
// The worker addresses are exchanged over one TCP socket, which also carries the barriers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {
int fail(const char* what, const char* why) {
  std::fprintf(stderr, "ucx-bidir: %s: %s\n", what, why);
  return 1;
}
bool exact(int fd, void* p, size_t n, bool sending) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = sending ? ::send(fd, c, n, MSG_NOSIGNAL) : ::recv(fd, c, n, 0);
    if (k <= 0) return false;
    c += k, n -= static_cast<size_t>(k);
  }
  return true;
}
// Both processes reach this point (one byte each way on the socket).
bool barrier(int fd) {
  char b = 0;
  return exact(fd, &b, 1, true) && exact(fd, &b, 1, false);
}
int connect_socket(bool server, const char* host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return -1;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (server) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 1) != 0) return -1;
    const int conn = ::accept(fd, nullptr, nullptr);
    ::close(fd);
    return conn;
  }
  for (int tries = 0; ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0; ++tries) {
    if (tries == 1000) return -1;  // the server did not listen within 10 s
    ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return fd;
}
// Waits for a request from a *_nbx call; false when it failed.
bool finish(ucp_worker_h worker, ucs_status_ptr_t req) {
  if (req == nullptr) return true;
  if (UCS_PTR_IS_ERR(req)) return false;
  ucs_status_t s;
  while ((s = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(worker);
  ucp_request_free(req);
  return s == UCS_OK;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || (std::strcmp(argv[1], "server") != 0 && std::strcmp(argv[1], "client") != 0)) {
    std::fprintf(stderr, "usage: ucx-bidir server|client ADDR PORT SIZE ITERS\n");
    return 2;
  }
  const bool server = std::strcmp(argv[1], "server") == 0;
  const size_t size = std::strtoull(argv[4], nullptr, 10);
  const int iters = std::atoi(argv[5]);
  const int fd = connect_socket(server, argv[2], std::atoi(argv[3]));
  if (fd < 0) return fail("connecting the socket", std::strerror(errno));

  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return fail("ucp_config_read", "UCX_* variables");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  ucs_status_t s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) return fail("ucp_init", ucs_status_string(s));
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  if ((s = ucp_worker_create(context, &wp, &worker)) != UCS_OK) return fail("ucp_worker_create", ucs_status_string(s));
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  if ((s = ucp_worker_get_address(worker, &address, &address_bytes)) != UCS_OK)
    return fail("ucp_worker_get_address", ucs_status_string(s));

  uint64_t mine = address_bytes, theirs = 0;
  if (!exact(fd, &mine, sizeof mine, true) || !exact(fd, address, address_bytes, true) ||
      !exact(fd, &theirs, sizeof theirs, false))
    return fail("exchanging worker addresses", "the socket broke");
  std::vector<char> peer_address(theirs);
  if (!exact(fd, peer_address.data(), theirs, false)) return fail("exchanging worker addresses", "the socket broke");
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  ucp_ep_h ep = nullptr;
  if ((s = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK) return fail("ucp_ep_create", ucs_status_string(s));

  std::vector<char> out(size, server ? 'a' : 'b'), in(size);
  const ucp_tag_t tag = 7;
  ucp_request_param_t rp{};
  // A warm-up of a tenth (at least one), then the timed iterations, each between barriers.
  double seconds = 0;
  for (const int n : {iters / 10 + 1, iters}) {
    if (!barrier(fd)) return fail("the barrier", "the socket broke");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      ucs_status_ptr_t r = ucp_tag_recv_nbx(worker, in.data(), size, tag, ~ucp_tag_t{0}, &rp);
      ucs_status_ptr_t w = ucp_tag_send_nbx(ep, out.data(), size, tag, &rp);
      if (!finish(worker, w) || !finish(worker, r)) return fail("a transfer", "failed");
    }
    if (!barrier(fd)) return fail("the barrier", "the socket broke");
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (in[0] != (server ? 'b' : 'a') || in[size - 1] != in[0]) return fail("the data", "not what the peer sent");
  if (!server) std::printf("%.3f\n", static_cast<double>(size) * iters / seconds / 1e9);

  ucp_request_param_t close_params{};
  close_params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  close_params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  finish(worker, ucp_ep_close_nbx(ep, &close_params));
  barrier(fd);
  ucp_worker_release_address(worker, address);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  ::close(fd);
  return 0;
}
