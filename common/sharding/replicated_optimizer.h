// The optimizer of plain data parallelism (ZeRO stage 0, FSDP NO_SHARD): every rank runs the whole
// update on gradients all-reduced over the N ranks. This wrapper only fixes the averaging.
//
// Each rank's loss is multiplied by 1/N (the strategies' loss_scale()), so the all-reduced SUM is
// the global batch's mean, times the user's loss scale; the factor the trainer passes includes the
// 1/N, so the whole-model optimizer, which divides by the factor it is given, is given it times N.
// (ShardedAdamW over N ranks does the same by itself: it divides by factor * N.)
#pragma once
#include "common/train/optimizer.h"

namespace trainmem {

class ReplicatedOptimizer : public Optimizer {
 public:
  ReplicatedOptimizer(Optimizer& whole_model, int world_size) : whole_model_(whole_model), world_size_(world_size) {}
  StepOutcome step(double loss_scale) override { return whole_model_.step(loss_scale * world_size_); }
  long steps_taken() const override { return whole_model_.steps_taken(); }

 private:
  Optimizer& whole_model_;
  int world_size_;
};

}  // namespace trainmem
