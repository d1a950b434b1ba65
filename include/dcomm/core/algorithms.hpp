// The algorithms' names, once: the enum the cost model and the dispatch use, the names
// DCOMM_ALGO forces them by (and logs print), and which collectives each can be forced for.
#pragma once

#include <optional>
#include <string>
#include <string_view>

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

// The collectives an algorithm can be forced for (DCOMM_ALGO), in OpKind order, and the
// algorithms each accepts ("ring" is the chain for broadcast and reduce).
inline constexpr const char* kAlgoCollectives[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"};
inline bool algo_valid_for(const std::string& name, int collective) {
  using A = Algorithm;
  constexpr auto bit = [](A a) { return 1u << static_cast<unsigned>(a); };
  static constexpr unsigned kValid[] = {
      bit(A::kRing) | bit(A::kDirect) | bit(A::kSingleCopy) | bit(A::kRecursiveDoubling) | bit(A::kRabenseifner) |
          bit(A::kTree) | bit(A::kDoubleTree) | bit(A::kHierarchical),
      bit(A::kRing) | bit(A::kDirect) | bit(A::kSingleCopy) | bit(A::kHalvingDoubling),
      bit(A::kRing) | bit(A::kDirect) | bit(A::kSingleCopy) | bit(A::kHalvingDoubling),
      bit(A::kRing) | bit(A::kSingleCopy) | bit(A::kTree), bit(A::kRing) | bit(A::kTree)};
  const auto a = parse_algorithm(name);
  return a && collective >= 0 && collective < 5 && (kValid[collective] & bit(*a)) != 0;
}

DCOMM_NAMESPACE_END
