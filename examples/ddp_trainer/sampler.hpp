// Distributed sampling as torch's DistributedSampler: the indices 0..n-1 shuffled from
// (seed, epoch) alike on every rank (set_epoch), padded by repeating the first ones up to a
// multiple of the ranks (or, with drop_last, cut down to one), and rank r takes every
// size-th index from r, so the shards are disjoint and every rank runs the same number of
// steps. With local batch b, step s of rank r takes shard[s*b .. s*b+b): over all ranks that
// is indices[s*B .. s*B+B) with B = b * size, the same global batch as one rank with batch B.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace trainer {

class DistributedSampler {
 public:
  DistributedSampler(int64_t n, int rank, int size, uint64_t seed, bool shuffle = true, bool drop_last = false)
      : n_(n), rank_(rank), size_(size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {}

  void set_epoch(int64_t epoch) { epoch_ = epoch; }

  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> indices() const {
    const std::vector<int64_t> all = global_order();
    std::vector<int64_t> mine;
    mine.reserve(all.size() / static_cast<size_t>(size_));
    for (size_t i = static_cast<size_t>(rank_); i < all.size(); i += static_cast<size_t>(size_)) mine.push_back(all[i]);
    return mine;
  }

  // Every rank's indices for the current epoch, interleaved: rank r's k-th is position k*size + r
  // (so a global batch B of step s is positions s*B .. s*B+B, whoever takes them: --elastic
  // splits them over the survivors).
  std::vector<int64_t> global_order() const {
    std::vector<int64_t> all(static_cast<size_t>(n_));
    std::iota(all.begin(), all.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(seed_ * 1000003u + static_cast<uint64_t>(epoch_));
      for (size_t i = all.size(); i > 1; --i)  // Fisher-Yates, the same on every standard library
        std::swap(all[i - 1], all[static_cast<size_t>(rng() % i)]);
    }
    const int64_t per = drop_last_ ? n_ / size_ : (n_ + size_ - 1) / size_;
    const int64_t total = per * size_;
    for (int64_t i = n_; i < total; ++i) all.push_back(all[static_cast<size_t>(i - n_) % static_cast<size_t>(n_)]);
    all.resize(static_cast<size_t>(total));
    return all;
  }

  int64_t per_rank() const { return drop_last_ ? n_ / size_ : (n_ + size_ - 1) / size_; }

 private:
  int64_t n_;
  int rank_, size_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
};

}  // namespace trainer
