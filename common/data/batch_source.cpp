#include "common/data/batch_source.h"

#include <algorithm>
#include <stdexcept>

#include "common/data/token_file.h"
#include "common/device/device_ops.h"

namespace trainmem {

void check_batch_tokens(const std::int32_t* tokens, std::size_t n, std::size_t vocab, const std::string& what) {
  if (n == 0) return;
  const std::int32_t max = *std::max_element(tokens, tokens + n);
  if (static_cast<std::size_t>(max) >= vocab)
    throw DataError(what + ": token " + std::to_string(max) +
                    ", outside the model's vocabulary of " + std::to_string(vocab) +
                    ": the data changed after the run checked it (was the file rewritten during the run?)");
}

SequentialBatches::SequentialBatches(Device& device, HostTokens tokens, std::size_t B, std::size_t T, std::size_t rank,
                                     std::size_t world, std::size_t vocab)
    : device_(device), data_(std::move(tokens)), B_(B), T_(T), rank_(rank), world_(world), vocab_(vocab) {
  if (world_ < 1 || rank_ >= world_)
    throw std::invalid_argument("SequentialBatches: rank " + std::to_string(rank_) + " of " + std::to_string(world_));
  if (data_.size() < B * T + 1)
    throw DataError("the dataset has " + std::to_string(data_.size()) + " tokens; one batch needs " +
                    std::to_string(B * T + 1));
  if (device_.computes()) host_batch_.resize(2 * B * T);
}

void SequentialBatches::next(Tensor& tokens, Tensor& targets) {
  if (!device_.computes()) return;  // meta: no values to read or copy
  std::int32_t* const host_tokens = host_batch_.data();
  std::int32_t* const host_targets = host_tokens + B_ * T_;
  std::size_t position = position_;
  data_.read_tokens([&](const std::uint16_t* data) {
    // Walk all world*B rows of the global batch; keep this rank's B.
    for (std::size_t row = 0; row < world_ * B_; ++row) {
      if (position + T_ + 1 > data_.size()) position = 0;  // wrap: the next window would run off the end
      if (row / B_ == rank_) {
        const std::size_t b = row % B_;
        slice_window(data, position, T_, host_tokens + b * T_, host_targets + b * T_);
      }
      position += T_;
    }
  });
  position_ = position;
  check_batch_tokens(host_tokens, host_batch_.size(), vocab_, data_.name() + ", batch " + std::to_string(served_++));
  copy_host_to_device(device_, tokens.data(), host_tokens, tokens.nbytes());
  copy_host_to_device(device_, targets.data(), host_targets, targets.nbytes());
}

}  // namespace trainmem
