#include <doctest/doctest.h>

#include <thread>

#include <dcomm/bootstrap/launcher.hpp>
#include <dcomm/bootstrap/store.hpp>

using namespace dcomm;
using namespace std::chrono_literals;

TEST_CASE("store: set, blocking get, add") {
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

TEST_CASE("unique id: text round trip and rejection of garbage") {
  auto id = UniqueId::create();
  REQUIRE(id.ok());
  auto back = UniqueId::parse(id->to_string());
  REQUIRE(back.ok());
  CHECK(back->nonce == id->nonce);
  CHECK(back->address.port == id->address.port);
  CHECK(back->address.host == id->address.host);
  CHECK_FALSE(UniqueId::parse("hello").ok());
  CHECK_FALSE(UniqueId::parse("dcomm1:0123456789abcdef@nohostport").ok());
}

TEST_CASE("store: a port held by another service is skipped when a span of ports is allowed") {
  // Something that is not a dcomm store listens on port P (it never greets).
  auto other = listen_on({"127.0.0.1", 0});
  REQUIRE(other.ok());
  int p = bound_port(other->fd());
  // The server cannot have P, so it takes the next free port in the span.
  auto server = detail::serve_store(p, 8);
  REQUIRE(server.ok());
  CHECK((*server)->address().port > p);
  CHECK((*server)->address().port < p + 8);
  auto c = StoreClient::connect({"127.0.0.1", p}, 5000ms, 8);
  REQUIRE_MESSAGE(c.ok(), c.status().message());
  CHECK((*c)->server_address().port == (*server)->address().port);
  CHECK((*c)->set("k", "v").ok());
  // Without the span, the client refuses the impostor instead of talking to it.
  auto strict = StoreClient::connect({"127.0.0.1", p}, 300ms, 1);
  REQUIRE_FALSE(strict.ok());
  CHECK(strict.status().message().find("not a dcomm rendezvous store") != std::string::npos);
}
