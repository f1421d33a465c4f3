// Activation checkpointing: every policy gives gradients bit-identical to keeping everything, and
// the measured activation peak equals the exact prediction from the model's tensor sizes.
#include <gtest/gtest.h>

#include "common/data/token_file.h"
#include "common/model/gpt.h"
#include "common/train/trainer.h"
#include "suites/checkpointing/recompute.h"
#include "common/tests/cpu_device.h"
#include "common/tests/enum_table_checks.h"
#include "common/tests/readme_formula.h"

namespace trainmem {
namespace {

ModelConfig four_layers() {
  ModelConfig c = model_preset("tiny");
  c.layers = 4;
  return c;
}

struct StepOutcome {
  std::vector<float> gradients;
  std::vector<float> parameters;
  std::int64_t activation_peak = 0;
};

// One step's gradients (taken before the optimizer clears them) and parameters after 3 steps.
StepOutcome run(const ModelConfig& config, const RecomputePolicy& policy, std::size_t B, std::size_t T,
                std::size_t accumulation_steps = 1) {
  auto device = testing_support::cpu_device();
  GPT model(*device, config, 3);
  SequentialBatches data(*device, synthetic_corpus(100000, 5), B, T);
  TrainerOptions topt;
  topt.batch = B;
  topt.seq = T;
  topt.accumulation_steps = accumulation_steps;
  RecomputeStrategy recompute(policy);

  struct GradientCapture : Strategy {
    std::vector<float>* out;
    std::string name() const override { return "capture"; }
    void before_optimizer_step(StepContext& ctx) override {
      if (out->empty()) *out = ctx.model.gradient_values();
    }
  };
  StepOutcome r;
  GradientCapture capture;
  capture.out = &r.gradients;
  Trainer trainer(model, data, topt, {&recompute, &capture});
  for (int i = 0; i < 3; ++i) trainer.step();
  r.parameters = model.parameter_values();
  r.activation_peak = device->allocator().stats().by_category[index_of(MemoryCategory::activations)].peak;
  return r;
}

TEST(Checkpointing, PoliciesParseAndSayWhatIsAccepted) {
  EXPECT_EQ(RecomputePolicy::parse("none").kind, RecomputePolicy::Kind::none);
  EXPECT_EQ(RecomputePolicy::parse("full").kind, RecomputePolicy::Kind::full);
  EXPECT_EQ(RecomputePolicy::parse("every:3").every, 3u);
  EXPECT_EQ(RecomputePolicy::parse("selective").kind, RecomputePolicy::Kind::selective);
  EXPECT_EQ(RecomputePolicy::parse("sqrt").kind, RecomputePolicy::Kind::sqrt);
  EXPECT_EQ(RecomputePolicy::sqrt_segment(4), 2u);
  EXPECT_EQ(RecomputePolicy::sqrt_segment(5), 3u);
  EXPECT_EQ(RecomputePolicy::sqrt_segment(9), 3u);
  EXPECT_EQ(RecomputePolicy::sqrt_segment(12), 4u);
  EXPECT_EQ(RecomputePolicy::parse("every:2").recomputed_layers(5), (std::vector<bool>{true, false, true, false, true}));
  for (const char* bad : {"half", "every:0", "every:x", "every:2x", ""}) EXPECT_THROW(RecomputePolicy::parse(bad), std::invalid_argument) << bad;
  testing_support::expect_whole_table(kRecomputeWords);
}

TEST(Checkpointing, GradientsAndParametersAreBitIdenticalToNoRecompute) {
  const ModelConfig config = four_layers();
  const StepOutcome baseline = run(config, RecomputePolicy::parse("none"), 2, 32);
  for (const char* policy : {"full", "every:2", "every:3", "selective", "sqrt"}) {
    const StepOutcome r = run(config, RecomputePolicy::parse(policy), 2, 32);
    EXPECT_EQ(r.gradients, baseline.gradients) << policy;  // bitwise: same kernels, same order
    EXPECT_EQ(r.parameters, baseline.parameters) << policy;
  }
}

TEST(Checkpointing, MeasuredActivationPeakEqualsThePrediction) {
  const ModelConfig config = four_layers();
  // V = 130 (the synthetic corpus's tokens are below 123) has logits of Vp = 192 columns, the
  // vocabulary padded (model_config.h): 2 x 32 x 192 floats, not 2 x 32 x 130.
  ModelConfig padded = four_layers();
  padded.vocab = 130;
  for (const ModelConfig& c : {config, padded})
    for (const char* policy : {"none", "full", "every:2", "every:3", "selective", "sqrt"}) {
      const RecomputePolicy p = RecomputePolicy::parse(policy);
      const StepOutcome r = run(c, p, 2, 32);
      EXPECT_EQ(static_cast<std::size_t>(r.activation_peak), predicted_activation_peak(c, 2, 32, p))
          << policy << ", V=" << c.vocab;
    }
  // And the saving is real: full recompute keeps far less than none.
  EXPECT_LT(predicted_activation_peak(config, 2, 32, RecomputePolicy::parse("full")) * 2,
            predicted_activation_peak(config, 2, 32, RecomputePolicy::parse("none")));
}

// The README's per-layer formula (its ```formula layer_saved_elements block: the listed tensors,
// then the closed form) against the code: with no recompute the peak is x_0 + L (layer + x) +
// head, so one more layer adds exactly the layer's saved tensors and its input x_l (BTC), in fp32
// bytes. The shapes keep every tensor a multiple of 512 bytes (B*T a multiple of 128), where the
// allocator's rounding adds nothing and the count of elements is the whole story.
TEST(Checkpointing, ReadmeLayerFormulaEqualsTheCode) {
  const auto sides = testing_support::readme_formula(TRAINMEM_CHECKPOINTING_README, "layer_saved_elements");
  ASSERT_EQ(sides.size(), 2u) << "the listed tensors = the closed form";
  struct Shape {
    std::uint64_t B, T, C, H;
  };
  for (const Shape s : {Shape{2, 64, 64, 2}, Shape{1, 128, 96, 3}, Shape{4, 128, 128, 4}}) {
    ModelConfig config = model_preset("tiny");
    config.dim = s.C;
    config.heads = s.H;
    config.seq = s.T;
    const auto peak = [&](std::size_t layers) {
      config.layers = layers;
      return predicted_activation_peak(config, s.B, s.T, RecomputePolicy::parse("none"));
    };
    const std::uint64_t one_layer_bytes = peak(3) - peak(2);
    const testing_support::FormulaSymbols symbols{{'B', s.B}, {'T', s.T}, {'C', s.C}, {'H', s.H}};
    for (const auto& side : sides)
      EXPECT_EQ(4 * (side.evaluate(symbols) + s.B * s.T * s.C), one_layer_bytes)
          << "README: " << side.text << " (B=" << s.B << " T=" << s.T << " C=" << s.C << " H=" << s.H << ")";
  }
}

// sqrt on a deeper, narrow model: 9 layers in 3 segments (checkpoints x0, x3, x6), with segments
// of 2 and 3 layers (L = 5 -> k = 3: segments [0,3) and [3,5)): bit-identical and exactly
// predicted, and it keeps fewer layer inputs than `full` (3 instead of 9 during backward's start).
TEST(Checkpointing, SqrtSegmentsOfUnequalLengthAreExactToo) {
  for (std::size_t layers : {5u, 9u}) {
    ModelConfig config = model_preset("tiny");
    config.layers = layers;
    const StepOutcome baseline = run(config, RecomputePolicy::parse("none"), 2, 16);
    const RecomputePolicy p = RecomputePolicy::parse("sqrt");
    const StepOutcome r = run(config, p, 2, 16);
    EXPECT_EQ(r.gradients, baseline.gradients) << "L=" << layers;
    EXPECT_EQ(r.parameters, baseline.parameters) << "L=" << layers;
    EXPECT_EQ(static_cast<std::size_t>(r.activation_peak), predicted_activation_peak(config, 2, 16, p)) << "L=" << layers;
    EXPECT_LT(r.activation_peak, baseline.activation_peak) << "L=" << layers;
  }
}

// The prediction in 16 bits: every saved tensor but the layernorm statistics halves.
TEST(Checkpointing, PredictionInSixteenBitsHalvesAllButTheStatistics) {
  const ModelConfig config = four_layers();
  const RecomputePolicy none = RecomputePolicy::parse("none");
  const std::size_t f32 = predicted_activation_peak(config, 2, 32, none, DType::f32);
  const std::size_t b16 = predicted_activation_peak(config, 2, 32, none, DType::bf16);
  EXPECT_LT(b16, f32);
  EXPECT_GT(b16, f32 / 2);  // the fp32 statistics (and 512-byte rounding) do not halve
}

// With flash attention the probabilities are not saved (a log-sum-exp per row instead), so
// selective recompute has only the GELU output left to drop; the prediction follows.
TEST(Checkpointing, PredictionWithFlashAttentionSavesTheLogSumExpInstead) {
  const ModelConfig config = four_layers();
  for (const char* policy : {"none", "selective", "full"}) {
    const RecomputePolicy p = RecomputePolicy::parse(policy);
    const std::size_t naive = predicted_activation_peak(config, 2, 32, p, DType::f32, AttentionKind::naive);
    const std::size_t flash = predicted_activation_peak(config, 2, 32, p, DType::f32, AttentionKind::flash);
    EXPECT_LT(flash, naive) << policy;
  }
  DeviceOptions options;
  options.choice = "cpu";
  auto device = Device::open(options);
  ModelOptions mo;
  mo.attention = AttentionKind::flash;
  GPT model(*device, config, 3, mo);
  SequentialBatches data(*device, synthetic_corpus(100000, 5), 2, 32);
  TrainerOptions topt;
  topt.batch = 2;
  topt.seq = 32;
  const RecomputePolicy selective = RecomputePolicy::parse("selective");
  RecomputeStrategy recompute(selective);
  Trainer trainer(model, data, topt, {&recompute});
  trainer.step();
  EXPECT_EQ(static_cast<std::size_t>(device->allocator().stats().by_category[index_of(MemoryCategory::activations)].peak),
            predicted_activation_peak(config, 2, 32, selective, DType::f32, AttentionKind::flash));
}

// Techniques compose: accumulation x recompute gives the gradients of accumulation alone (bit for
// bit: recompute changes nothing numerically), and the activation peak that recompute predicts
// for one micro-batch (accumulation does not change what one micro-batch keeps).
TEST(Checkpointing, ComposesWithGradientAccumulation) {
  const ModelConfig config = four_layers();
  const StepOutcome accum_only = run(config, RecomputePolicy::parse("none"), 2, 32, 3);
  for (const char* policy : {"full", "selective"}) {
    const RecomputePolicy p = RecomputePolicy::parse(policy);
    const StepOutcome both = run(config, p, 2, 32, 3);
    EXPECT_EQ(both.gradients, accum_only.gradients) << policy;
    EXPECT_EQ(both.parameters, accum_only.parameters) << policy;
    EXPECT_EQ(static_cast<std::size_t>(both.activation_peak), predicted_activation_peak(config, 2, 32, p)) << policy;
  }
}

}  // namespace
}  // namespace trainmem
