// The calls one training step makes, as frameworks make them; dcomm-bench and mpi-bench both
// replay them from this file, so the two run the same shapes:
//
// - ddp_step: DDP's gradient buckets, each all-reduced in place as soon as it is ready (the
//   calls start back to back, asynchronously) and all waited for together at the end of the
//   backward pass. The default is ResNet-50's 25.6 M float32 gradients in DDP's default
//   buckets: a first bucket of 1 MiB, then 25 MiB ones.
// - fsdp_step: per FSDP unit (a layer's flat parameters), the gradients reduce-scattered into
//   this rank's shard, then the parameters all-gathered from the shards, both out of place,
//   each call waited for before the next (FSDP's order). The default is 8 units of 32 MiB.
//
// -B gives the sizes: "1M,25M,25M" or "8x32M" (8 of 32 MiB), or both mixed ("1M,3x25M,22M").
// A size is rounded down to whole elements, a multiple of the rank count (at least one each).
// Plain C++ (no dcomm): mpi-bench is built by mpicxx alone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <vector>

namespace step_shapes {

inline constexpr const char* kDdpDefault = "1M,3x25M,22M";
inline constexpr const char* kFsdpDefault = "8x32M";

// "64", "256K", "25M", "1G" (binary multiples); 0 when it is not a size.
inline size_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return 0;
  if (*end == 'K') v *= 1024, ++end;
  else if (*end == 'M') v *= 1024 * 1024, ++end;
  else if (*end == 'G') v *= 1024.0 * 1024 * 1024, ++end;
  return *end ? 0 : static_cast<size_t>(v);
}

// The sizes in bytes of a -B list; empty when the list is malformed.
inline std::vector<size_t> parse_list(const std::string& list) {
  std::vector<size_t> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t comma = std::min(list.find(',', at), list.size());
    std::string item = list.substr(at, comma - at);
    size_t repeat = 1;
    if (const size_t x = item.find('x'); x != std::string::npos) {
      repeat = static_cast<size_t>(std::atol(item.substr(0, x).c_str()));
      item = item.substr(x + 1);
    }
    const size_t bytes = parse_bytes(item);
    if (bytes == 0 || repeat == 0 || repeat > 100000) return {};
    out.insert(out.end(), repeat, bytes);
    at = comma + 1;
  }
  return out;
}

// Each size as elements of `elem_bytes`: a multiple of `ranks`, at least `ranks`.
inline std::vector<size_t> element_counts(const std::vector<size_t>& bytes, size_t elem_bytes, size_t ranks) {
  std::vector<size_t> out;
  for (size_t b : bytes) out.push_back(std::max(b / elem_bytes / ranks, size_t{1}) * ranks);
  return out;
}

}  // namespace step_shapes
