// A training run on a device with a chosen allocator configuration (make_train_run with the
// allocator's options): the runs this suite's tests and benchmarks measure.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/train/train_run.h"

namespace trainmem::allocator {

// `options` picks the device, its budget and the allocator config (e.g. expandable_segments:True);
// the corpus is long enough for `steps` steps without wrapping.
inline TrainRun make_allocator_train_run(const DeviceOptions& options, const GPTConfig& config, std::size_t batch,
                                         std::vector<Strategy*> strategies, std::size_t steps) {
  TrainRun run;
  run.device = Device::open(options);
  run.model = std::make_unique<GPT>(*run.device, config, 1);
  run.data = std::make_unique<SequentialBatches>(*run.device, synthetic_corpus(batch * config.seq * steps + 1, 1),
                                                 batch, config.seq);
  TrainerOptions topt;
  topt.batch = batch;
  topt.seq = config.seq;
  run.trainer = std::make_unique<Trainer>(*run.model, *run.data, topt, std::move(strategies));
  return run;
}

inline DeviceOptions cpu_device_options(const std::string& allocator_config) {
  DeviceOptions options;
  options.choice = "cpu";
  options.allocator = AllocatorConfig::parse(allocator_config);
  return options;
}

}  // namespace trainmem::allocator
