// ZeRO (Rajbhandari et al. 2019) as a trainer strategy: data parallelism over N ranks in which
// each rank keeps only its 1/N of the model states it does not need at the moment. Stages 1-3 are
// a policy over the sharding engine (common/sharding/sharding_engine.h: units, gather, buckets,
// ShardedAdamW); this file says which plan each stage runs and, in which hook, what it does.
//
//   --zero 0   plain data parallelism (DDP): every rank holds everything in the model's own
//              tensors; each layer's gradients are all-reduced in the last micro-batch's backward
//              as soon as they are complete (the other micro-batches accumulate locally, as DDP's
//              no_sync); AdamWOptimizer on every rank (ReplicatedOptimizer does the averaging).
//   --zero 1   P_os: optimizer state sharded. Parameters and gradients whole, one flat buffer per
//              unit. Before the update: reduce-scatter each unit's gradients (this rank gets the sum
//              of its slice); after it: all-gather each unit's updated parameters.
//   --zero 2   P_os+g: gradients sharded too. A unit's full gradients exist only in its backward
//              (the bucket: opened before_layer_backward(l), reduce-scattered after_layer_backward(l);
//              the root's from the head's backward to after_backward), every micro-batch, as
//              DeepSpeed does. After the update: all-gather the parameters as in stage 1.
//   --zero 3   P_os+g+p: parameters sharded too. A layer is gathered around its forward and again
//              around its backward; the root for the whole micro-step (embedding forward comes
//              before any layer hook, the LM head reuses wte). So stage 3 moves 3P - P_root
//              elements per micro-batch, not 3P. (This is FSDP FULL_SHARD with one layer per unit.)
//   --offload optimizer   (stages 1-3) the optimizer state and the update are on the host
//   --offload params      (stage 3 only) the parameter shards live on the host as well
//
// Per rank, 16-bit with Adam (zero_memory.h has these and the exact, byte-for-byte version):
//   stage 0 2Ψ + 2Ψ + 12Ψ,  1: 2Ψ + 2Ψ + 12Ψ/N,  2: 2Ψ + (2Ψ + 12Ψ)/N,  3: (2Ψ + 2Ψ + 12Ψ)/N
// plus, at the peak, the units gathered and the buckets open (categories parameters, gradients).
//
// Averaging: each rank's loss is multiplied by 1/N (loss_scale()), so each rank's gradient is its
// share of the global mean and the reduced SUM is that mean, no larger than one rank's gradient:
// fp16 overflows exactly when one process with the whole batch would.
//
// Place this strategy FIRST in the trainer's list: its before-hooks must gather parameters before
// another strategy (recompute) runs the layer. With stage 3, recompute policies that rebuild
// other layers than the one being back-propagated (sqrt) are not supported.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "common/model/parameter_table.h"
#include "common/sharding/sharding_engine.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/data_parallel_strategy.h"
#include "common/train/gradient_mode.h"

namespace trainmem::zero {

// ZeRO's options, as the flags give them (an option of the setup, TrainingSetup::option<ZeroOptions>()).
// The rest a run needs -- AdamW's settings, clipping, the gradients' lifetime -- are the trainer's,
// passed to the strategy beside them; the sharding engine gets both as its ShardingPlan (plan_of).
struct ZeroOptions {
  int stage = -1;                   // --zero 0, 1, 2 or 3; -1: not given (no ZeRO)
  Offload offload = Offload::none;  // --offload: optimizer needs stages 1-3, params stage 3
};

// Every rule of ZeRO's options, and of the trainer's that concern it (the update in the
// backward): throws std::invalid_argument naming the flag to change. Stage -1 without offload is
// ZeRO not used, and valid.
void validate(const ZeroOptions& options, OptimizerInBackwardChoice in_backward = {});

class ZeroStrategy : public DataParallelStrategy {
 public:
  // Shards `model` now with stages 1-3 (every rank must have built it from the same seed); `comm`
  // must outlive this strategy. `options.stage` must be 0-3. hyper and max_grad_norm configure the
  // AdamW it runs; grads says whether gradients are kept between steps (--grads,
  // common/train/gradient_mode.h), in_backward whether each unit's shard is updated as soon as its
  // gradients are reduced (stages 1-3). As FsdpStrategy's.
  ZeroStrategy(Model& model, Communicator& comm, ZeroOptions options, kernels::AdamWHyper hyper, float max_grad_norm,
               GradientMode grads = GradientMode::persistent, OptimizerInBackwardChoice in_backward = {});

  std::string name() const override;  // "zero-0" .. "zero-3"
  double loss_scale() const override { return 1.0 / comm_.world_size(); }  // this rank's share of the mean
  // The optimizer to give the Trainer (owned by this strategy).
  Optimizer& optimizer() override;

  void on_data_fetch(StepContext& ctx) override;
  void before_layer_forward(StepContext& ctx, std::size_t layer) override;
  void after_layer_forward(StepContext& ctx, std::size_t layer) override;
  void before_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_backward(StepContext& ctx) override;
  void before_optimizer_step(StepContext& ctx) override;
  void after_optimizer_step(StepContext& ctx) override;

  // The whole model as one rank with the whole batch would hold it (fp32 host copies,
  // Model::parameters() order): the parameters as stored, and the optimizer's fp32 master weights.
  // Collectives with stages 1-3: every rank must call them.
  std::vector<float> parameter_values() override;
  std::vector<float> master_values() override;
  std::size_t host_bytes() const;  // offloaded optimizer state and parameter shards
  const ZeroOptions& options() const { return options_; }

 private:
  void all_reduce_gradients(const std::vector<std::size_t>& parameters);  // stage 0, tensor by tensor
  void reduce_unit_in_backward(std::size_t u, long step);                  // stages 1-3

  Model& model_;
  Communicator& comm_;
  ZeroOptions options_;
  bool in_backward_;      // --optimizer-in-backward (stages 1-3)
  ParameterTable table_;  // stage 0: which tensors a layer has
  bool first_micro_step_ = true, last_micro_step_ = true;
  std::unique_ptr<ShardingEngine> engine_;            // stages 1-3
  std::unique_ptr<AdamWOptimizer> replicated_adamw_;  // stage 0
  std::unique_ptr<ReplicatedOptimizer> data_parallel_adamw_;
};

}  // namespace trainmem::zero
