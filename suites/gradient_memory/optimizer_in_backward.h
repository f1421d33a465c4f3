// The optimizer step fused into the backward (PyTorch's register_post_accumulate_grad_hook
// pattern): each parameter's AdamW update runs as soon as its gradient is complete, and that
// gradient is freed at once, so at most one layer's gradients (and the tied embedding's, written
// at both ends of the step) exist at any moment.
//
//   after_layer_backward(l)   layer l's 12 gradients are complete: update, free them
//   after_backward            the root's (wte, wpe, lnf): update, free them
//   the trainer's optimizer   this object too; its step() has nothing left to do
//
// Why it cannot compose with some techniques (the registration refuses them):
//   global-norm clipping  needs the norm of the WHOLE gradient before the first update
//   accumulation          a gradient is complete only after the step's last micro-batch
//   fp16 loss scaling     an overflow must skip the WHOLE step, known only at the end
// With those off the update of each parameter is the same kernel on the same numbers as the
// trainer's AdamW (grad_scale 1: no loss scale, no clip), so parameters are bitwise equal.
// This class updates the model's own tensors (one device). Under ZeRO 1-3 and FSDP the sharding
// engine updates each unit's shard after the unit's reduction (common/sharding/sharding_engine.h);
// ZeRO-0 refuses the flag.
#pragma once
#include <vector>

#include "common/model/model.h"
#include "common/model/parameter_table.h"
#include "common/tensor/tensor.h"
#include "common/train/optimizer.h"
#include "common/train/strategy.h"
#include "kernels/adamw.h"

namespace trainmem::gradient_memory {

class OptimizerInBackward : public Strategy, public Optimizer {
 public:
  // Frees the model's gradients (they are made at their first write, Model::grad_for_write) and
  // makes the fp32 master weights of a 16-bit model, as the trainer's AdamW would.
  OptimizerInBackward(Model& model, kernels::AdamWHyper hyper);

  std::string name() const override { return "optimizer-in-backward"; }
  void after_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_backward(StepContext& ctx) override;

  // The updates are already made: counts the step. grad_norm is not known (no whole gradient
  // ever exists) and reported as 0.
  StepOutcome step(double loss_scale) override;
  long steps_taken() const override { return steps_; }

 private:
  void update(std::size_t index, long step);  // one parameter's AdamW, then its gradient freed

  Model& model_;
  ParameterTable table_;  // which parameters are a layer's, which the root's
  kernels::AdamWHyper hyper_;
  std::vector<Tensor> master_, m_, v_;  // per parameter; m and v made at its first update
  long steps_ = 0;
};

}  // namespace trainmem::gradient_memory
