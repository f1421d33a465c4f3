// AdamW over the model's parameters, with gradient-norm clipping, and mixed precision's core:
// fp32 master weights for a 16-bit model (common/train/master_weights.h) and the
// unscaling and skip rule that loss scaling needs (common/train/unscale.h).
//
// Memory (category optimizer_state): the moments m and v, 8 bytes per parameter, allocated at
// the first step as PyTorch's optimizers do — so the first step's peak is higher than the ones
// before it, and a memory result must say which step it measured. A model stored in bf16/fp16
// also gets its fp32 master weights here, with the optimizer (4 bytes per parameter).
#pragma once
#include <vector>

#include "common/model/model.h"
#include "common/train/optimizer.h"
#include "kernels/adamw.h"

namespace trainmem {

// One of Adam's moments (m or v) for a tensor of `shape`: fp32, zeroed, category optimizer_state,
// named `name` (".adam_m", ".adam_v" appended by the callers). Every AdamW here makes them so.
Tensor make_adam_moment(Device& device, const std::vector<std::int64_t>& shape, const std::string& name);

class AdamWOptimizer : public Optimizer {
 public:
  AdamWOptimizer(Model& model, kernels::AdamWHyper hyper, float max_grad_norm);

  // One update from the accumulated gradients, which carry a factor `loss_scale` (1 without loss
  // scaling): g = grad / loss_scale, clipped. If any gradient is inf or NaN nothing changes — no
  // update, no Adam step counted — and the outcome says skipped (the loss scaler then backs off).
  StepOutcome step(double loss_scale = 1.0) override;
  long steps_taken() const override { return step_; }
  const kernels::AdamWHyper& hyper() const { return hyper_; }
  float max_grad_norm() const { return max_grad_norm_; }
  bool has_master_weights() const { return !master_.empty(); }
  std::vector<float> master_values() const;  // host copy, parameters() order (empty without master weights)

 private:
  Model& model_;
  kernels::AdamWHyper hyper_;
  float max_grad_norm_;
  long step_ = 0;
  std::vector<Tensor> master_;  // fp32 weights of a 16-bit model
  std::vector<Tensor> m_, v_;
};

}  // namespace trainmem
