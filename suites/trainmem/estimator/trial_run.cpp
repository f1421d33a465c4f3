#include "suites/trainmem/estimator/trial_run.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/data/token_file.h"
#include "common/train/trainer.h"
#include "suites/checkpointing/recompute.h"
#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"
#include "suites/mixed_precision/loss_scaler.h"

namespace trainmem::estimator {

TrialResult run_trial(const TrainingSetup& s, const TrialOptions& options) {
  s.validate();
  const std::size_t T = s.seq();
  // The synthetic corpus: an eager loader puts all of it on the device, so it is made exactly as
  // `trainmem train` makes it (load_dataset); for the other loaders its size changes no device
  // memory, and a corpus of the steps' tokens is quicker to make.
  const std::size_t needed = s.batch * T * s.accum * static_cast<std::size_t>(options.steps) + 1;
  std::vector<std::uint16_t> tokens =
      options.tokens ? *options.tokens
      : s.loader == Loader::eager ? load_dataset("synthetic", s.batch * T + 1, s.model.vocab, options.seed)
                                  : synthetic_corpus(std::max(needed, 4 * (s.batch * T + 1)), options.seed);
  if (tokens.size() < s.batch * T + 1)
    throw DataError("the dataset has " + std::to_string(tokens.size()) + " tokens; one batch of " +
                    std::to_string(s.batch) + " needs " + std::to_string(s.batch * T + 1));

  DeviceOptions device_options;
  device_options.choice = options.device;
  if (options.capacity) device_options.device_memory = options.capacity;
  device_options.allocator = s.allocator;
  auto device = Device::open(device_options);
  TrialResult r;
  r.device = device->info().label();
  try {
    // The order of cli_train.cpp: model, data loader, trainer (its optimizer, then the batch).
    ModelOptions model_options;
    model_options.precision = s.precision;
    model_options.attention = s.attention;
    GPT model(*device, s.model, options.seed, model_options);
    std::unique_ptr<BatchSource> data;
    if (s.loader == Loader::sequential) {
      data = std::make_unique<SequentialBatches>(*device, std::move(tokens), s.batch, T);
    } else if (s.loader == Loader::eager) {
      data = std::make_unique<lazy_loading::EagerLoader>(*device, lazy_loading::HostTokens(std::move(tokens)), s.batch, T,
                                                        lazy_loading::EagerLoaderOptions{options.seed, true});
    } else {
      lazy_loading::LazyLoaderOptions lo;
      lo.prefetch = s.prefetch;
      lo.seed = options.seed;
      data = std::make_unique<lazy_loading::LazyLoader>(*device, lazy_loading::HostTokens(std::move(tokens)), s.batch, T, lo);
    }
    TrainerOptions topt;
    topt.batch = s.batch;
    topt.seq = T;
    topt.accumulation_steps = s.accum;
    RecomputeStrategy recompute(s.recompute);
    DynamicLossScaler loss_scaler;
    std::vector<Strategy*> strategies;
    if (s.recompute.kind != RecomputePolicy::Kind::none) strategies.push_back(&recompute);
    if (s.precision == Precision::fp16) strategies.push_back(&loss_scaler);
    Trainer trainer(model, *data, topt, strategies);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < options.steps; ++i) trainer.step();
    r.ms_per_step =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / options.steps;
  } catch (const OutOfMemoryError& e) {
    r.oom = e.report();
  }
  r.stats = device->allocator().stats();
  return r;
}

}  // namespace trainmem::estimator
