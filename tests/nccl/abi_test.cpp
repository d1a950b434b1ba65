// dcomm's libnccl.so.2 against NCCL's own headers, fact by fact: every enum value, size and
// ncclConfig_t offset of dcomm's nccl.h equals NCCL 2.30.7's (the header torch 2.15's wheel
// pins), and equals the CUDA toolkit's 2.28.9 except the four facts NCCL's version rules change
// (kVersioned: the version, ncclNumResults, the config's size, its initializer's version),
// where 2.30's config must extend 2.28's. Every function either header declares resolves (this
// program links it) to dcomm's library, under both names (ncclX a weak alias at pncclX's
// address), and so does ncclAllToAll.
//   nccl_abi_test <path of dcomm's libnccl.so.2>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "abi_facts.hpp"

namespace {

bool versioned(const std::string& name) {
  for (const char* v : kVersioned)
    if (name == v) return true;
  return false;
}

// Compares `ours` with a header's facts (by name: `theirs` may be a prefix of ours); the
// versioned ones only where `all` says.
int compare(const std::vector<AbiFact>& theirs, const std::vector<AbiFact>& ours, const char* header, bool all) {
  std::map<std::string, long long> mine;
  for (const AbiFact& f : ours) mine[f.name] = f.value;
  int bad = 0, compared = 0;
  for (const AbiFact& f : theirs) {
    if (!all && versioned(f.name)) continue;
    ++compared;
    auto it = mine.find(f.name);
    if (it == mine.end() || it->second != f.value) {
      std::fprintf(stderr, "FAIL: %s is %lld in %s but %lld in dcomm's\n", f.name.c_str(), f.value, header,
                   it == mine.end() ? -1 : it->second);
      ++bad;
    }
  }
  std::printf("%d ABI facts of %s compared\n", compared, header);
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dcomm's libnccl.so.2>\n", argv[0]);
    return 2;
  }
  auto old_facts = toolkit_abi_facts(), newest = newest_abi_facts(), ours = dcomm_abi_facts();
  int bad = compare(old_facts, ours, "the toolkit's nccl.h (2.28)", false);
  std::map<std::string, long long> o, m;
  for (const AbiFact& f : old_facts) o[f.name] = f.value;
  for (const AbiFact& f : ours) m[f.name] = f.value;
  if (!(m["sizeof(ncclConfig_t)"] > o["sizeof(ncclConfig_t)"] && m["NCCL_VERSION_CODE"] > o["NCCL_VERSION_CODE"] &&
        m["config_initializer_version"] == m["NCCL_VERSION_CODE"])) {
    std::fprintf(stderr, "FAIL: dcomm's config (%lld bytes, version %lld) does not extend 2.28's (%lld bytes)\n",
                 m["sizeof(ncclConfig_t)"], m["config_initializer_version"], o["sizeof(ncclConfig_t)"]);
    ++bad;
  }
  if (newest.empty()) {
    std::printf("NCCL 2.30.7's nccl.h was not found at configure time: dcomm's 2.30 facts unchecked\n");
  } else {
    bad += compare(newest, ours, "NCCL 2.30.7's nccl.h", true);
    if (newest.size() != ours.size()) {
      std::fprintf(stderr, "FAIL: %zu facts in 2.30.7's nccl.h, %zu in dcomm's\n", newest.size(), ours.size());
      ++bad;
    }
  }

  char real[4096];
  if (!realpath(argv[1], real)) return std::fprintf(stderr, "FAIL: %s does not exist\n", argv[1]), 1;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return std::fprintf(stderr, "FAIL: %s is not the libnccl.so.2 this program loaded\n", argv[1]), 1;
  auto functions = toolkit_functions();
  for (auto f : newest_functions()) functions.push_back(f);
  for (auto [name, linked] : functions) {
    Dl_info info{};
    char found[4096] = {};
    if (!dladdr(linked, &info) || !info.dli_fname || !realpath(info.dli_fname, found) ||
        std::strcmp(found, real) != 0) {
      std::fprintf(stderr, "FAIL: %s resolves to %s, not dcomm's library\n", name,
                   info.dli_fname ? info.dli_fname : "nothing");
      ++bad;
    }
    const std::string plain = name[0] == 'p' ? name + 1 : name, profiled = "p" + plain;
    void* a = dlsym(lib, plain.c_str());
    void* b = dlsym(lib, profiled.c_str());
    if (!a || !b || a != b) {
      std::fprintf(stderr, "FAIL: %s and %s are not one function in dcomm's library\n", plain.c_str(),
                   profiled.c_str());
      ++bad;
    }
  }
  if (dlsym(lib, "ncclAllToAll") != dlsym(lib, "ncclAlltoAll") || !dlsym(lib, "ncclAllToAll")) {
    std::fprintf(stderr, "FAIL: ncclAllToAll is not ncclAlltoAll\n");
    ++bad;
  }
  std::printf("%zu functions of the toolkit's and 2.30.7's nccl.h resolved in %s\n", functions.size(), real);
  int version = 0;
  using GetVersion = int (*)(int*);
  if (reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"))(&version) != 0 || version != m["NCCL_VERSION_CODE"]) {
    std::fprintf(stderr, "FAIL: ncclGetVersion gave %d\n", version);
    ++bad;
  }
  std::printf(bad ? "FAILED: %d\n" : "ok: version %d\n", bad ? bad : version);
  return bad ? 1 : 0;
}
