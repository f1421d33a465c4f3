// From `trainmem train`'s flags to the estimator's description of the run (training_setup.h):
// used by `trainmem estimate`, `trainmem max-batch` and by `trainmem train` itself for its OOM
// advice. Defined in cli_estimate.cpp.
#pragma once
#include <cstddef>

#include "common/train/training_setup.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

// `backend`: the device kind whose allocation pattern to predict. `dataset_tokens`: the size of
// the dataset an eager loader would upload (0: the synthetic corpus's). `world_size`: the ranks.
// Completed and validated by every registered technique (std::invalid_argument).
TrainingSetup training_setup(const TrainFlags& flags, DeviceKind backend, std::size_t dataset_tokens = 0,
                             std::size_t world_size = 1);

// The number of tokens --data names (synthetic: 0), for an eager loader's estimate. Reads the file.
std::size_t dataset_tokens(const TrainFlags& flags);

}  // namespace trainmem::cli
