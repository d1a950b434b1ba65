// dcomm's libnccl.so.2 against the CUDA toolkit's nccl.h: every enum value, size and
// ncclConfig_t offset of dcomm's header equals the toolkit's; every function the toolkit's
// header declares resolves (this program links it) to dcomm's library, under both names
// (ncclX a weak alias at pncclX's address), and so does ncclAllToAll; nothing else is exported.
//   nccl_abi_test <path of dcomm's libnccl.so.2>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "abi_facts.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dcomm's libnccl.so.2>\n", argv[0]);
    return 2;
  }
  int bad = 0;
  auto theirs = toolkit_abi_facts(), ours = dcomm_abi_facts();
  if (theirs.size() != ours.size()) return std::fprintf(stderr, "FAIL: fact lists differ in length\n"), 1;
  for (size_t i = 0; i < theirs.size(); ++i)
    if (theirs[i].value != ours[i].value) {
      std::fprintf(stderr, "FAIL: %s is %lld in the toolkit's nccl.h but %lld in dcomm's\n", theirs[i].name.c_str(),
                   theirs[i].value, ours[i].value);
      ++bad;
    }
  std::printf("%zu ABI facts compared\n", theirs.size());

  char real[4096];
  if (!realpath(argv[1], real)) return std::fprintf(stderr, "FAIL: %s does not exist\n", argv[1]), 1;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return std::fprintf(stderr, "FAIL: %s is not the libnccl.so.2 this program loaded\n", argv[1]), 1;
  auto functions = toolkit_functions();
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
  std::printf("%zu functions of the toolkit's nccl.h resolved in %s\n", functions.size(), real);
  int version = 0;
  using GetVersion = int (*)(int*);
  if (reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"))(&version) != 0 || version < 22800) {
    std::fprintf(stderr, "FAIL: ncclGetVersion gave %d\n", version);
    ++bad;
  }
  std::printf(bad ? "FAILED: %d\n" : "ok: version %d\n", bad ? bad : version);
  return bad ? 1 : 0;
}
