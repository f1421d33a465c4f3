// Training a configuration for real (training_run.h, as `trainmem train` builds it) for a given
// number of steps on a device of a given size: what `trainmem max-batch` tries, and what the
// estimator's accuracy is measured against.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/allocator/memory_stats.h"
#include "common/allocator/out_of_memory.h"
#include "common/train/training_setup.h"

namespace trainmem::estimator {

struct TrialResult {
  MemoryStats stats;              // the allocator's statistics after the steps (or at the OOM)
  std::optional<OomReport> oom;   // set when the run ran out of memory
  std::string device;             // e.g. "cpu"
  double ms_per_step = 0;
};

struct TrialOptions {
  int steps = 2;                  // two: Adam's moments appear at the end of the first step
  std::string device = "cpu";     // --device auto|cpu|cuda
  std::size_t capacity = 0;       // --device-memory (0: the device's default)
  // The dataset (nullptr: the synthetic corpus `trainmem train --data synthetic` makes).
  const std::vector<std::uint16_t>* tokens = nullptr;
};

// Builds and trains the configuration. Out of memory is a result, not an exception; other errors
// (a bad configuration, a dataset too small for one batch) throw as trainmem train's do.
TrialResult run_trial(const TrainingSetup& setup, const TrialOptions& options);

}  // namespace trainmem::estimator
