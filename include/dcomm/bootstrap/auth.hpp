// Authenticated connections: every connection a communicator accepts (the rendezvous store,
// the control and data sockets of the mesh) opens with an HMAC-SHA-256 challenge-response over
// a job secret, so a process without the secret is closed before it can send a request.
//
//   acceptor  -> connector:  magic (8 bytes, names the service) | nonce_a (16)
//   connector -> acceptor:   nonce_c (16) | u32 payload bytes | payload | mac_c (32)
//                            mac_c = HMAC(secret, "dcomm-connector" magic nonce_a nonce_c payload)
//   acceptor  -> connector:  mac_a (32) = HMAC(secret, "dcomm-acceptor" magic nonce_c nonce_a payload)
//
// Fresh nonces on both sides: a recorded exchange cannot be replayed, and the connector knows
// it reached a holder of the secret (not merely some service on the port). The payload (the
// mesh's hello: communicator, rank, role) is covered by the MAC.
//
// The secret: a UniqueId carries one (always authenticated); a launcher start takes
// DCOMM_SECRET (64 hex digits, or any text, hashed) or DCOMM_SECRET_FILE. Without either,
// the same exchange runs with an empty key: it still rejects strays that do not speak it, but
// anyone who does can connect, and the log says so once. The MAC and the randomness are
// OpenSSL's libcrypto (HMAC, RAND_bytes, CRYPTO_memcmp).
#pragma once

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <random>
#include <sstream>
#include <string>
#include <string_view>

#include "dcomm/bootstrap/socket.hpp"
#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

struct JobSecret {
  static constexpr size_t kBytes = 32;
  std::array<uint8_t, kBytes> key{};
  bool set = false;  // false: the empty key (unauthenticated)

  static Result<JobSecret> random() {
    JobSecret s;
    if (RAND_bytes(s.key.data(), static_cast<int>(kBytes)) != 1)
      return make_error(ErrorCode::kSystemError, "RAND_bytes failed: no randomness for the job secret");
    s.set = true;
    return s;
  }
  // 64 hex digits are the key itself; any other text is hashed (SHA-256) into one.
  static Result<JobSecret> from_text(std::string_view text, const char* what) {
    if (text.empty()) return invalid_argument(what, " is empty");
    JobSecret s;
    s.set = true;
    if (auto raw = detail::from_hex(text); raw && raw->size() == kBytes) {
      std::memcpy(s.key.data(), raw->data(), kBytes);
      return s;
    }
    SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), s.key.data());
    return s;
  }
  // DCOMM_SECRET, else the contents of DCOMM_SECRET_FILE (trailing white space dropped),
  // else unset (unauthenticated).
  static Result<JobSecret> from_env() {
    const std::string text = env_or("DCOMM_SECRET"), file = env_or("DCOMM_SECRET_FILE");
    if (!text.empty()) return from_text(text, "DCOMM_SECRET");
    if (file.empty()) return JobSecret{};
    std::ifstream in(file, std::ios::binary);
    if (!in) return invalid_argument("DCOMM_SECRET_FILE=", file, ": cannot read it");
    std::stringstream ss;
    ss << in.rdbuf();
    std::string contents = ss.str();
    while (!contents.empty() && std::isspace(static_cast<unsigned char>(contents.back()))) contents.pop_back();
    return from_text(contents, "DCOMM_SECRET_FILE");
  }
  std::string hex() const { return detail::to_hex(key.data(), kBytes); }
};

// Who may use a store: the job secret, and the job's tag (empty: any tag).
struct StoreAccess {
  JobSecret secret;
  std::string job_tag;
};

namespace auth {
constexpr size_t kMagicBytes = 8, kNonceBytes = 16, kMacBytes = 32;
constexpr size_t kGreetingBytes = kMagicBytes + kNonceBytes;
constexpr size_t kMaxPayloadBytes = 256;
// The longest one handshake may take where a listener serves one connection at a time (the
// mesh's: a connection that stalls holds the others back this long). Not from any machine: TCP resends a lost segment after its retransmission timeout, 200 ms at
// least on Linux and doubled at each loss, so five losses in a row cost 6.2 s and fit (at 2 s,
// three did not: ranks over a link losing 5% of packets failed to start, now and then).
constexpr long long kHandshakeCapMs = 10000;
inline Deadline handshake_deadline(long long remaining_ms) {
  return Deadline(std::chrono::milliseconds(std::min(kHandshakeCapMs, remaining_ms)));
}
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

inline std::string_view view(const Nonce& n) { return {reinterpret_cast<const char*>(n.data()), n.size()}; }

inline Nonce fresh_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    // No randomness from OpenSSL: fall back to the kernel's (still unpredictable).
    std::random_device rd;
    for (auto& b : n) b = static_cast<uint8_t>(rd());
  }
  return n;
}

inline Mac mac_of(const JobSecret& s, std::initializer_list<std::string_view> parts) {
  std::string msg;
  for (std::string_view p : parts) msg.append(p.data(), p.size());
  Mac out{};
  unsigned len = 0;
  HMAC(EVP_sha256(), s.key.data(), s.set ? static_cast<int>(JobSecret::kBytes) : 0,
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out.data(), &len);
  return out;
}
inline bool same_mac(const void* a, const void* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

inline std::string greeting(std::string_view magic, const Nonce& nonce_a) {
  std::string g(magic.substr(0, kMagicBytes));
  g.resize(kMagicBytes, '\0');
  return g.append(view(nonce_a));
}
inline Mac connector_mac(const JobSecret& s, std::string_view magic, const Nonce& a, const Nonce& c,
                         std::string_view payload) {
  return mac_of(s, {"dcomm-connector", magic, view(a), view(c), payload});
}
inline Mac acceptor_mac(const JobSecret& s, std::string_view magic, const Nonce& a, const Nonce& c,
                        std::string_view payload) {
  return mac_of(s, {"dcomm-acceptor", magic, view(c), view(a), payload});
}
inline std::string response(const JobSecret& s, std::string_view magic, const Nonce& a, const Nonce& c,
                            std::string_view payload) {
  std::string r(view(c));
  detail::put_pod<uint32_t>(r, static_cast<uint32_t>(payload.size()));
  r.append(payload);
  const Mac m = connector_mac(s, magic, a, c, payload);
  return r.append(reinterpret_cast<const char*>(m.data()), m.size());
}

// The acceptor's reading of a connector's response in `buf` (which may hold only part of it).
enum class Verdict { kIncomplete, kGood, kBad };
struct Checked {
  Verdict verdict = Verdict::kIncomplete;
  size_t used = 0;  // bytes of buf the response took (kGood)
  Nonce nonce_c{};
  std::string payload;
  const char* why = "";  // kBad: what was wrong
};
inline Checked check_response(const JobSecret& s, std::string_view magic, const Nonce& a, std::string_view buf,
                              size_t max_payload = kMaxPayloadBytes) {
  Checked out;
  detail::ByteReader r(buf);
  auto nonce = r.bytes(kNonceBytes);
  auto len = r.pod<uint32_t>();
  if (!nonce || !len) return out;  // incomplete
  if (*len > max_payload) {
    out.verdict = Verdict::kBad, out.why = "announced an oversized hello";
    return out;
  }
  auto payload = r.bytes(*len);
  auto mac = r.bytes(kMacBytes);
  if (!payload || !mac) return out;
  std::memcpy(out.nonce_c.data(), nonce->data(), kNonceBytes);
  const Mac want = connector_mac(s, magic, a, out.nonce_c, *payload);
  if (!same_mac(want.data(), mac->data())) {
    out.verdict = Verdict::kBad, out.why = "failed authentication (a different or no DCOMM_SECRET / unique id?)";
    return out;
  }
  out.verdict = Verdict::kGood;
  out.used = buf.size() - r.left();
  out.payload = std::string(*payload);
  return out;
}

// The connector's side over a blocking socket: reads the greeting (which must carry `magic`),
// answers, and checks the acceptor's proof.
inline Status connect_handshake(int fd, const JobSecret& s, std::string_view magic, std::string_view payload,
                                const Deadline& deadline) {
  char g[kGreetingBytes];
  std::string want(magic.substr(0, kMagicBytes));
  want.resize(kMagicBytes, '\0');
  if (Status s = recv_all(fd, g, sizeof g, deadline); !s.ok())
    return make_error(ErrorCode::kPeerFailure, "no ", want.c_str(),
                      " greeting (not a dcomm endpoint, or a busy one): ", s.message());
  if (std::memcmp(g, want.data(), kMagicBytes) != 0)
    return make_error(ErrorCode::kPeerFailure, "the other side is not a dcomm ", want.c_str(), " endpoint");
  Nonce a{};
  std::memcpy(a.data(), g + kMagicBytes, kNonceBytes);
  const Nonce c = fresh_nonce();
  const std::string r = response(s, want, a, c, payload);
  DCOMM_RETURN_IF_ERROR(send_all(fd, r.data(), r.size(), deadline));
  Mac proof{};
  Status got = recv_all(fd, proof.data(), proof.size(), deadline);
  // No answer in time: a slow or lossy network, not a refusal.
  if (got.code() == ErrorCode::kTimeout) return got.with_context("waiting for the other side's proof");
  // Refused (kInvalidArgument: a setting, not a failure of the other side): the secrets
  // differ, or the other side serves another job.
  if (!got.ok())
    return invalid_argument("the connection was refused after the authentication exchange: do all ranks use the same ",
                            "job secret (DCOMM_SECRET, DCOMM_SECRET_FILE, or one unique id)?");
  const Mac want_proof = acceptor_mac(s, want, a, c, payload);
  if (!same_mac(want_proof.data(), proof.data()))
    return invalid_argument("the other side could not prove it holds the job secret");
  return {};
}

// The acceptor's side over a blocking socket; returns the connector's payload, or why it was
// refused (the caller closes the socket).
inline Result<std::string> accept_handshake(int fd, const JobSecret& s, std::string_view magic,
                                            const Deadline& deadline, size_t max_payload = kMaxPayloadBytes) {
  std::string want(magic.substr(0, kMagicBytes));
  want.resize(kMagicBytes, '\0');
  const Nonce a = fresh_nonce();
  const std::string g = greeting(want, a);
  DCOMM_RETURN_IF_ERROR(send_all(fd, g.data(), g.size(), deadline));
  // Exactly the response's bytes (nothing the connector sends after it is taken here).
  std::string buf(kNonceBytes + 4, '\0');
  DCOMM_RETURN_IF_ERROR(recv_all(fd, buf.data(), buf.size(), deadline).with_context("authentication"));
  const uint32_t len = detail::get_pod<uint32_t>(buf.data() + kNonceBytes);
  if (len > max_payload) return make_error(ErrorCode::kPeerFailure, "a connection announced an oversized hello");
  buf.resize(buf.size() + len + kMacBytes);
  DCOMM_RETURN_IF_ERROR(
      recv_all(fd, buf.data() + kNonceBytes + 4, len + kMacBytes, deadline).with_context("authentication"));
  Checked c = check_response(s, want, a, buf, max_payload);
  if (c.verdict != Verdict::kGood) return make_error(ErrorCode::kPeerFailure, "a connection ", c.why);
  const Mac proof = acceptor_mac(s, want, a, c.nonce_c, c.payload);
  DCOMM_RETURN_IF_ERROR(send_all(fd, proof.data(), proof.size(), deadline));
  return c.payload;
}

// Says once per process that connections are not authenticated.
inline void note_unauthenticated(const JobSecret& s, int rank, const char* what) {
  static std::atomic<bool> said{false};
  if (s.set || said.exchange(true)) return;
  DCOMM_LOG(kWarn, kSubsysBootstrap, rank, what, " without a job secret: connections are not authenticated ",
            "(set DCOMM_SECRET or DCOMM_SECRET_FILE on every rank, or start from a unique id)");
}
}  // namespace auth

DCOMM_NAMESPACE_END
