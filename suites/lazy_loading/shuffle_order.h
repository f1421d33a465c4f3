// The order in which both loaders visit the dataset: deterministic by seed and epoch.
//
// The dataset of n tokens is cut into S = (n - 1) / T windows; window i starts at token i * T and
// covers T + 1 tokens (inputs i*T .. i*T+T-1, targets one to the right). An epoch is a permutation
// of the S windows, taken B at a time: S / B batches per epoch (a last partial batch is dropped).
// Batch k overall is batch k % (S / B) of epoch k / (S / B).
//
// Epoch e's permutation is a Fisher–Yates shuffle driven by std::mt19937_64(seed ^ mix(e)), where
// mix is splitmix64's finalizer, so neighbouring epochs (and seeds) get unrelated orders. The
// index is drawn as rng() % (i + 1) rather than with std::uniform_int_distribution, whose
// algorithm differs between standard libraries: the same seed gives the same batches everywhere
// (the modulo bias, at most S / 2^64, is immaterial). With shuffle off the order is 0, 1, 2, ...
//
// The eager and the lazy loader each own one ShuffleOrder built from the same arguments, which is
// why they yield the same batches in the same order.
//
// Several ranks (mpirun -np N, data parallel): the epoch is cut into global batches of N * B
// windows, and rank r takes rows r*B .. r*B + B - 1 of each (as PyTorch's DistributedSampler
// gives each rank its part of the same shuffled order). So N ranks of B rows see exactly the
// batches one process with N * B rows sees, which is what lets the sharded runs be compared with
// a single process. Every rank draws the same permutation: it depends on seed and epoch only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/data/token_file.h"

namespace trainmem::lazy_loading {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

class ShuffleOrder {
 public:
  // B is this rank's rows per batch; rank r of `world` ranks. Throws DataError when the dataset
  // is smaller than one global batch (world * B * T + 1 tokens).
  ShuffleOrder(std::size_t num_tokens, std::size_t B, std::size_t T, std::uint64_t seed, bool shuffle = true,
               std::size_t rank = 0, std::size_t world = 1)
      : B_(B), T_(T), seed_(seed), shuffle_(shuffle), rank_(rank), world_(world) {
    if (B == 0 || T == 0) throw std::invalid_argument("batch and sequence length must be at least 1");
    if (world == 0 || rank >= world)
      throw std::invalid_argument("rank " + std::to_string(rank) + " is not one of " + std::to_string(world) + " ranks");
    const std::size_t global_rows = world * B;
    if (num_tokens < global_rows * T + 1) {
      std::string what = "the dataset has " + std::to_string(num_tokens) + " tokens; one batch of ";
      if (world > 1) what += std::to_string(world) + " ranks x ";
      what += std::to_string(B);
      what += " x ";
      what += std::to_string(T);
      what += " needs ";
      what += std::to_string(global_rows * T + 1);
      what += " (use a smaller --batch or --seq";
      what += world > 1 ? ", or fewer ranks)" : ")";
      throw DataError(what);
    }
    windows_ = (num_tokens - 1) / T;
    batches_per_epoch_ = windows_ / global_rows;
  }

  std::size_t windows() const { return windows_; }
  std::size_t batches_per_epoch() const { return batches_per_epoch_; }

  // The epoch's window order (a permutation of 0 .. windows() - 1).
  std::vector<std::uint64_t> permutation(std::uint64_t epoch) const {
    std::vector<std::uint64_t> p(windows_);
    for (std::size_t i = 0; i < windows_; ++i) p[i] = i;
    if (!shuffle_) return p;
    std::mt19937_64 rng(seed_ ^ splitmix64(epoch));
    for (std::size_t i = windows_; i-- > 1;) {
      const std::uint64_t j = rng() % (i + 1);
      std::swap(p[i], p[j]);
    }
    return p;
  }

  // The first token of each of this rank's B rows of batch k. Not thread-safe (caches the current
  // epoch's permutation): each loader, and each loader's worker thread, has its own.
  void row_starts(std::uint64_t k, std::size_t* out) {
    const std::uint64_t epoch = k / batches_per_epoch_;
    if (!cached_ || epoch != cached_epoch_) {
      order_ = permutation(epoch);
      cached_epoch_ = epoch;
      cached_ = true;
    }
    // global batch k % batches_per_epoch_ of the epoch: world * B windows, this rank's B of them
    const std::size_t first = static_cast<std::size_t>(k % batches_per_epoch_) * world_ * B_ + rank_ * B_;
    for (std::size_t b = 0; b < B_; ++b) out[b] = static_cast<std::size_t>(order_[first + b]) * T_;
  }

 private:
  std::size_t B_, T_;
  std::uint64_t seed_;
  bool shuffle_;
  std::size_t rank_, world_;
  std::size_t windows_ = 0, batches_per_epoch_ = 0;
  std::vector<std::uint64_t> order_;
  std::uint64_t cached_epoch_ = 0;
  bool cached_ = false;
};

}  // namespace trainmem::lazy_loading
