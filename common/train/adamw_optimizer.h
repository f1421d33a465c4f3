// AdamW over the model's parameters, with gradient-norm clipping.
//
// The moments m and v (8 bytes per parameter, category optimizer_state) are allocated at the
// first step, as PyTorch's optimizers do — so the first step's peak is higher than the ones
// before it, and a memory result must say which step it measured.
#pragma once
#include <vector>

#include "common/model/gpt.h"
#include "kernels/adamw.h"

namespace trainmem {

class AdamWOptimizer {
 public:
  AdamWOptimizer(GPT& model, kernels::AdamWHyper hyper, float max_grad_norm);

  // One update from the accumulated gradients; returns the global gradient norm (before clipping).
  double step();
  long steps_taken() const { return step_; }
  const kernels::AdamWHyper& hyper() const { return hyper_; }
  float max_grad_norm() const { return max_grad_norm_; }

 private:
  double global_grad_norm();

  GPT& model_;
  kernels::AdamWHyper hyper_;
  float max_grad_norm_;
  long step_ = 0;
  std::vector<Tensor> m_, v_;
};

}  // namespace trainmem
