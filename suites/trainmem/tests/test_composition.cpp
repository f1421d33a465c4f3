// The single-device techniques compose: `--precision bf16 --recompute selective --accum 8` is
// checked against what each technique promises on its own, within the same combined run (every two
// techniques' samples together are estimated to the byte in test_technique_pairs.cpp).
//
//   recompute:     bit-identical gradients to the same run without recompute (bf16, accum 8)
//                  and the activation peak the checkpointing formula predicts for one
//                  micro-batch in bf16
//   precision:     parameters, gradients and optimizer state equal the 2 + 2 + 12 bytes per
//                  parameter formula, tensor by tensor
//   accumulation:  gradients of 8 micro-batches of 1 equal those of one batch of 8 (same tokens)
//                  to bf16 accuracy (each micro-batch's sum is rounded to bf16: relative
//                  difference of the whole gradient vector below 1e-2; measured 3.6e-3)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/data/token_file.h"
#include "common/tests/cpu_device.h"
#include "common/train/training_run.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem {
namespace {

using testing_support::setup_from_flags;

// The gradients of the first step, before the optimizer clears them.
struct GradientCapture : Strategy {
  std::vector<float> gradients;
  std::string name() const override { return "capture"; }
  void before_optimizer_step(StepContext& ctx) override {
    if (gradients.empty()) gradients = ctx.model.gradient_values();
  }
};

// This test's own technique: a GradientCapture in the run, after every other strategy.
class CaptureTechnique : public Technique {
 public:
  std::string name() const override { return "capture"; }
  HookOrder hook_order() const override { return HookOrder::after_the_step; }
  void add_flags(CLI::App&, TrainingSetup&) const override {}
  TechniqueInRun join(RunParts&) const override { return {std::make_unique<GradientCapture>()}; }
};

struct Outcome {
  std::vector<float> gradients;  // of the first step
  std::int64_t activation_peak = 0;
  std::size_t parameters = 0, gradient_bytes = 0, optimizer_state = 0;  // held after the step
  FormulaBytes formulas;  // the registered techniques' closed forms for the setup
};

// One step of `trainmem train FLAGS`, run as train builds it (TrainingRun, the registered
// techniques) with a GradientCapture added.
Outcome train_one_step(const std::string& flags) {
  const TrainingSetup setup = setup_from_flags(flags);
  static const CaptureTechnique capture;
  std::vector<const Technique*> list(registered_techniques().begin(), registered_techniques().end());
  list.push_back(&capture);
  const Techniques techniques(list);
  auto device = testing_support::cpu_device();
  TrainingRun run(setup, techniques, *device, nullptr, HostTokens(synthetic_corpus(100000, 2)));
  run.step();
  Outcome o;
  o.gradients = static_cast<const GradientCapture*>(run.strategy_of(capture))->gradients;
  const MemoryStats s = device->allocator().stats();
  o.activation_peak = s.by_category[index_of(MemoryCategory::activations)].peak;
  o.parameters = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::parameters)].current);
  o.gradient_bytes = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::gradients)].current);
  o.optimizer_state = static_cast<std::size_t>(s.by_category[index_of(MemoryCategory::optimizer_state)].current);
  o.formulas = registered_techniques().formulas(setup);
  return o;
}

TEST(Composition, Bf16WithSelectiveRecomputeAndEightfoldAccumulation) {
  const Outcome all = train_one_step("--precision bf16 --recompute selective --batch 1 --accum 8");

  // recompute's promise
  const Outcome no_recompute = train_one_step("--precision bf16 --batch 1 --accum 8");
  EXPECT_EQ(all.gradients, no_recompute.gradients) << "recompute changes no bit, in bf16 too";
  EXPECT_EQ(static_cast<std::size_t>(all.activation_peak), all.formulas.activations);
  EXPECT_LT(all.activation_peak, no_recompute.activation_peak);

  // precision's promise
  EXPECT_EQ(all.parameters, all.formulas.parameters);
  EXPECT_EQ(all.gradient_bytes, all.formulas.gradients);
  EXPECT_EQ(all.optimizer_state, all.formulas.optimizer_state);

  // accumulation's promise
  const Outcome one_batch = train_one_step("--precision bf16 --batch 8");
  ASSERT_EQ(all.gradients.size(), one_batch.gradients.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < all.gradients.size(); ++i) {
    diff += std::pow(double(all.gradients[i]) - one_batch.gradients[i], 2);
    norm += std::pow(double(one_batch.gradients[i]), 2);
  }
  const double relative = std::sqrt(diff / norm);
  std::printf("8 x 1 accumulated vs one batch of 8, bf16: relative gradient difference %.2e\n", relative);
  EXPECT_LT(relative, 1e-2);
  EXPECT_GT(relative, 0.0) << "bf16 rounding per micro-batch should leave some trace";
}

}  // namespace
}  // namespace trainmem
