// dcomm's libnccl.so.2: the ncclParam* functions (NCCL 2.30). The parameters are the NCCL_*
// variables dcomm honours (env_map.hpp) and dcomm's own DCOMM_* settings, each with the value
// dcomm uses now: a DCOMM_* setting as Config::from_env resolves it (its default when unset),
// an NCCL_* one as the environment has it, else as its DCOMM_* equivalent. A key dcomm does not
// know is ncclInvalidArgument naming it. docs/environment.md lists the settings.
#include <cstdint>
#include <cstring>
#include <deque>
#include <limits>
#include <map>

#include "env_map.hpp"
#include "internal.hpp"

struct ncclParamHandle {
  std::string key;
};

namespace dcomm_nccl {
namespace {

// dcomm's own settings, each as Config resolves it (or as the environment has it, for those
// Config does not hold).
Result<std::map<std::string, std::string>> dcomm_settings() {
  auto config = Config::from_env();
  if (!config.ok()) return config.status();
  const Config& c = *config;
  auto n = [](auto v) { return std::to_string(v); };
  std::map<std::string, std::string> m = {
      {"DCOMM_TIMEOUT_MS", n(c.timeout.count())},
      {"DCOMM_SLOT_BYTES", n(c.slot_bytes)},
      {"DCOMM_SLOTS", n(c.slots)},
      {"DCOMM_SMALL_SLOTS", n(c.small_slots)},
      {"DCOMM_SOCKETS_PER_PEER", n(c.sockets_per_peer)},
      {"DCOMM_SPIN", n(c.spin_iterations)},
      {"DCOMM_PROXY_SPIN_US", n(c.proxy_spin_us)},
      {"DCOMM_ZERO_COPY_BYTES", n(c.zero_copy_bytes)},
      {"DCOMM_RENDEZVOUS_BYTES", n(c.rendezvous_bytes)},
      {"DCOMM_STREAM_BYTES", n(c.stream_bytes)},
      {"DCOMM_DIRECT_BYTES", n(c.direct_bytes)},
      {"DCOMM_MAX_STAGING_BYTES", n(c.max_staging_bytes)},
      {"DCOMM_CMA_BYTES", n(c.cma_bytes)},
      {"DCOMM_CMA_REDUCE_BYTES", n(c.cma_reduce_bytes)},
      {"DCOMM_CMA_OUT_OF_PLACE_BYTES", n(c.cma_out_of_place_bytes)},
      {"DCOMM_SOCKET_IFNAME", c.socket_ifname},
      {"DCOMM_SHM_DIR", c.shm_dir},
      {"DCOMM_DETERMINISTIC", c.deterministic ? "1" : "0"},
      {"DCOMM_TRANSPORT", env_or("DCOMM_TRANSPORT", "auto")},
      {"DCOMM_ALGO", env_or("DCOMM_ALGO")},
  };
  for (const EnvMapping& e : kEnvMappings)
    if (!m.count(e.dcomm)) m[e.dcomm] = env_or(e.dcomm);
  return m;
}

// Every parameter and its value now.
Result<std::map<std::string, std::string>> all_params() {
  auto m = dcomm_settings();
  if (!m.ok()) return m.status();
  for (const EnvMapping& e : kEnvMappings) {
    const char* v = std::getenv(e.nccl);
    (*m)[e.nccl] = v ? std::string(v) : (*m)[e.dcomm];
  }
  return m;
}

Result<std::string> value_of(const std::string& key, const char* what) {
  auto m = all_params();
  if (!m.ok()) return m.status().with_context(what);
  auto it = m->find(key);
  if (it == m->end())
    return invalid_argument(what, ": '", key,
                            "' is not a parameter dcomm knows (ncclParamGetAllParameterKeys lists them)");
  return it->second;
}

template <class T>
ncclResult_t get_integer(ncclParamHandle_t h, T* out, const char* what) {
  if (!h || !out) return fail(ncclInvalidArgument, what, ": handle or out is NULL");
  auto v = value_of(h->key, what);
  if (!v.ok()) return fail(v.status());
  errno = 0;
  char* end = nullptr;
  const bool is_signed = std::numeric_limits<T>::is_signed;
  const long long s = is_signed ? std::strtoll(v->c_str(), &end, 0) : 0;
  const unsigned long long u = is_signed ? 0 : std::strtoull(v->c_str(), &end, 0);
  if (v->empty() || errno != 0 || !end || *end != '\0' || (!is_signed && v->find('-') != std::string::npos))
    return fail(ncclInvalidArgument, what, ": ", h->key, "='", *v, "' is not an integer of this type");
  if (is_signed ? (s < static_cast<long long>(std::numeric_limits<T>::min()) ||
                   s > static_cast<long long>(std::numeric_limits<T>::max()))
                : u > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
    return fail(ncclInvalidArgument, what, ": ", h->key, "=", *v, " does not fit ", sizeof(T) * 8, " bits");
  *out = is_signed ? static_cast<T>(s) : static_cast<T>(u);
  return ncclSuccess;
}

// Strings handed out stay valid until the next call of the same function on this thread.
thread_local std::string t_str_value, t_param_value;
thread_local std::vector<std::string> t_keys;
thread_local std::vector<const char*> t_key_table;

}  // namespace
}  // namespace dcomm_nccl

using namespace dcomm_nccl;

DCOMM_NCCL_API ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key) {
  if (!out || !key) return fail(ncclInvalidArgument, "ncclParamBind: out or key is NULL");
  auto v = value_of(key, "ncclParamBind");
  if (!v.ok()) return fail(v.status());
  // One handle per key for the life of the process, as NCCL's are owned by its parameter system.
  static std::mutex mu;
  static std::deque<ncclParamHandle> handles;
  std::lock_guard<std::mutex> lock(mu);
  for (ncclParamHandle& h : handles)
    if (h.key == key) return *out = &h, ncclSuccess;
  *out = &handles.emplace_back(ncclParamHandle{key});
  return ncclSuccess;
}

#define DCOMM_NCCL_PARAM_GET(Suffix, T)                                            \
  DCOMM_NCCL_API ncclResult_t pncclParamGet##Suffix(ncclParamHandle_t h, T* out) { \
    return get_integer(h, out, "ncclParamGet" #Suffix);                            \
  }
DCOMM_NCCL_PARAM_GET(I8, int8_t)
DCOMM_NCCL_PARAM_GET(I16, int16_t)
DCOMM_NCCL_PARAM_GET(I32, int32_t)
DCOMM_NCCL_PARAM_GET(I64, int64_t)
DCOMM_NCCL_PARAM_GET(U8, uint8_t)
DCOMM_NCCL_PARAM_GET(U16, uint16_t)
DCOMM_NCCL_PARAM_GET(U32, uint32_t)
DCOMM_NCCL_PARAM_GET(U64, uint64_t)

DCOMM_NCCL_API ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out) {
  if (!h || !out) return fail(ncclInvalidArgument, "ncclParamGetStr: handle or out is NULL");
  auto v = value_of(h->key, "ncclParamGetStr");
  if (!v.ok()) return fail(v.status());
  t_str_value = *v;
  *out = t_str_value.c_str();
  return ncclSuccess;
}

// The value's bytes as text (every parameter is one), without a terminating NUL.
DCOMM_NCCL_API ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len) {
  if (!h || !out || !len) return fail(ncclInvalidArgument, "ncclParamGet: handle, out or len is NULL");
  auto v = value_of(h->key, "ncclParamGet");
  if (!v.ok()) return fail(v.status());
  if (maxLen < 0 || static_cast<size_t>(maxLen) < v->size())
    return fail(ncclInvalidArgument, "ncclParamGet: ", h->key, "'s value takes ", v->size(), " bytes; maxLen is ",
                maxLen);
  std::memcpy(out, v->data(), v->size());
  *len = static_cast<int>(v->size());
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen) {
  if (!key || !value || !valueLen) return fail(ncclInvalidArgument, "ncclParamGetParameter: an argument is NULL");
  auto v = value_of(key, "ncclParamGetParameter");
  if (!v.ok()) return fail(v.status());
  t_param_value = *v;
  *value = t_param_value.c_str();
  *valueLen = static_cast<int>(t_param_value.size());
  return ncclSuccess;
}

DCOMM_NCCL_API ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen) {
  if (!table || !tableLen) return fail(ncclInvalidArgument, "ncclParamGetAllParameterKeys: table or tableLen is NULL");
  auto m = all_params();
  if (!m.ok()) return fail(m.status().with_context("ncclParamGetAllParameterKeys"));
  t_keys.clear();
  t_key_table.clear();
  for (const auto& [key, value] : *m) t_keys.push_back(key);
  for (const std::string& k : t_keys) t_key_table.push_back(k.c_str());
  *table = t_key_table.data();
  *tableLen = static_cast<int>(t_key_table.size());
  return ncclSuccess;
}

// Every parameter and its value, one a line, in dcomm's log at INFO (DCOMM_DEBUG=INFO or
// NCCL_DEBUG=INFO shows them).
DCOMM_NCCL_API void pncclParamDumpAll() {
  auto m = all_params();
  if (!m.ok()) return void(fail(m.status().with_context("ncclParamDumpAll")));
  for (const auto& [key, value] : *m) DCOMM_LOG(kInfo, kSubsysInit, -1, "NCCL API: param ", key, "='", value, "'");
}

DCOMM_NCCL_NAME(ParamBind)
DCOMM_NCCL_NAME(ParamGetI8)
DCOMM_NCCL_NAME(ParamGetI16)
DCOMM_NCCL_NAME(ParamGetI32)
DCOMM_NCCL_NAME(ParamGetI64)
DCOMM_NCCL_NAME(ParamGetU8)
DCOMM_NCCL_NAME(ParamGetU16)
DCOMM_NCCL_NAME(ParamGetU32)
DCOMM_NCCL_NAME(ParamGetU64)
DCOMM_NCCL_NAME(ParamGetStr)
DCOMM_NCCL_NAME(ParamGet)
DCOMM_NCCL_NAME(ParamGetParameter)
DCOMM_NCCL_NAME(ParamGetAllParameterKeys)
DCOMM_NCCL_NAME(ParamDumpAll)
