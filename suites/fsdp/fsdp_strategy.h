// Fully Sharded Data Parallel (Zhao et al. 2023, "PyTorch FSDP"), as a trainer strategy: a policy
// over the sharding engine (common/sharding/sharding_engine.h), which holds the units (the root:
// embeddings + final layernorm; one unit per K transformer layers), their flat parameters sharded
// over the N ranks, the gathers, the gradient buckets and AdamW over this rank's shards. This file
// says, per mode, in which hook a unit is gathered, freed and reduced. Per micro-batch:
//
//   [on_data_fetch]           gather the root (it stays gathered until the end of backward)
//   [before_layer_forward]    at a unit's first layer: gather it (prefetched: wait for its gather);
//                             prefetch on: start the next unit's gather
//   [after_layer_forward]     at a unit's last layer: FULL_SHARD frees it (SHARD_GRAD_OP keeps it);
//                             after the last layer: the root's gradient bucket (the tied LM head
//                             and the final layernorm write their gradients there first)
//   [before_layer_backward]   at a unit's last layer: gather it (FULL_SHARD; SHARD_GRAD_OP still
//                             has it; prefetched: wait); prefetch on: start the gather of the one
//                             below; open its gradient bucket
//   [after_layer_backward]    at a unit's first layer: reduce-scatter its bucket into the gradient
//                             shard, free the bucket and the gathered parameters
//   [after_backward]          the same for the root
//
// NO_SHARD keeps every unit whole on every rank (gather, free and buckets do nothing) and
// all-reduces each unit's gradient after the unit's backward on the step's last micro-batch (the
// earlier ones accumulate locally, as DDP's no_sync does); every rank then runs the whole AdamW.
//
// Per rank (fsdp_memory.h, to the byte; F_u = unit u gathered, S = shards): parameters peak
// S_params + F_root + the layer units gathered at once (1; 2 with prefetch; all for SHARD_GRAD_OP),
// gradients peak S_grads + F_root + max F_u. Communication per micro-batch: FULL_SHARD 3Ψ less the
// root's second gather, SHARD_GRAD_OP 2Ψ, NO_SHARD 2Ψ per step.
//
// Prefetch: the next unit's gather is started (Communicator::start_all_gather) before the current
// unit computes and waited for just before the next unit's first layer, so it runs while the
// current unit computes. Its buffer exists from the start, so two units are gathered at the peak:
// the memory cost of prefetching, which the test checks.
//
// Averaging over the ranks (as ZeRO): each rank's loss is multiplied by 1/N before backward
// (loss_scale()), so the reduced gradient is the global batch's mean and every rank's 16-bit
// gradients hold its share of it, no more: fp16 overflows exactly when one process with the whole
// batch would.
//
// Composing: list this strategy BEFORE activation checkpointing (recompute reads the unit's
// parameters in before_layer_backward, after FSDP has gathered them). Gradient accumulation
// (--accum) works (common/sharding/flat_unit.h). After the strategy is destroyed the model has no
// parameters.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "common/sharding/sharding_engine.h"
#include "common/train/gradient_mode.h"
#include "common/train/data_parallel_strategy.h"
#include "suites/fsdp/fsdp_options.h"

namespace trainmem::fsdp {

class FsdpStrategy : public DataParallelStrategy {
 public:
  // Shards `model` now (every rank must have built it from the same seed); `comm` must outlive
  // this strategy. hyper and max_grad_norm configure the AdamW it runs on its shards; grads says
  // whether the units' gradients are kept between steps (--grads, common/train/gradient_mode.h),
  // in_backward whether each unit's shard is updated as soon as its gradients are reduced.
  FsdpStrategy(Model& model, Communicator& comm, FsdpOptions options, kernels::AdamWHyper hyper, float max_grad_norm,
               GradientMode grads = GradientMode::persistent, OptimizerInBackwardChoice in_backward = {});

  std::string name() const override;
  double loss_scale() const override { return 1.0 / comm_.world_size(); }  // this rank's share of the mean
  Optimizer& optimizer() override { return engine_.optimizer(); }  // give this to the Trainer
  const FsdpOptions& options() const { return options_; }

  void on_data_fetch(StepContext& ctx) override;
  void before_layer_forward(StepContext& ctx, std::size_t layer) override;
  void after_layer_forward(StepContext& ctx, std::size_t layer) override;
  void before_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_backward(StepContext& ctx) override;
  void after_optimizer_step(StepContext& ctx) override;  // gradients not kept: freed

  // Every parameter, whole, in parameters() order, widened to fp32: as stored, and the optimizer's
  // fp32 master weights. Collectives: every rank must call them.
  std::vector<float> parameter_values() override { return engine_.parameter_values(); }
  std::vector<float> master_values() override { return engine_.master_values(); }

  // The most layer units gathered at the same time so far (the root not counted).
  std::size_t peak_gathered_layer_units() const { return engine_.peak_gathered_layer_units(); }

 private:
  void finish_gradients(std::size_t unit, long step);  // reduce (and free) a unit's gradient after its backward

  Communicator& comm_;
  FsdpOptions options_;
  ShardingEngine engine_;
  bool first_micro_step_ = true, last_micro_step_ = true;
};

}  // namespace trainmem::fsdp
