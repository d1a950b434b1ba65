// The rendezvous store: a small key-value store over TCP, like torch's TCPStore. One process
// (rank 0, or whoever made the UniqueId) runs StoreServer (bootstrap/store_server.hpp) in a
// thread; every rank talks to it through a StoreClient (bootstrap/store_client.hpp). Ranks
// publish what others need to connect to them and wait for what they need. The protocol and
// its limits: bootstrap/store_protocol.hpp; every connection first authenticates, with the
// job's secret and tag (StoreAccess, bootstrap/auth.hpp).
#pragma once

#include "dcomm/bootstrap/store_client.hpp"
#include "dcomm/bootstrap/store_server.hpp"
