// Everything one training run needs, built in one call: the device, the model, the synthetic
// data and the trainer. For benchmarks and tests that measure a configuration, not a workflow.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/data/token_file.h"
#include "common/train/trainer.h"

namespace trainmem {

struct TrainRun {
  std::unique_ptr<Device> device;
  std::unique_ptr<GPT> model;
  std::unique_ptr<SequentialBatches> data;
  std::unique_ptr<Trainer> trainer;

  const MemoryStats stats() const { return device->allocator().stats(); }
};

// device_choice: auto|cpu|cuda; T = config.seq; the corpus is large enough for `steps` steps
// without wrapping.
inline TrainRun make_train_run(const std::string& device_choice, const GPTConfig& config, std::size_t batch,
                               std::size_t accumulation_steps = 1, std::vector<Strategy*> strategies = {},
                               std::size_t steps = 8, ModelOptions model_options = {}) {
  TrainRun run;
  DeviceOptions options;
  options.choice = device_choice;
  run.device = Device::open(options);
  run.model = std::make_unique<GPT>(*run.device, config, 1, model_options);
  run.data = std::make_unique<SequentialBatches>(
      *run.device, synthetic_corpus(batch * accumulation_steps * config.seq * steps + 1, 1), batch, config.seq);
  TrainerOptions topt;
  topt.batch = batch;
  topt.seq = config.seq;
  topt.accumulation_steps = accumulation_steps;
  run.trainer = std::make_unique<Trainer>(*run.model, *run.data, topt, std::move(strategies));
  return run;
}

}  // namespace trainmem
