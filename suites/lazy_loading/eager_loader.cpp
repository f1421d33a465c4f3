#include "suites/lazy_loading/eager_loader.h"

#include <algorithm>
#include <stdexcept>

#include "common/device/device_ops.h"

namespace trainmem::lazy_loading {

EagerLoader::EagerLoader(Device& device, const HostTokens& tokens, std::size_t B, std::size_t T,
                         EagerLoaderOptions options)
    : device_(device), B_(B), T_(T), order_(tokens.size(), B, T, options.seed, options.shuffle, options.rank, options.world) {
  const std::size_t n = tokens.size();
  dataset_ = Tensor(device_.allocator(), {static_cast<std::int64_t>(n)}, DType::i32, MemoryCategory::data,
                    "dataset.tokens");
  if (!device_.computes()) return;  // meta: nothing to upload (the tokens may have no values)
  starts_.resize(B);
  // Upload in chunks so the host needs 4 MiB of int32 staging, not a second copy of the dataset.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<std::int32_t> chunk(std::min(n, kChunk));
  auto* dst = dataset_.data_as<std::int32_t>();
  for (std::size_t i = 0; i < n; i += kChunk) {
    const std::size_t m = std::min(kChunk, n - i);
    tokens.read_tokens([&](const std::uint16_t* data) { std::copy(data + i, data + i + m, chunk.begin()); });
    check_batch_tokens(chunk.data(), m, options.vocab, tokens.name() + ", read for the upload");
    copy_host_to_device(device_, dst + i, chunk.data(), m * sizeof(std::int32_t));
  }
}

void EagerLoader::next(Tensor& tokens, Tensor& targets) {
  const std::size_t row_bytes = T_ * sizeof(std::int32_t);
  if (tokens.nbytes() != B_ * row_bytes || targets.nbytes() != B_ * row_bytes)
    throw std::invalid_argument("EagerLoader::next: the batch tensors must be int32 [B, T] = [" + std::to_string(B_) +
                                ", " + std::to_string(T_) + "]");
  if (!device_.computes()) {  // meta: no rows to copy
    ++served_;
    return;
  }
  order_.row_starts(served_, starts_.data());
  const auto* data = dataset_.data_as<std::int32_t>();
  auto* x = static_cast<std::int32_t*>(tokens.data());
  auto* y = static_cast<std::int32_t*>(targets.data());
  for (std::size_t b = 0; b < B_; ++b) {
    copy_device_to_device(device_, x + b * T_, data + starts_[b], row_bytes);
    copy_device_to_device(device_, y + b * T_, data + starts_[b] + 1, row_bytes);
  }
  ++served_;
}

}  // namespace trainmem::lazy_loading
