// Where a training step's tokens come from. The baseline keeps the dataset in host memory and
// copies one [B, T] window of inputs and the window shifted by one (targets) to the device per
// step; the lazy-loading suite adds other sources.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/host_tokens.h"
#include "common/device/device.h"
#include "common/tensor/tensor.h"

namespace trainmem {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills tokens and targets (int32 [B, T] on the device) with the next batch.
  virtual void next(Tensor& tokens, Tensor& targets) = 0;
};

// One training row from the dataset: the T tokens from `start` are the inputs, the same window
// shifted by one the targets (each position predicts the next token). The loaders that assemble
// rows on the host use it (SequentialBatches, suites/lazy_loading's LazyLoader).
inline void slice_window(const std::uint16_t* data, std::size_t start, std::size_t T, std::int32_t* inputs,
                         std::int32_t* targets) {
  for (std::size_t t = 0; t < T; ++t) {
    inputs[t] = data[start + t];
    targets[t] = data[start + t + 1];
  }
}

// The check every loader makes on what it has just read, before the device sees it: each of the
// `n` tokens (inputs, then targets: n = 2 * B * T) is below `vocab`. The dataset was checked when
// the run opened it; a token outside the vocabulary now means the data changed since (a file
// rewritten during the run), and would index outside the embedding and the loss. Throws
// DataError naming what was read: `what`, e.g. "data.tok, batch 12" (HostTokens::name).
void check_batch_tokens(const std::int32_t* tokens, std::size_t n, std::size_t vocab, const std::string& what);
// A vocabulary that holds every uint16 token: the loaders' `vocab` when none is given.
constexpr std::size_t kEveryToken = std::size_t{1} << 16;

// Consecutive windows through the dataset, wrapping around at its end: batch k row b starts at
// token (k * B + b) * T. Deterministic, so two runs see the same batches in the same order.
//
// Data parallel: with `world` ranks, each of B rows, the global batch has world*B rows and rank r
// gets rows r*B .. r*B+B-1 of it. So N ranks of B rows see exactly the batches one rank of N*B
// rows sees, which is what the sharding suites' equality tests rely on.
//
// On the meta device it reads nothing and holds no batch buffer: the tokens may have no values
// (HostTokens::without_values).
class SequentialBatches : public BatchSource {
 public:
  // `vocab`: each batch's tokens are checked to be below it (check_batch_tokens).
  SequentialBatches(Device& device, HostTokens tokens, std::size_t B, std::size_t T, std::size_t rank = 0,
                    std::size_t world = 1, std::size_t vocab = kEveryToken);
  SequentialBatches(Device& device, std::vector<std::uint16_t> tokens, std::size_t B, std::size_t T,
                    std::size_t rank = 0, std::size_t world = 1)
      : SequentialBatches(device, HostTokens(std::move(tokens)), B, T, rank, world) {}
  void next(Tensor& tokens, Tensor& targets) override;
  std::size_t position() const { return position_; }

 private:
  Device& device_;
  HostTokens data_;
  std::size_t B_, T_;
  std::size_t rank_, world_;
  std::size_t vocab_;
  std::size_t position_ = 0;
  std::uint64_t served_ = 0;
  std::vector<std::int32_t> host_batch_;  // tokens [B*T] then targets [B*T]; empty on meta
};

}  // namespace trainmem
