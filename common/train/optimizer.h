// What the trainer needs of an optimizer: one update from the accumulated gradients.
//
// AdamWOptimizer (adamw_optimizer.h) updates the whole model on one device. The sharding engine's
// ShardedAdamW (common/sharding/) holds only this rank's slice of the optimizer state; the trainer
// calls them the same way.
#pragma once

namespace trainmem {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  struct StepOutcome {
    double grad_norm = 0;  // global norm of the unscaled gradients, before clipping
    bool skipped = false;  // an inf or NaN gradient: nothing was updated
    // After an update: every weight it wrote (and its fp32 master copy) is finite. A squared weight
    // beyond the sum's range counts as not finite too. Always true for a skipped step.
    bool weights_finite = true;
  };
  // One update. The gradients carry a factor `loss_scale` (1 without loss scaling); the optimizer
  // divides it out, clips, and skips the whole update if any gradient is inf or NaN.
  virtual StepOutcome step(double loss_scale) = 0;
  virtual long steps_taken() const = 0;  // updates made (skipped steps not counted)
};

}  // namespace trainmem
