// One micro-batch of random tokens on a device, and one forward + backward through a model's
// pieces as the trainer runs them: what the model tests (test_gpt.cpp, test_llama.cpp) share.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "common/device/device.h"
#include "common/device/device_ops.h"
#include "common/model/model.h"
#include "common/tensor/tensor.h"

namespace trainmem::testing_support {

struct Batch {
  Tensor tokens, targets;
  std::vector<std::int32_t> host_tokens, host_targets;
};

inline Batch random_batch(Device& device, std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> tok(0, static_cast<std::int32_t>(V) - 1);
  Batch b;
  b.host_tokens.resize(B * T);
  b.host_targets.resize(B * T);
  for (auto& t : b.host_tokens) t = tok(rng);
  for (auto& t : b.host_targets) t = tok(rng);
  const auto Bi = static_cast<std::int64_t>(B), Ti = static_cast<std::int64_t>(T);
  b.tokens = Tensor(device.allocator(), {Bi, Ti}, DType::i32, MemoryCategory::data, "tokens");
  b.targets = Tensor(device.allocator(), {Bi, Ti}, DType::i32, MemoryCategory::data, "targets");
  copy_host_to_device(device, b.tokens.data(), b.host_tokens.data(), b.tokens.nbytes());
  copy_host_to_device(device, b.targets.data(), b.host_targets.data(), b.targets.nbytes());
  return b;
}

// One forward + backward through the model's pieces, as the trainer runs them.
inline double forward_backward(Model& model, const Batch& batch) {
  model.begin(batch.tokens, batch.targets);
  model.embed_forward();
  for (std::size_t l = 0; l < model.config().layers; ++l) model.layer_forward(l);
  const double loss = model.head_forward();
  const auto N = static_cast<float>(batch.tokens.numel());
  model.head_backward(1.0f / N);
  for (std::size_t l = model.config().layers; l-- > 0;) model.layer_backward(l);
  model.embed_backward();
  model.end();
  return loss;
}

}  // namespace trainmem::testing_support
