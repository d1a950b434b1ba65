// The ABI as dcomm's nccl/include/nccl.h has it.
#include "../../nccl/include/nccl.h"

#include "abi_facts.hpp"
#include "abi_collect.inc"

std::vector<AbiFact> dcomm_abi_facts() { DCOMM_NCCL_ABI_BODY_2_30 }
