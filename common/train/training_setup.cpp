#include "common/train/training_setup.h"

#include <stdexcept>

#include "common/data/token_file.h"

namespace trainmem {

std::size_t TrainingSetup::synthetic_tokens() const {
  // Under mpirun every rank loads the corpus of the global batch (N*B rows), as one process would.
  return synthetic_dataset_tokens(tokens_for_batches(world_size, batch, seq()));
}

void TrainingSetup::validate() const {
  model.validate();
  if (batch < 1) throw std::invalid_argument("--batch must be at least 1");
  if (accum < 1) throw std::invalid_argument("the micro-batches per optimizer step (accum) must be at least 1");
  if (world_size < 1) throw std::invalid_argument("--world-size must be at least 1");
}

}  // namespace trainmem
