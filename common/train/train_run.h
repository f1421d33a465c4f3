// A training run on a device of its own, for benchmarks and tests that measure one configuration:
// the device, and the run built the one way every command builds it (training_run.h), from a
// setup and the registrations of the techniques it uses, on the synthetic corpus.
#pragma once
#include <memory>
#include <string>

#include "common/data/token_file.h"
#include "common/train/training_run.h"

namespace trainmem {

struct TrainRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<TrainingRun> run;

  StepResult step() { return run->step(); }
  Model& model() { return run->model(); }
  const MemoryStats stats() const { return device->allocator().stats(); }
};

// `techniques` must outlive the run. The corpus is large enough for `steps` steps without wrapping.
inline TrainRun make_train_run(const DeviceOptions& options, const TrainingSetup& setup, const Techniques& techniques,
                               std::size_t steps = 8) {
  TrainRun r;
  r.device = Device::open(options);
  const std::size_t tokens = setup.batch * setup.accum * setup.seq() * steps + 1;
  r.run = std::make_unique<TrainingRun>(setup, techniques, *r.device, nullptr, HostTokens(synthetic_corpus(tokens, setup.seed)));
  return r;
}

// device_choice: auto|cpu|cuda.
inline TrainRun make_train_run(const std::string& device_choice, const TrainingSetup& setup, const Techniques& techniques,
                               std::size_t steps = 8) {
  DeviceOptions options;
  options.choice = device_choice;
  return make_train_run(options, setup, techniques, steps);
}

// The setup of a baseline run: the model, B rows, K micro-batches per step.
inline TrainingSetup baseline_setup(const ModelConfig& config, std::size_t batch, std::size_t accum = 1) {
  TrainingSetup s;
  s.model = config;
  s.batch = batch;
  s.accum = accum;
  return s;
}

}  // namespace trainmem
