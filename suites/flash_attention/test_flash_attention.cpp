// Flash attention in the model (--attention flash): the same training as naive attention, and
// the memory the issue promises — per layer, naive saves the probabilities (B*H*T^2 elements),
// flash saves the output (B*T*C, which naive saves too) and one fp32 log-sum-exp per query row
// (B*H*T) — checked in bytes, tensor by tensor and in the allocator's activation peak.
// (The kernels themselves are tested in kernels/tests/test_flash_attention_*.)
#include <gtest/gtest.h>

#include <cmath>

#include "common/allocator/allocator_config.h"
#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/train/trainer.h"
#include "common/tests/cpu_device.h"

namespace trainmem {
namespace {

struct Outcome {
  std::vector<double> losses;
  std::int64_t activation_peak = 0;
  std::size_t probs_bytes = 0, lse_bytes = 0, out_bytes = 0;  // layer 0's saved attention tensors
};

Outcome train(AttentionKind attention, Precision precision, int steps, std::size_t B = 2) {
  auto device = testing_support::cpu_device();
  const ModelConfig config = model_preset("tiny");
  ModelOptions mo;
  mo.attention = attention;
  mo.precision = precision;
  GPT model(*device, config, 5, mo);
  SequentialBatches data(*device, synthetic_corpus(200000, 9), B, config.seq);
  TrainerOptions topt;
  topt.batch = B;
  topt.seq = config.seq;
  topt.adam.lr = 1e-3f;
  struct Inspect : Strategy {
    Outcome* o;
    std::string name() const override { return "inspect"; }
    void after_layer_forward(StepContext& ctx, std::size_t l) override {
      if (l != 0) return;
      const LayerActivations& a = dynamic_cast<GPT&>(ctx.model).layer_activations(0);
      o->probs_bytes = a.att.nbytes();
      o->lse_bytes = a.lse.nbytes();
      o->out_bytes = a.atty.nbytes();
    }
  } inspect;
  Outcome o;
  inspect.o = &o;
  Trainer trainer(model, data, topt, {&inspect});
  for (int i = 0; i < steps; ++i) o.losses.push_back(trainer.step().loss);
  o.activation_peak = device->allocator().stats().by_category[index_of(MemoryCategory::activations)].peak;
  return o;
}

TEST(FlashAttentionModel, SavesOutputAndLogSumExpInsteadOfTheProbabilities) {
  const ModelConfig c = model_preset("tiny");
  const std::size_t B = 2, T = c.seq, H = c.heads, C = c.dim, L = c.layers;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const std::size_t e = dtype_size(storage_dtype(p));
    const Outcome naive = train(AttentionKind::naive, p, 1, B);
    const Outcome flash = train(AttentionKind::flash, p, 1, B);
    EXPECT_EQ(naive.probs_bytes, B * H * T * T * e) << "naive: O(B*H*T^2)";
    EXPECT_EQ(naive.lse_bytes, 0u);
    EXPECT_EQ(flash.probs_bytes, 0u);
    EXPECT_EQ(flash.lse_bytes, B * H * T * 4) << "flash: O(B*H*T), fp32 in every precision";
    EXPECT_EQ(flash.out_bytes, B * T * C * e);
    EXPECT_EQ(naive.out_bytes, flash.out_bytes) << "both keep the output for the projection's backward";
    // The whole step: the peak (after the last layer's forward, all layers saved) differs by the
    // per-layer difference, L times, each tensor rounded to the allocator's 512 bytes.
    const auto per_layer = static_cast<std::int64_t>(round_size(B * H * T * T * e)) -
                           static_cast<std::int64_t>(round_size(B * H * T * 4));
    EXPECT_EQ(naive.activation_peak - flash.activation_peak, static_cast<std::int64_t>(L) * per_layer) << to_string(p);
  }
}

// Same seed, same data: the flash run's loss follows the naive run's. Flash sums in a different
// order (tile by tile, with rescaling), so the runs differ by float rounding only: measured
// largest per-step difference over 60 steps about 1e-6; tolerance 1e-4.
TEST(FlashAttentionModel, TrainsToTheSameLossAsNaiveAttention) {
  const int steps = 60;
  const Outcome naive = train(AttentionKind::naive, Precision::fp32, steps);
  const Outcome flash = train(AttentionKind::flash, Precision::fp32, steps);
  double worst = 0;
  for (int i = 0; i < steps; ++i) worst = std::max(worst, std::abs(naive.losses[i] - flash.losses[i]));
  std::printf("largest per-step loss difference, flash vs naive, %d steps: %.2e (final %.4f)\n", steps, worst,
              flash.losses.back());
  EXPECT_LT(worst, 1e-4);
  EXPECT_LT(flash.losses.back(), flash.losses.front() - 1.0) << "and it learns";
}

TEST(FlashAttentionModel, CudnnOnTheCpuSaysWhatToUseInstead) {
  DeviceOptions options;
  options.choice = "cpu";
  auto device = Device::open(options);
  ModelOptions mo;
  mo.attention = AttentionKind::cudnn;
  try {
    GPT model(*device, model_preset("tiny"), 1, mo);
    FAIL() << "cudnn attention on the CPU must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--attention flash"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem
