// Runs of `trainmem train FLAGS` inside a test, built as train builds them (TrainingRun, the
// registered techniques): the first step's gradients and memory (train_one_step), or a few steps'
// results and the parameters after them (run_steps). What the composition and Llama technique
// tests share.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/data/token_file.h"
#include "common/tests/cpu_device.h"
#include "common/train/training_run.h"
#include "suites/trainmem/tests/sample_setups.h"

namespace trainmem::testing_support {

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
inline Outcome train_one_step(const std::string& flags) {
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

// Steps of `trainmem train FLAGS` as train builds them (TrainingRun, the registered techniques):
// every step's result, and the parameters after the steps as stored (widened to fp32).
struct StepsRun {
  std::vector<float> parameters;
  std::vector<StepResult> steps;
  MemoryStats stats;  // the allocator's, after the steps
};
inline StepsRun run_steps(const std::string& flags, int steps = 4) {
  auto device = testing_support::cpu_device();
  TrainingRun run(setup_from_flags(flags), registered_techniques(), *device, nullptr,
                  HostTokens(synthetic_corpus(100000, 5)));
  StepsRun r;
  for (int i = 0; i < steps; ++i) r.steps.push_back(run.step());
  r.parameters = run.model().parameter_values();
  r.stats = device->allocator().stats();
  return r;
}

}  // namespace trainmem::testing_support
