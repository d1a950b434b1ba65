// The ABI as the CUDA toolkit's own nccl.h has it (the include path puts it first), and every
// function it declares taken from the library this program links: dcomm's libnccl.so.2.
#include <nccl.h>

#include "abi_facts.hpp"
#include "abi_collect.inc"

std::vector<AbiFact> toolkit_abi_facts(){DCOMM_NCCL_ABI_BODY}

std::vector<std::pair<const char*, void*>> toolkit_functions() {
  return {
#include "toolkit_functions.inc"
  };
}
