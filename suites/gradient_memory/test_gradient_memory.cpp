// Gradients on demand: the same training as persistent gradients, bit for bit on the CPU, with
// gradient accumulation and clipping; and the memory the formula predicts. This suite's technique
// alone (fp32 and bf16, which no other technique's strategy joins); with fp16's loss scaling
// (mixed precision's, reached through its flags) in suites/trainmem/tests/test_composition.cpp,
// under every sharding plan in suites/trainmem/tests/test_gradient_memory_sharded.cpp.
#include <gtest/gtest.h>

#include <functional>

#include "common/allocator/allocator_config.h"
#include "common/data/token_file.h"
#include "common/model/parameter_table.h"
#include "common/tests/cpu_device.h"
#include "common/tests/same_training.h"
#include "common/train/training_run.h"
#include "suites/gradient_memory/gradient_memory_technique.h"

namespace trainmem::gradient_memory {
namespace {

const Techniques& techniques() {
  static const Techniques list{&gradient_memory_technique()};
  return list;
}

struct Trained {
  std::vector<float> parameters;  // after the steps (fp32 master values where the model is 16-bit)
  std::vector<StepResult> steps;
  MemoryStats stats;
};

Trained train(GradientMode mode, Precision precision, std::size_t accum, float clip, int steps = 4,
              bool in_backward = false) {
  TrainingSetup s;
  s.model = model_preset("tiny");
  s.batch = 4;
  s.accum = accum;
  s.precision = precision;
  s.max_grad_norm = clip;
  s.option<GradientMode>() = mode;
  s.option<OptimizerInBackwardChoice>().on = in_backward;
  auto device = testing_support::cpu_device();
  TrainingRun run(s, techniques(), *device, nullptr, HostTokens(synthetic_corpus(100000, 5)));
  device->allocator().reset_peak_stats();  // the peaks of training (the model was built with its gradients)
  Trained t;
  for (int i = 0; i < steps; ++i) t.steps.push_back(run.step());
  t.parameters = run.model().parameter_values();
  t.stats = device->allocator().stats();
  return t;
}

// The gradients' bytes as the allocator counts them: each tensor rounded to 512 bytes.
std::size_t gradient_bytes(const ModelConfig& config, Precision precision, bool only_wte = false) {
  const std::size_t e = bytes_per_parameter(precision).gradients;
  std::size_t total = 0;
  const ParameterTable table(config);
  for (const ParameterInfo& p : table.all())
    if (!only_wte || p.name == "wte") total += round_size(p.numel() * e);
  return total;
}

// fp16, whose loss scaler is mixed precision's: Composition.GradientsOnDemandUnderFp16LossScaling.
TEST(GradientMemory, OnDemandTrainsBitForBitAsPersistent) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (std::size_t accum : {1u, 3u})
      for (float clip : {1.0f, 0.0f}) {
        SCOPED_TRACE(to_string(precision) + " accum=" + std::to_string(accum) + " clip=" + std::to_string(clip));
        const Trained persistent = train(GradientMode::persistent, precision, accum, clip);
        const Trained on_demand = train(GradientMode::on_demand, precision, accum, clip);
        testing_support::expect_same_training(persistent, on_demand);
      }
}

// Between steps no gradient exists; at the peak (the head's backward) only the tied embedding's
// has been written: on_demand_gradients.h's formula, to the byte.
TEST(GradientMemory, PeakAndHeldBytesAreTheFormulas) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(to_string(precision));
    const ModelConfig config = model_preset("tiny");
    const Trained persistent = train(GradientMode::persistent, precision, 1, 1.0f);
    const Trained on_demand = train(GradientMode::on_demand, precision, 1, 1.0f);
    const auto G = static_cast<std::int64_t>(gradient_bytes(config, precision));
    const auto wte = static_cast<std::int64_t>(gradient_bytes(config, precision, true));
    const std::size_t grads = index_of(MemoryCategory::gradients);
    EXPECT_EQ(on_demand.stats.by_category[grads].current, 0);
    EXPECT_EQ(persistent.stats.by_category[grads].current, G);
    EXPECT_EQ(on_demand.stats.allocated_bytes[0].current, persistent.stats.allocated_bytes[0].current - G);
    EXPECT_EQ(on_demand.stats.allocated_bytes[0].peak, persistent.stats.allocated_bytes[0].peak - G + wte);
  }
}

// The update fused into the backward: the same kernel on the same numbers, parameter by parameter,
// so bitwise the persistent run's (without clipping, accumulation or fp16, which it refuses); and
// less memory than on-demand gradients, since a layer's gradients go as soon as they are used.
TEST(GradientMemory, OptimizerInBackwardTrainsBitForBitWithLessMemory) {
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(to_string(precision));
    const Trained persistent = train(GradientMode::persistent, precision, 1, 0.0f);
    const Trained on_demand = train(GradientMode::on_demand, precision, 1, 0.0f);
    const Trained fused = train(GradientMode::persistent, precision, 1, 0.0f, 4, true);
    EXPECT_TRUE(persistent.parameters == fused.parameters) << "the parameters differ";
    for (std::size_t i = 0; i < persistent.steps.size(); ++i) EXPECT_EQ(persistent.steps[i].loss, fused.steps[i].loss);
    EXPECT_EQ(fused.stats.by_category[index_of(MemoryCategory::gradients)].current, 0);
    EXPECT_LT(fused.stats.by_category[index_of(MemoryCategory::gradients)].peak,
              on_demand.stats.by_category[index_of(MemoryCategory::gradients)].peak);
    EXPECT_LE(fused.stats.allocated_bytes[0].peak, on_demand.stats.allocated_bytes[0].peak);
  }
}

TEST(GradientMemory, OptimizerInBackwardRefusesWhatNeedsTheWholeGradient) {
  struct Case {
    std::function<void(TrainingSetup&)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](TrainingSetup& s) { s.max_grad_norm = 1.0f; }, "add --grad-clip 0"},
      {[](TrainingSetup& s) { s.accum = 2; }, "use --accum 1"},
      {[](TrainingSetup& s) { s.precision = Precision::fp16; }, "use --precision bf16"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    TrainingSetup s;
    s.model = model_preset("tiny");
    s.max_grad_norm = 0;
    s.option<OptimizerInBackwardChoice>().on = true;
    c.change(s);
    try {
      techniques().validate(s);
      FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
    }
  }
}

// Both combine with sharding (test_gradient_memory_sharded checks the training under each plan,
// and ZeRO-0's refusal of the fused update); the fused update's own rules still hold there.
TEST(GradientMemory, BothCombineWithShardingTheFusedUpdatesRulesStillHold) {
  TrainingSetup s;
  s.model = model_preset("tiny");
  s.world_size = 2;
  s.max_grad_norm = 0;
  s.option<GradientMode>() = GradientMode::on_demand;
  struct Sharding : Technique {  // any technique that shards the model states
    std::string name() const override { return "sharding"; }
    void add_flags(CLI::App&, TrainingSetup&) const override {}
    bool shards(const TrainingSetup&) const override { return true; }
    std::string describe(const TrainingSetup&) const override { return "zero=2"; }
  } sharding;
  const Techniques list{&sharding, &gradient_memory_technique()};
  EXPECT_NO_THROW(list.validate(s));
  s.option<GradientMode>() = GradientMode::persistent;
  s.option<OptimizerInBackwardChoice>().on = true;
  EXPECT_NO_THROW(list.validate(s));
  s.max_grad_norm = 1.0f;
  try {
    list.validate(s);
    FAIL() << "the optimizer in the backward with clipping was accepted under sharding";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-clip 0"), std::string::npos) << e.what();
  }
}

// The OOM advice's remedies: on demand first, then the fused update; the fused update passes
// validation only where its rules hold (the advice skips a refused variant).
TEST(GradientMemory, RemediesAreOnDemandThenTheFusedUpdate) {
  TrainingSetup failed;
  failed.model = model_preset("tiny");
  const std::vector<Remedy> remedies = gradient_memory_technique().remedies(failed);
  ASSERT_EQ(remedies.size(), 1u);
  const std::vector<Remedy::Variant> variants = remedies[0].variants(failed);
  ASSERT_EQ(variants.size(), 2u);
  EXPECT_EQ(variants[0].flags, "--grads on-demand");
  EXPECT_EQ(variants[1].flags, "--optimizer-in-backward");
  EXPECT_NO_THROW(techniques().validate(variants[0].setup));
  EXPECT_THROW(techniques().validate(variants[1].setup), std::invalid_argument);  // clipping is on
  failed.max_grad_norm = 0;
  EXPECT_NO_THROW(techniques().validate(remedies[0].variants(failed)[1].setup));
  failed.option<GradientMode>() = GradientMode::on_demand;
  ASSERT_EQ(remedies[0].variants(failed).size(), 1u);
  EXPECT_EQ(remedies[0].variants(failed)[0].flags, "--optimizer-in-backward");
}

}  // namespace
}  // namespace trainmem::gradient_memory
