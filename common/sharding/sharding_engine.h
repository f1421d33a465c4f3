// The sharding engine: the model's parameters as flat units (unit_layout.h) sharded over the N
// ranks of a Communicator, with the collectives of each unit (flat_unit.h) and AdamW over this
// rank's shards (sharded_adamw.h). ZeRO stages 1-3 (suites/zero) and FSDP's modes (suites/fsdp)
// are policies over it: each chooses a ShardingPlan (what is kept whole, what as a shard) and, in
// the trainer's hooks, when a unit is gathered, released and reduced.
//
//                        parameters    gradients   optimizer   K (layers per unit)
//   ZeRO-1               whole         whole       sharded     1
//   ZeRO-2               whole         shard       sharded     1
//   ZeRO-3 (+offload)    shard (host)  shard       sharded     1
//   FSDP FULL_SHARD      shard         shard       sharded     --fsdp-unit
//   FSDP SHARD_GRAD_OP   shard         shard       sharded     --fsdp-unit
//   FSDP NO_SHARD        whole         whole       replicated  --fsdp-unit   (units cut into 1 slice)
// (ZeRO stage 0 keeps the model's own tensors: no engine, only ReplicatedOptimizer.)
//
// The category of every buffer — one convention for every policy, its formulas (zero_memory.h,
// fsdp_memory.h), tests and reports. A buffer's category is WHAT IT HOLDS, as PyTorch's memory
// profiler categorizes (PARAMETER, GRADIENT, OPTIMIZER_STATE; it has no communication category):
//   parameters       a unit's flat parameters kept whole, this rank's parameter shard, and a unit's
//                    gathered parameters (from start_gather to release)
//   gradients        a unit's flat gradients kept whole, this rank's gradient shard, and a unit's
//                    gradient bucket (its full gradients in backward, until the reduce-scatter)
//   optimizer_state  ShardedAdamW's fp32 master weights and moments of this rank's shards
//   communication    only a buffer that exists just to move bytes: master_values()' staging
//                    buffer (outside training). Training allocates none, so its peak is 0.
// Host memory (offloaded optimizer state, parameter shards) is outside the allocator: host_bytes().
//
// The optimizer in the backward (ShardingPlan::optimizer_in_backward, --optimizer-in-backward):
// a policy calls gradients_reduced(u) as soon as unit u's gradients are complete and reduced on
// this rank (after its reduce-scatter; unsharded, its all-reduce); the engine updates this rank's
// shard of the unit at once and frees the unit's gradients. The optimizer given to the trainer then
// only counts steps. No whole-gradient decision can be made (no clipping, no fp16 skip: refused by
// the registration), and the factor is 1: each rank's loss carries 1/N, the reduction sums N.
//
// Averaging: the policies scale each rank's loss by 1/N (loss_scale()), so a reduced gradient is
// the global batch's mean; ShardedAdamW divides by the trainer's factor times N (replicated: the
// ReplicatedOptimizer multiplies it by N), net the user's loss scale alone.
//
// The set-up copies the model's values into the units and frees them, then resets the
// allocator's peak statistics. A training run builds the model with its values on the host
// (ModelOptions::values_on_host: the run's sharding technique takes_the_parameters), so the whole
// model is never on the device, as deepspeed.zero.Init and FSDP on the meta device build it; a
// model built on the device (the suites' own tests) is taken from there.
// After the engine is destroyed the model has no parameters.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/model.h"
#include "common/sharding/flat_unit.h"
#include "common/sharding/replicated_optimizer.h"
#include "common/sharding/sharded_adamw.h"
#include "kernels/adamw.h"

namespace trainmem {

struct ShardingPlan {
  std::size_t layers_per_unit = 1;
  Keep parameters = Keep::shard;    // whole or shard (kept on the host with Offload::params)
  Keep gradients = Keep::shard;     // whole or shard
  bool shard_optimizer = true;      // false: every rank keeps and updates everything (NO_SHARD)
  Offload offload = Offload::none;  // optimizer: state and update on the host; params: the parameter shards too
  kernels::AdamWHyper adam;
  float max_grad_norm = 1.0f;       // 0 disables clipping
  // --grads on-demand (common/train/gradient_mode.h): no gradient storage between optimizer
  // steps; each unit's made by its first backward of a step (flat_unit.h), all freed by
  // release_gradients() after the step.
  bool gradients_on_demand = false;
  // --optimizer-in-backward: each unit's shard updated in the backward (above); implies on demand.
  bool optimizer_in_backward = false;
  // Whether the units' gradients stay between optimizer steps (persistent: neither flag above).
  bool keeps_gradients() const { return !gradients_on_demand && !optimizer_in_backward; }
};

class ShardingEngine {
 public:
  // Shards `model` now (every rank must have built it from the same seed); `comm` must outlive
  // the engine. Throws std::invalid_argument for a plan that cannot work.
  ShardingEngine(Model& model, Communicator& comm, ShardingPlan plan);
  ~ShardingEngine();

  const ShardingPlan& plan() const { return plan_; }
  std::vector<FlatUnit>& units() { return units_; }  // [0] is the root
  FlatUnit& unit(std::size_t u) { return units_.at(u); }
  std::size_t unit_of_layer(std::size_t layer) const { return 1 + layer / plan_.layers_per_unit; }
  bool first_layer_of_unit(std::size_t layer) const { return layer % plan_.layers_per_unit == 0; }
  bool last_layer_of_unit(std::size_t layer) const;

  // FlatUnit's, counting the layer units gathered (or being gathered) at once.
  void gather(std::size_t u);
  void start_gather(std::size_t u);
  void release(std::size_t u) { units_.at(u).release(); }
  std::size_t peak_gathered_layer_units() const { return peak_gathered_; }  // the root not counted

  // After the optimizer step (updated or skipped: PyTorch's zero_grad runs either way): every
  // unit's gradients freed, unless the plan keeps them (then nothing).
  void release_gradients();
  // Unit u's gradients are complete and reduced on this rank: with the optimizer in the backward,
  // its shard is updated (optimizer step `step`) and the unit's gradients freed; otherwise nothing.
  void gradients_reduced(std::size_t u, long step);

  Optimizer& optimizer();  // give this to the Trainer
  std::size_t host_bytes() const;

  // The whole model as one rank with the whole batch would hold it, in Model::parameters() order,
  // widened to fp32: the parameters as stored (gathering what is not gathered, then releasing it),
  // and the optimizer's fp32 master weights. Collectives: every rank must call them.
  std::vector<float> parameter_values();
  std::vector<float> master_values();

 private:
  void note_gathered();

  Model& model_;
  Communicator& comm_;
  ShardingPlan plan_;
  std::vector<FlatUnit> units_;
  std::unique_ptr<Communicator> local_comm_;  // replicated: the optimizer sees no other rank
  std::unique_ptr<ShardedAdamW> adam_;
  std::unique_ptr<ReplicatedOptimizer> replicated_;
  std::unique_ptr<Optimizer> step_counter_;  // the trainer's optimizer with the update in the backward
  std::size_t peak_gathered_ = 0;
};

}  // namespace trainmem
