// The gradient memory suite's choices: --grads (common/train/gradient_mode.h, where every holder of
// gradients reads it) and --optimizer-in-backward.
#pragma once
#include "common/train/gradient_mode.h"

namespace trainmem::gradient_memory {

// --optimizer-in-backward (optimizer_in_backward.h): each parameter updated as soon as its
// gradient is complete, the gradient freed at once.
struct OptimizerInBackwardChoice {
  bool on = false;
};

}  // namespace trainmem::gradient_memory
