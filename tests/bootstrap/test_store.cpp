// The rendezvous store: its operations, and the store as an attacker or a careless client
// meets it: requests with lengths near 2^32, clients that never read their replies, idle
// connections at a low descriptor limit, huge values, connections without the job secret,
// another job's clients. Hostile cases run the store in a process of its own
// (tests/bootstrap/store_host.cpp) so its memory and CPU are measured alone.
#include <doctest/doctest.h>

#include <sys/socket.h>

#include <atomic>
#include <thread>

#include <dcomm/bootstrap/launcher.hpp>
#include <dcomm/bootstrap/store.hpp>

#include "support/child.hpp"
#include "support/sanitizers.hpp"

using namespace dcomm;
using namespace dcomm_test;
using namespace std::chrono_literals;

namespace {
const std::string kHost = DCOMM_TEST_STORE_HOST;
const std::string kSecretHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

JobSecret test_secret() { return *JobSecret::from_text(kSecretHex, "test"); }

// A store in its own process: returns its port (0 when it did not start).
int start_host(Child& c) {
  const std::string l = c.line();
  return l.rfind("port ", 0) == 0 ? std::stoi(l.substr(5)) : 0;
}
// The latest value of one of the host's counters (it prints them when they change).
long long counter(Child& c, const std::string& name) {
  std::string last = c.last_counters;
  const auto end = std::chrono::steady_clock::now() + 400ms;
  while (std::chrono::steady_clock::now() < end)
    if (std::string l = c.line(100ms); !l.empty()) last = l;
  c.last_counters = last;
  const size_t at = last.find(" " + name + "=");
  return at == std::string::npos ? -1 : std::stoll(last.substr(at + name.size() + 2));
}

// A raw connection that speaks the authentication exchange and then whatever the test sends.
Socket raw_client(int port, const JobSecret& secret, bool authenticate = true) {
  auto s = connect_to({"127.0.0.1", port}, Deadline(5000ms));
  REQUIRE(s.ok());
  if (authenticate) REQUIRE(auth::connect_handshake(s->fd(), secret, kStoreMagic, "", Deadline(5000ms)).ok());
  return std::move(*s);
}
// Reads until the store closes the connection (true) or `within` passes (false).
bool closed_within(const Socket& s, std::chrono::milliseconds within) {
  Deadline d(within);
  char buf[4096];
  while (!d.expired()) {
    pollfd p{s.fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}
// A client of the store works: set, get, in well under a second.
void store_answers(int port, const JobSecret& secret) {
  auto c = StoreClient::connect({"127.0.0.1", port}, 2000ms, {secret, {}});
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  const auto t0 = std::chrono::steady_clock::now();
  CHECK((*c)->set("probe", "value").ok());
  auto v = (*c)->get("probe");
  REQUIRE(v.ok());
  CHECK(*v == "value");
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}
}  // namespace

TEST_CASE("store: set, blocking get, add, check, erase") {
  auto server = StoreServer::start({"127.0.0.1", 0});
  REQUIRE(server.ok());
  SocketAddress addr = (*server)->address();
  auto a = StoreClient::connect(addr, 5000ms);
  auto b = StoreClient::connect(addr, 5000ms);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    CHECK((*b)->set("k", std::string("v\0w", 3)).ok());
  });
  auto v = (*a)->get("k");  // waits for the other client
  later.join();
  REQUIRE(v.ok());
  CHECK(*v == std::string("v\0w", 3));
  CHECK(*(*a)->add("n", 2) == 2);
  CHECK(*(*b)->add("n", 5) == 7);
  CHECK(*(*a)->add("n", 0) == 7);
  CHECK(*(*a)->check("k"));
  CHECK_FALSE(*(*a)->check("nothing"));
  CHECK(*(*b)->erase("k"));
  CHECK_FALSE(*(*b)->erase("k"));
  CHECK_FALSE(*(*a)->check("k"));
  CHECK((*server)->counters().bytes_held == 1 + 8);  // "n" and its 8 bytes
}

TEST_CASE("store: a wait with an abort key ends when the abort key is set, with its reason") {
  auto server = StoreServer::start({"127.0.0.1", 0});
  REQUIRE(server.ok());
  auto waiting = StoreClient::connect((*server)->address(), 20000ms);
  auto aborting = StoreClient::connect((*server)->address(), 20000ms);
  REQUIRE(waiting.ok());
  REQUIRE(aborting.ok());
  (*waiting)->set_abort_key("job/abort");
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    CHECK((*aborting)->set("job/abort", "rank 3 gave up: no GPU").ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto v = (*waiting)->get("job/info/1");  // never set
  later.join();
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().code() == ErrorCode::kAborted);
  CHECK(v.status().message() == "rank 3 gave up: no GPU");
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("store: a key that never comes times out and names the key") {
  auto server = StoreServer::start({"127.0.0.1", 0});
  REQUIRE(server.ok());
  auto c = StoreClient::connect((*server)->address(), 200ms);
  REQUIRE(c.ok());
  auto v = (*c)->get("info/3");
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().code() == ErrorCode::kTimeout);
  CHECK(v.status().message().find("info/3") != std::string::npos);
  // The connection is dropped after a timeout: later calls fail at once, they do not desync.
  CHECK_FALSE((*c)->set("x", "y").ok());
}

TEST_CASE("store: an address nobody listens on fails within the deadline") {
  auto t0 = std::chrono::steady_clock::now();
  auto c = StoreClient::connect({"127.0.0.1", 1}, 300ms);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("127.0.0.1:1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("unique id: text round trip with its secret, and rejection of garbage") {
  auto id = UniqueId::create();
  REQUIRE(id.ok());
  CHECK(id->secret.set);
  auto back = UniqueId::parse(id->to_string());
  REQUIRE(back.ok());
  CHECK(back->nonce == id->nonce);
  CHECK(back->address.port == id->address.port);
  CHECK(back->address.host == id->address.host);
  CHECK(back->secret.key == id->secret.key);
  CHECK_FALSE(UniqueId::parse("hello").ok());
  CHECK_FALSE(UniqueId::parse("dcomm1:0123456789abcdef@nohostport").ok());
  std::string text = id->to_string();
  text[10] = 'x';  // not a hex digit
  CHECK_FALSE(UniqueId::parse(text).ok());
  CHECK_FALSE(UniqueId::parse(id->to_string().substr(0, 60)).ok());
}

TEST_CASE("store: a port held by another service, or by another job's store, is skipped in a port scan") {
  // Something that is not a dcomm store listens on port P (it never greets).
  auto other = listen_on({"127.0.0.1", 0});
  REQUIRE(other.ok());
  int p = bound_port(other->fd());
  // Another job's store on the next free port of the span.
  auto theirs = detail::serve_store("127.0.0.1", p, 8, {{}, "mpirun job-A"});
  REQUIRE(theirs.ok());
  auto ours = detail::serve_store("127.0.0.1", (*theirs)->address().port + 1, 8, {{}, "mpirun job-B"});
  REQUIRE(ours.ok());
  auto c = StoreClient::connect({"127.0.0.1", p}, 5000ms, {{}, "mpirun job-B"}, 16);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK((*c)->server_address().port == (*ours)->address().port);
  CHECK((*c)->set("k", "v").ok());
  // Without the span, the client refuses the impostor instead of talking to it.
  auto strict = StoreClient::connect({"127.0.0.1", p}, 300ms, {}, 1);
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.status().message().find("not a dcomm") != std::string::npos);
  CHECK((*theirs)->counters().refused_auth >= 1);
}

TEST_CASE("store: connections without the job secret, or with another one, are refused before any request") {
  Child host({kHost, "0", "2000", "2000", "1048576", kSecretHex});
  const int port = start_host(host);
  REQUIRE(port > 0);
  // No secret, and a wrong one: refused at once (not after the whole timeout).
  const auto t0 = std::chrono::steady_clock::now();
  auto none = StoreClient::connect({"127.0.0.1", port}, 5000ms, {});
  CHECK_FALSE(none.ok());
  auto wrong = StoreClient::connect({"127.0.0.1", port}, 5000ms, {*JobSecret::from_text("another job", "x"), {}});
  CHECK_FALSE(wrong.ok());
  CHECK_MESSAGE(wrong.status().message().find("same job secret") != std::string::npos, wrong.status().message());
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  // A client that skips the exchange and sends a request: closed, the request never served.
  Socket rude = raw_client(port, {}, /*authenticate=*/false);
  const std::string req = detail::store_request(StoreOp::kSet, "stolen", "x");
  CHECK(send_all(rude.fd(), req.data(), req.size(), Deadline(1000ms)).ok());
  CHECK(closed_within(rude, 3s));
  CHECK(counter(host, "refused_auth") >= 3);
  store_answers(port, test_secret());
  auto c = StoreClient::connect({"127.0.0.1", port}, 2000ms, {test_secret(), {}});
  REQUIRE(c.ok());
  CHECK_FALSE(*(*c)->check("stolen"));
}

TEST_CASE("handshake: an acceptor that goes quiet is a timeout (a slow network), one that closes is a refusal") {
  auto listener = listen_on({"127.0.0.1", 0});
  REQUIRE(listener.ok());
  const int port = bound_port(listener->fd());
  for (bool closes : {false, true}) {
    CAPTURE(closes);
    bool served = false;            // the greeting sent and the response read
    std::atomic<bool> done{false};  // the connector's handshake returned
    std::thread acceptor([&] {
      auto s = accept_one(*listener, Deadline(5000ms));
      if (!s.ok()) return;
      // The greeting, then the connector's response read, then no proof: silence, or a close.
      const std::string g = auth::greeting(kStoreMagic, auth::Nonce{});
      char response[auth::kNonceBytes + 4 + auth::kMacBytes];
      served = send_all(s->fd(), g.data(), g.size(), Deadline(1000ms)).ok() &&
               recv_all(s->fd(), response, sizeof response, Deadline(1000ms)).ok();
      // Quiet: the socket stays open until the connector has given up (not a sleep that a
      // slow machine could outlast).
      for (Deadline d(5000ms); !closes && !done.load() && !d.expired();) std::this_thread::sleep_for(1ms);
    });
    auto c = connect_to({"127.0.0.1", port}, Deadline(5000ms));
    const Status h =
        c.ok() ? auth::connect_handshake(c->fd(), test_secret(), kStoreMagic, "", Deadline(300ms)) : c.status();
    done = true;
    acceptor.join();  // before any REQUIRE: a test that stops here must not leave it running
    REQUIRE(c.ok());
    REQUIRE(served);
    CHECK_MESSAGE(h.code() == (closes ? ErrorCode::kInvalidArgument : ErrorCode::kTimeout), h.message());
    CHECK_MESSAGE(h.message().find(closes ? "same job secret" : "the other side's proof") != std::string::npos,
                  h.message());
  }
}

TEST_CASE("store: a 21-byte request with a key length near 2^32 is refused; the store lives on") {
  Child host({kHost, "0", "2000", "2000", "1048576", "-"});
  const int port = start_host(host);
  REQUIRE(port > 0);
  for (uint32_t klen : {0xffffffffu, 0xfffffff0u, 0x80000000u, 4097u}) {
    CAPTURE(klen);
    Socket s = raw_client(port, {});
    std::string req(1, '\1');
    detail::put_pod<uint32_t>(req, klen);
    req.append(16, 'k');  // 21 bytes in all
    CHECK(send_all(s.fd(), req.data(), req.size(), Deadline(1000ms)).ok());
    uint8_t status = 0;
    CHECK(recv_all(s.fd(), &status, 1, Deadline(3000ms)).ok());
    CHECK(status == 1);  // refused, with a reason
    CHECK(closed_within(s, 3s));
  }
  // A value length near 2^64, and an unknown op.
  for (std::string bad :
       {detail::store_request(StoreOp::kSet, "k", ""), std::string(1, '\x7f') + std::string(12, '\0')}) {
    if (bad[0] == 1) std::memset(bad.data() + bad.size() - 8, 0xff, 8);
    Socket s = raw_client(port, {});
    CHECK(send_all(s.fd(), bad.data(), bad.size(), Deadline(1000ms)).ok());
    CHECK(closed_within(s, 3s));
  }
  CHECK(kill(host.pid(), 0) == 0);  // alive
  store_answers(port, {});
}

TEST_CASE("store: clients that never read their replies stall nobody and are dropped") {
  Child host({kHost, "0", "2000", "500", "4194304", "-"});
  const int port = start_host(host);
  REQUIRE(port > 0);
  auto setup = StoreClient::connect({"127.0.0.1", port}, 2000ms);
  REQUIRE(setup.ok());
  REQUIRE((*setup)->set("big", std::string(4u << 20, 'x')).ok());
  // Eight clients ask for the 4 MiB value over and over and never read.
  std::vector<Socket> silent;
  const std::string get = detail::store_request(StoreOp::kGet, "big", "");
  std::string many;
  for (int i = 0; i < 64; ++i) many += get;
  for (int i = 0; i < 8; ++i) {
    silent.push_back(raw_client(port, {}));
    send_all(silent.back().fd(), many.data(), many.size(), Deadline(2000ms)).ignore();
  }
  // Everyone else is served at once, while they sit there...
  for (int i = 0; i < 5; ++i) store_answers(port, {});
  // ...and they are dropped after DCOMM_STORE_STALL_MS (500 ms here).
  std::this_thread::sleep_for(1500ms);
  CHECK(counter(host, "dropped_stalled") >= 8);
  for (auto& s : silent) CHECK(closed_within(s, 3s));
  // Replies queued for them went with them: the store holds its data, not their backlog.
  if (!kUnderAsan) CHECK(host.rss_kib() < 64 * 1024);  // support/sanitizers.hpp
}

TEST_CASE("store: idle connections at a low descriptor limit are refused cleanly, without spinning") {
  // A limit of 64 descriptors; 200 connections that never authenticate.
  Child host({kHost, "64", "1500", "2000", "1048576", "-"});
  const int port = start_host(host);
  REQUIRE(port > 0);
  std::vector<Socket> idle;
  for (int i = 0; i < 200; ++i) {
    auto s = connect_to({"127.0.0.1", port}, Deadline(2000ms));
    if (s.ok()) idle.push_back(std::move(*s));
  }
  const double cpu0 = host.cpu_seconds();
  std::this_thread::sleep_for(1000ms);
  const double cpu = host.cpu_seconds() - cpu0;
  CHECK_MESSAGE(cpu < 0.3, "the store used ", cpu, " s of CPU in 1 s with 200 idle connections at its limit");
  CHECK(counter(host, "refused_busy") >= 1);
  // The idle ones are dropped once their time to authenticate is up; then a real client is served.
  std::this_thread::sleep_for(1500ms);
  store_answers(port, {});
}

TEST_CASE("store: a huge value is refused without being read; memory comes back when values go") {
  Child host({kHost, "0", "2000", "2000", std::to_string(64u << 20), "-"});
  const int port = start_host(host);
  REQUIRE(port > 0);
  const long before = host.rss_kib();
  // 512 MiB announced: refused at the header.
  {
    Socket s = raw_client(port, {});
    std::string req(1, '\1');
    detail::put_pod<uint32_t>(req, 1);
    req += "k";
    detail::put_pod<uint64_t>(req, 512ull << 20);
    req.append(1 << 20, 'v');
    send_all(s.fd(), req.data(), req.size(), Deadline(2000ms)).ignore();
    CHECK(closed_within(s, 3s));
  }
  if (!kUnderAsan) CHECK(host.rss_kib() - before < 16 * 1024);  // support/sanitizers.hpp
  // 48 MiB, under the limit: held while stored, returned when erased and the client leaves.
  {
    auto c = StoreClient::connect({"127.0.0.1", port}, 5000ms);
    REQUIRE(c.ok());
    REQUIRE((*c)->set("big", std::string(48u << 20, 'v')).ok());
    CHECK(host.rss_kib() - before > 40 * 1024);
    CHECK(*(*c)->erase("big"));
  }
  std::this_thread::sleep_for(300ms);
  if (!kUnderAsan)
    CHECK_MESSAGE(host.rss_kib() - before < 16 * 1024, "resident memory grew by ", host.rss_kib() - before,
                  " KiB after the value was erased");
  store_answers(port, {});
}

TEST_CASE("store: a full store refuses a set with a reason and keeps serving") {
  StoreLimits limits;
  limits.max_total_bytes = 1 << 20;
  auto server = StoreServer::start({"127.0.0.1", 0}, {}, limits);
  REQUIRE(server.ok());
  auto c = StoreClient::connect((*server)->address(), 2000ms);
  REQUIRE(c.ok());
  CHECK((*c)->set("a", std::string(700 << 10, 'a')).ok());
  Status s = (*c)->set("b", std::string(700 << 10, 'b'));
  CHECK(s.code() == ErrorCode::kOutOfResources);
  CHECK_MESSAGE(s.message().find("DCOMM_STORE_MAX_BYTES") != std::string::npos, s.message());
  CHECK((*c)->set("c", "small").ok());
  CHECK(*(*c)->get("c") == "small");
}
