#include "common/data/batch_source.h"

#include <stdexcept>

#include "common/data/token_file.h"
#include "common/device/device_ops.h"

namespace trainmem {

SequentialBatches::SequentialBatches(Device& device, std::vector<std::uint16_t> tokens, std::size_t B, std::size_t T,
                                     std::size_t rank, std::size_t world)
    : device_(device),
      data_(std::move(tokens)),
      B_(B),
      T_(T),
      rank_(rank),
      world_(world),
      host_tokens_(B * T),
      host_targets_(B * T) {
  if (world_ < 1 || rank_ >= world_)
    throw std::invalid_argument("SequentialBatches: rank " + std::to_string(rank_) + " of " + std::to_string(world_));
  if (data_.size() < B * T + 1)
    throw DataError("the dataset has " + std::to_string(data_.size()) + " tokens; one batch needs " +
                    std::to_string(B * T + 1));
}

void SequentialBatches::next(Tensor& tokens, Tensor& targets) {
  if (!device_.computes()) return;  // meta: no values to read or copy
  // Walk all world*B rows of the global batch; keep this rank's B.
  for (std::size_t row = 0; row < world_ * B_; ++row) {
    if (position_ + T_ + 1 > data_.size()) position_ = 0;  // wrap: the next window would run off the end
    if (row / B_ == rank_) {
      const std::size_t b = row % B_;
      slice_window(data_.data(), position_, T_, &host_tokens_[b * T_], &host_targets_[b * T_]);
    }
    position_ += T_;
  }
  copy_host_to_device(device_, tokens.data(), host_tokens_.data(), tokens.nbytes());
  copy_host_to_device(device_, targets.data(), host_targets_.data(), targets.nbytes());
}

}  // namespace trainmem
