// The ABI as NCCL 2.30.7's own nccl.h has it (the header of the wheel torch 2.15 pins, found at
// configure time: tests/nccl/CMakeLists.txt), and every function it declares taken from the
// library this program links: dcomm's libnccl.so.2. Without that header, nothing to compare.
#include "abi_facts.hpp"

#ifdef DCOMM_NCCL_NEWEST_H
// As NCCL's own Linux build sees it: ncclResetDebugInit is declared only there.
#define NCCL_OS_LINUX 1
#include DCOMM_NCCL_NEWEST_H

#include "abi_collect.inc"

std::vector<AbiFact> newest_abi_facts(){DCOMM_NCCL_ABI_BODY_2_30}

std::vector<std::pair<const char*, void*>> newest_functions() {
  return {
#include "newest_functions.inc"
  };
}
#else
std::vector<AbiFact> newest_abi_facts() { return {}; }
std::vector<std::pair<const char*, void*>> newest_functions() { return {}; }
#endif
