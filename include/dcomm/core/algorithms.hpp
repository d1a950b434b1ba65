// The algorithms' names, once: the enum the cost model and the dispatch use, the names
// DCOMM_ALGO forces them by (and logs print), and which collectives each runs.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "dcomm/core/call.hpp"
#include "dcomm/core/config.hpp"

DCOMM_NAMESPACE_BEGIN

// kSingleCopyIfRegistered: single copy when every rank's buffers came from dcomm::mem_alloc
// (known to all ranks once the descriptors are swapped), else the ring.
enum class Algorithm {
  kRing,
  kDirect,
  kSingleCopy,
  kSingleCopyIfRegistered,
  kRecursiveDoubling,
  kRabenseifner,
  kHalvingDoubling,
  kTree,
  kDoubleTree,
  kHierarchical,
  kOrdered  // DCOMM_DETERMINISTIC: algo/ordered.hpp
};

inline const char* to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kSingleCopy: return "single_copy";
    case Algorithm::kSingleCopyIfRegistered: return "single_copy_if_registered";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kRabenseifner: return "rabenseifner";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kTree: return "tree";
    case Algorithm::kDoubleTree: return "double_tree";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kOrdered: return "ordered";
  }
  return "?";
}

// The algorithms DCOMM_ALGO can name (not the internal kSingleCopyIfRegistered and kOrdered).
inline constexpr Algorithm kForcibleAlgorithms[] = {
    Algorithm::kRing,         Algorithm::kDirect,          Algorithm::kSingleCopy, Algorithm::kRecursiveDoubling,
    Algorithm::kRabenseifner, Algorithm::kHalvingDoubling, Algorithm::kTree,       Algorithm::kDoubleTree,
    Algorithm::kHierarchical};

inline std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (Algorithm a : kForcibleAlgorithms)
    if (name == to_string(a)) return a;
  return std::nullopt;
}

// Which algorithm runs which collective: the one list that forcing (DCOMM_ALGO), the cost
// model's candidates (comm/algorithm_choice.hpp) and the dispatch (comm/dispatch.hpp) read,
// each collective's in the cost model's order of preference on a tie. "ring" is the chain for
// broadcast and reduce.
struct AlgorithmFor {
  OpKind kind;
  Algorithm algorithm;
};
inline constexpr AlgorithmFor kAlgorithmsFor[] = {
    {OpKind::kAllReduce, Algorithm::kRing},
    {OpKind::kAllReduce, Algorithm::kDirect},
    {OpKind::kAllReduce, Algorithm::kRecursiveDoubling},
    {OpKind::kAllReduce, Algorithm::kRabenseifner},
    {OpKind::kAllReduce, Algorithm::kTree},
    {OpKind::kAllReduce, Algorithm::kDoubleTree},
    {OpKind::kAllReduce, Algorithm::kHierarchical},
    {OpKind::kAllReduce, Algorithm::kSingleCopy},
    {OpKind::kAllReduce, Algorithm::kSingleCopyIfRegistered},
    {OpKind::kAllReduce, Algorithm::kOrdered},
    {OpKind::kReduceScatter, Algorithm::kRing},
    {OpKind::kReduceScatter, Algorithm::kDirect},
    {OpKind::kReduceScatter, Algorithm::kHalvingDoubling},
    {OpKind::kReduceScatter, Algorithm::kSingleCopy},
    {OpKind::kReduceScatter, Algorithm::kSingleCopyIfRegistered},
    {OpKind::kReduceScatter, Algorithm::kOrdered},
    {OpKind::kAllGather, Algorithm::kRing},
    {OpKind::kAllGather, Algorithm::kDirect},
    {OpKind::kAllGather, Algorithm::kHalvingDoubling},
    {OpKind::kAllGather, Algorithm::kSingleCopy},
    {OpKind::kBroadcast, Algorithm::kRing},
    {OpKind::kBroadcast, Algorithm::kTree},
    {OpKind::kBroadcast, Algorithm::kSingleCopy},
    {OpKind::kReduce, Algorithm::kRing},
    {OpKind::kReduce, Algorithm::kTree},
    {OpKind::kReduce, Algorithm::kSingleCopy},
    {OpKind::kReduce, Algorithm::kSingleCopyIfRegistered},
    {OpKind::kReduce, Algorithm::kOrdered},
};
namespace detail {
// The list as one bit per algorithm for each collective, made at compile time: the dispatch asks
// on every call.
static_assert(static_cast<unsigned>(Algorithm::kOrdered) < 32, "one bit per algorithm in an unsigned");
constexpr std::array<unsigned, kNumOpKinds> algorithms_by_kind() {
  std::array<unsigned, kNumOpKinds> bits{};
  for (const AlgorithmFor& f : kAlgorithmsFor)
    bits[static_cast<size_t>(f.kind)] |= 1u << static_cast<unsigned>(f.algorithm);
  return bits;
}
inline constexpr std::array<unsigned, kNumOpKinds> kAlgorithmsByKind = algorithms_by_kind();
}  // namespace detail
constexpr bool runs(Algorithm a, OpKind k) {
  return ((detail::kAlgorithmsByKind[static_cast<size_t>(k)] >> static_cast<unsigned>(a)) & 1u) != 0;
}

// The collectives DCOMM_ALGO can force an algorithm for, in OpKind order.
inline constexpr const char* kAlgoCollectives[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};
inline bool algo_valid_for(const std::string& name, int collective) {
  const auto a = parse_algorithm(name);
  return a && collective >= 0 && collective < 5 && runs(*a, static_cast<OpKind>(collective));
}

DCOMM_NAMESPACE_END
