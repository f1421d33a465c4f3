// Activation checkpointing: every policy gives gradients bit-identical to keeping everything, and
// the measured activation peak equals the exact prediction from the model's tensor sizes.
#include <gtest/gtest.h>

#include "common/data/token_file.h"
#include "common/train/trainer.h"
#include "suites/checkpointing/recompute.h"

namespace trainmem {
namespace {

GPTConfig four_layers() {
  GPTConfig c = gpt_preset("tiny");
  c.layers = 4;
  return c;
}

struct StepOutcome {
  std::vector<float> gradients;
  std::vector<float> parameters;
  std::int64_t activation_peak = 0;
};

// One step's gradients (taken before the optimizer clears them) and parameters after 3 steps.
StepOutcome run(const GPTConfig& config, const RecomputePolicy& policy, std::size_t B, std::size_t T,
                std::size_t accumulation_steps = 1) {
  DeviceOptions options;
  options.choice = "cpu";
  options.device_memory = std::size_t{1} << 30;
  auto device = Device::open(options);
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
  EXPECT_EQ(RecomputePolicy::parse("every:2").recomputed_layers(5), (std::vector<bool>{true, false, true, false, true}));
  for (const char* bad : {"half", "every:0", "every:x", "every:2x", ""}) EXPECT_THROW(RecomputePolicy::parse(bad), std::invalid_argument) << bad;
}

TEST(Checkpointing, GradientsAndParametersAreBitIdenticalToNoRecompute) {
  const GPTConfig config = four_layers();
  const StepOutcome baseline = run(config, RecomputePolicy::parse("none"), 2, 32);
  for (const char* policy : {"full", "every:2", "every:3", "selective"}) {
    const StepOutcome r = run(config, RecomputePolicy::parse(policy), 2, 32);
    EXPECT_EQ(r.gradients, baseline.gradients) << policy;  // bitwise: same kernels, same order
    EXPECT_EQ(r.parameters, baseline.parameters) << policy;
  }
}

TEST(Checkpointing, MeasuredActivationPeakEqualsThePrediction) {
  const GPTConfig config = four_layers();
  for (const char* policy : {"none", "full", "every:2", "every:3", "selective"}) {
    const RecomputePolicy p = RecomputePolicy::parse(policy);
    const StepOutcome r = run(config, p, 2, 32);
    EXPECT_EQ(static_cast<std::size_t>(r.activation_peak), predicted_activation_peak(config, 2, 32, p)) << policy;
  }
  // And the saving is real: full recompute keeps far less than none.
  EXPECT_LT(predicted_activation_peak(config, 2, 32, RecomputePolicy::parse("full")) * 2,
            predicted_activation_peak(config, 2, 32, RecomputePolicy::parse("none")));
}

// Techniques compose: accumulation x recompute gives the gradients of accumulation alone (bit for
// bit: recompute changes nothing numerically), and the activation peak that recompute predicts
// for one micro-batch (accumulation does not change what one micro-batch keeps).
TEST(Checkpointing, ComposesWithGradientAccumulation) {
  const GPTConfig config = four_layers();
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
