// From `trainmem train`'s flags to the estimator's description of the run (training_setup.h):
// used by `trainmem estimate`, `trainmem max-batch` and by `trainmem train` itself for its OOM
// advice. Defined in cli_estimate.cpp.
#pragma once
#include <cstddef>

#include "common/train/training_setup.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

// `backend`: the device kind whose allocation pattern to predict. `dataset_tokens`: the size of
// the dataset, a file's (0: the synthetic corpus's, which grows with the batch). `world_size`: the ranks.
// Completed and validated by every registered technique (std::invalid_argument).
TrainingSetup training_setup(const TrainFlags& flags, DeviceKind backend, std::size_t dataset_tokens = 0,
                             std::size_t world_size = 1);

// --data checked as `trainmem train` checks it (check_dataset, common/data/dataset_check.h) for a
// global batch of `world_size` x `batch` rows, without keeping its tokens (host memory bounded);
// returns its size in tokens for TrainingSetup::dataset_tokens (synthetic: 0). DataError.
std::size_t checked_dataset_tokens(const TrainFlags& flags, std::size_t world_size, std::size_t batch);

}  // namespace trainmem::cli
