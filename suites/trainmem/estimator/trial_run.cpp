#include "suites/trainmem/estimator/trial_run.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "common/comm/local_communicator.h"
#include "common/data/token_file.h"
#include "common/train/training_run.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

TrialResult run_trial(const TrainingSetup& s, const TrialOptions& options) {
  const std::size_t T = s.seq();
  // The synthetic corpus: a loader that puts all of it on the device (DatasetHome::device, the
  // eager loader) makes it device memory, so it is made exactly as
  // `trainmem train` makes it (load_dataset); for the other loaders its size changes no device
  // memory, and a corpus of the steps' tokens is quicker to make.
  const std::size_t needed = s.batch * T * s.accum * static_cast<std::size_t>(options.steps) + 1;
  std::vector<std::uint16_t> tokens =
      options.tokens ? *options.tokens
      : registered_techniques().dataset_home(s) == DatasetHome::device ? load_dataset("synthetic", s.batch * T + 1, s.model.vocab, s.seed)
                                  : synthetic_corpus(std::max(needed, 4 * (s.batch * T + 1)), s.seed);
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
    // A sharded run (ZeRO, FSDP) on this one device, as `trainmem train` runs it without mpirun:
    // a world of one rank (ZeRO-Offload on one GPU, the OOM advice's last remedy).
    std::unique_ptr<Communicator> world;
    if (registered_techniques().sharding(s)) world = std::make_unique<LocalCommunicator>(*device);
    TrainingRun run(s, registered_techniques(), *device, world.get(), HostTokens(std::move(tokens)));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < options.steps; ++i) run.step();
    r.ms_per_step =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / options.steps;
  } catch (const OutOfMemoryError& e) {
    r.oom = e.report();
  }
  r.stats = device->allocator().stats();
  return r;
}

}  // namespace trainmem::estimator
