// The activation formula (common/model/saved_activations.h) against the run: after a layer's
// forward, the live blocks of the `activations` category are x_l, x_{l+1} and exactly the tensors
// the formula lists, size for size; selective recompute's release frees exactly the ones it marks;
// the head's forward adds exactly the head's. For both families (Llama's with a mixture of experts
// too), naive and flash attention, fp32 and bf16, and a micro-batch shorter than the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/model/model.h"
#include "common/model/saved_activations.h"
#include "common/model/storage_type.h"
#include "common/tests/cpu_device.h"
#include "common/tests/model_step.h"

namespace trainmem {
namespace {

using testing_support::cpu_device;
using testing_support::random_batch;

// The requested sizes of the live activation blocks, sorted.
std::vector<std::size_t> live_activation_sizes(const Device& device) {
  std::vector<std::size_t> sizes;
  for (const SegmentSnapshot& segment : const_cast<Device&>(device).allocator().snapshot())
    for (const BlockSnapshot& b : segment.blocks)
      if (b.state == BlockSnapshot::State::active_allocated && b.category == MemoryCategory::activations)
        sizes.push_back(b.requested_size);
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

std::vector<std::size_t> sizes_of(const std::vector<SavedTensor>& tensors, bool selective_only = false) {
  std::vector<std::size_t> sizes;
  for (const SavedTensor& t : tensors)
    if (!selective_only || t.selective) sizes.push_back(t.bytes);
  return sizes;
}

std::vector<std::size_t> sorted(std::vector<std::size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

struct Case {
  std::string model;
  AttentionKind attention;
  Precision precision;
};

class SavedActivationsAgainstTheRun : public testing::TestWithParam<Case> {};

TEST_P(SavedActivationsAgainstTheRun, LayerSelectiveAndHeadTensorsAreTheFormulas) {
  const Case& c = GetParam();
  ModelConfig config = model_preset(c.model);
  const std::size_t B = 2, T = config.seq - 16;  // shorter than the context: the formula takes T
  auto device = cpu_device();
  ModelOptions options;
  options.attention = c.attention;
  options.precision = c.precision;
  const std::unique_ptr<Model> model = make_model(*device, config, 1, options);
  const SavedActivations formula = saved_activations(config, B, T, storage_dtype(c.precision), c.attention);
  const testing_support::Batch batch = random_batch(*device, B, T, config.vocab, 2);

  model->begin(batch.tokens, batch.targets);
  model->embed_forward();
  ASSERT_EQ(live_activation_sizes(*device), std::vector<std::size_t>{formula.residual}) << "x0";
  model->layer_forward(0);
  std::vector<std::size_t> expected = sizes_of(formula.layer);
  expected.push_back(formula.residual);  // x0
  expected.push_back(formula.residual);  // x1
  EXPECT_EQ(live_activation_sizes(*device), sorted(expected)) << "x0, x1 and layer 0's saved tensors";

  // Selective recompute drops exactly the marked tensors, and rebuilds them.
  model->release_selective(0);
  std::vector<std::size_t> kept = sizes_of(formula.layer);
  for (std::size_t dropped : sizes_of(formula.layer, true)) kept.erase(std::find(kept.begin(), kept.end(), dropped));
  kept.push_back(formula.residual);
  kept.push_back(formula.residual);
  EXPECT_EQ(live_activation_sizes(*device), sorted(kept)) << "after release_selective";
  model->recompute_selective(0);
  EXPECT_EQ(live_activation_sizes(*device), sorted(expected)) << "after recompute_selective";

  for (std::size_t l = 1; l < config.layers; ++l) {
    model->release_layer_activations(l - 1);
    model->release_layer_input(l - 1);
    model->layer_forward(l);
  }
  model->release_layer_activations(config.layers - 1);
  model->release_layer_input(config.layers - 1);
  model->head_forward();
  std::vector<std::size_t> head = sizes_of(formula.head);
  head.push_back(formula.residual);  // x_L
  EXPECT_EQ(live_activation_sizes(*device), sorted(head)) << "x_L and the head's saved tensors";
  model->end();
}

INSTANTIATE_TEST_SUITE_P(
    Models, SavedActivationsAgainstTheRun,
    testing::Values(Case{"tiny", AttentionKind::naive, Precision::fp32}, Case{"tiny", AttentionKind::flash, Precision::bf16},
                    Case{"llama-tiny", AttentionKind::naive, Precision::fp32},
                    Case{"llama-tiny", AttentionKind::flash, Precision::fp32},
                    Case{"llama-tiny", AttentionKind::naive, Precision::bf16},
                    Case{"llama-tiny-moe", AttentionKind::flash, Precision::bf16},   // a mixture of experts
                    Case{"llama-small-moe", AttentionKind::naive, Precision::fp32}),  // and a shared expert
    [](const testing::TestParamInfo<Case>& info) {
      std::string name = info.param.model + "_" + to_string(info.param.attention) + "_" + to_string(info.param.precision);
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

// The formula's arithmetic, for llama-tiny (C 64, H 4, Hkv 2, D 16, F 176, V 256) at B 2, T 64 in
// fp32: per layer (4 BTC + BT (H + 2 Hkv) D + 3 BTF) 4 bytes + 2 BT 4 bytes + B H T^2 4 bytes.
TEST(SavedActivations, LlamaLayerBytesAreTheClosedForm) {
  const ModelConfig c = model_preset("llama-tiny");
  const std::size_t B = 2, T = 64, BT = B * T;
  const SavedActivations s = saved_activations(c, B, T, DType::f32, AttentionKind::naive);
  std::size_t total = 0;
  for (const SavedTensor& t : s.layer) total += t.bytes;
  EXPECT_EQ(total, (4 * BT * 64 + BT * (4 + 2 * 2) * 16 + 3 * BT * 176) * 4 + 2 * BT * 4 + B * 4 * T * T * 4);
  EXPECT_EQ(s.selective_blocks(), B * 4 * T * T * 4 + BT * 176 * 4);  // probabilities and SwiGLU output
}

}  // namespace
}  // namespace trainmem
