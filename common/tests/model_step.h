// One micro-batch of random tokens on a device, one forward + backward through a model's pieces
// as the trainer runs them, and the gradient check against finite differences: what the model
// tests (test_gpt.cpp, test_llama.cpp) share.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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
  const auto N = static_cast<float>(batch.tokens.numel());
  const double loss = model.head_forward(1.0f / N);
  model.head_backward();
  for (std::size_t l = model.config().layers; l-- > 0;) model.layer_backward(l);
  model.embed_backward();
  model.end();
  return loss;
}

// A micro-step ends where it began: forward + backward on a random batch of 2 x 64 tokens free
// every activation and workspace tensor they made (the activations did exist), and the device
// holds what it held before (the batch included).
inline void expect_a_step_ends_where_it_began(Model& model) {
  const Batch batch = random_batch(model.device(), 2, 64, model.config().vocab, 5);
  CachingAllocator& allocator = model.device().allocator();
  const MemoryStats before = allocator.stats();
  forward_backward(model, batch);
  const MemoryStats after = allocator.stats();
  EXPECT_EQ(after.by_category[index_of(MemoryCategory::activations)].current, 0);
  EXPECT_EQ(after.by_category[index_of(MemoryCategory::workspace)].current, 0);
  EXPECT_GT(after.by_category[index_of(MemoryCategory::activations)].peak, 0);
  EXPECT_EQ(after.allocated_bytes[0].current, before.allocated_bytes[0].current);
}

// The gradient check: for 6 random elements of every parameter tensor, the model's gradient
// (float, the real code path) against the central difference (h = 1e-5) of `loss`, a forward in
// double precision over `params` (the parameters in Model::parameters() order):
//   |analytic - numeric| <= 1e-3 max(|numeric|, 1e-2) + 1e-5   (float gradients, double differences).
// The vocabulary's padding rows (of wte, and of an untied head) have a gradient of exactly 0 and
// are not drawn, so that every check can fail. Returns how many elements were checked.
inline std::size_t expect_gradients_match_differences(Model& model, const std::vector<float>& grads,
                                                      std::vector<double>& params,
                                                      const std::function<double(const std::vector<double>&)>& loss,
                                                      std::mt19937_64& rng) {
  const double h = 1e-5;
  const std::size_t vocab_rows = model.config().vocab * model.config().dim;
  std::size_t offset = 0, checked = 0;
  for (const Parameter& p : model.parameters()) {
    const std::size_t n = p.numel(), live = p.name == "wte" || p.name == "head.weight" ? vocab_rows : n;
    std::uniform_int_distribution<std::size_t> pick(0, live - 1);
    for (int k = 0; k < 6; ++k) {
      const std::size_t i = offset + pick(rng);
      const double saved = params[i];
      params[i] = saved + h;
      const double up = loss(params);
      params[i] = saved - h;
      const double down = loss(params);
      params[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grads[i], numeric, 1e-3 * std::max(std::abs(numeric), 1e-2) + 1e-5)
          << p.name << "[" << (i - offset) << "]";
      ++checked;
    }
    offset += n;
  }
  return checked;
}

// A double-precision forward of the model over `params` (in Model::parameters() order) on the
// batch's host tokens and targets: the mean loss. Each family's test writes its own.
using ReferenceLoss = std::function<double(const std::vector<double>& params, const Batch& batch)>;

// A family's gradient check, whole: random values N(0, 0.3) for every parameter (biases and norm
// weights too, so that no gradient is trivially 0), one forward + backward on a random B x T
// batch, the float loss against reference_loss's to 1e-5 relative, and 6 elements of every
// parameter tensor against central differences of reference_loss (the test above).
inline void expect_gradients_match_reference(Model& model, std::size_t B, std::size_t T,
                                             const ReferenceLoss& reference_loss) {
  std::vector<float> values = model.parameter_values();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (float& v : values) v = normal(rng);
  model.set_parameter_values(values);

  const Batch batch = random_batch(model.device(), B, T, model.config().vocab, 3);
  const double loss = forward_backward(model, batch);
  const std::vector<float> grads = model.gradient_values();
  std::vector<double> params(values.begin(), values.end());
  const double ref = reference_loss(params, batch);
  EXPECT_NEAR(loss, ref, 1e-5 * std::abs(ref)) << "float model loss vs double reference";

  const std::size_t checked = expect_gradients_match_differences(
      model, grads, params, [&](const std::vector<double>& p) { return reference_loss(p, batch); }, rng);
  EXPECT_EQ(checked, model.parameters().size() * 6);
}

}  // namespace trainmem::testing_support
