// Fully Sharded Data Parallel (Zhao et al. 2023, "PyTorch FSDP"), as a trainer strategy.
//
// The model is cut into units (fsdp_units.h): the root (embeddings + final layernorm) and one
// unit per K transformer layers. Each unit's parameters are one flat vector (flat_unit.h) of which
// each rank keeps a 1/N shard, with the shard's gradient and its AdamW state (ShardedAdamW, the
// optimizer to give the Trainer). Per micro-batch (hooks in brackets):
//
//   [on_data_fetch]           gather the root (it stays gathered until the end of backward)
//   [before_layer_forward]    at a unit's first layer: gather it (prefetched: wait for its gather);
//                             prefetch on: start the next unit's gather
//   [after_layer_forward]     at a unit's last layer: FULL_SHARD frees it (SHARD_GRAD_OP keeps it);
//                             after the last layer: the root's full gradient buffer (the tied LM
//                             head and the final layernorm write their gradients there first)
//   [before_layer_backward]   at a unit's last layer: gather it (FULL_SHARD; SHARD_GRAD_OP still
//                             has it; prefetched: wait); prefetch on: start the gather of the one
//                             below; its full gradient
//   [after_layer_backward]    at a unit's first layer: reduce-scatter its gradient into the shard
//                             gradient, free the full gradient and the gathered parameters
//   [after_backward]          the same for the root
//
// NO_SHARD keeps every unit whole on every rank and all-reduces each unit's gradient after the
// unit's backward on the step's last micro-batch (the earlier ones accumulate locally, as DDP's
// no_sync does); every rank then runs the whole AdamW.
//
// Prefetch: the next unit's gather is started (Communicator::start_all_gather) before the current
// unit computes and waited for just before the next unit's first layer, so it runs while the
// current unit computes: MPI_Iallgather on CPU ranks, a communication stream under NCCL (the
// local backend and MPI staging a GPU gather at once). Its buffer exists from the start, so two
// units are gathered at the peak: the memory effect of prefetching, which the test checks.
//
// Averaging over the ranks (as ZeRO, suites/zero/zero_strategy.h): each rank's loss is multiplied
// by 1/N before backward (loss_scale()), so the reduced gradient is the global batch's mean and
// every rank's 16-bit gradients hold its share of it, no more: fp16 overflows exactly when one
// process with the whole batch would. (Summing the ranks' means and dividing afterwards gave the
// same fp32 result but N times larger fp16 gradients, which overflowed first.)
//
// Composing: list this strategy BEFORE activation checkpointing (recompute reads the unit's
// parameters in before_layer_backward, after FSDP has gathered them). Gradient accumulation
// (--accum) works: see flat_unit.h. After the strategy is destroyed the model has no parameters.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/gpt.h"
#include "common/train/sharded_adamw.h"
#include "common/train/strategy.h"
#include "suites/fsdp/flat_unit.h"
#include "suites/fsdp/fsdp_options.h"

namespace trainmem::fsdp {

class FsdpStrategy : public Strategy {
 public:
  // Shards `model` now (every rank must have built it from the same seed); `comm` must outlive
  // this strategy. hyper and max_grad_norm configure the AdamW it runs on its shards.
  FsdpStrategy(GPT& model, Communicator& comm, FsdpOptions options, kernels::AdamWHyper hyper, float max_grad_norm);
  ~FsdpStrategy() override;

  std::string name() const override;
  double loss_scale() const override { return 1.0 / comm_.world_size(); }  // this rank's share of the mean
  Optimizer& optimizer();  // give this to the Trainer
  const FsdpOptions& options() const { return options_; }

  void on_data_fetch(StepContext& ctx) override;
  void before_layer_forward(StepContext& ctx, std::size_t layer) override;
  void after_layer_forward(StepContext& ctx, std::size_t layer) override;
  void before_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_backward(StepContext& ctx) override;

  // Every parameter, whole, in parameters() order, widened to fp32 (gathers the units that are
  // not gathered, then frees them). A collective: every rank must call it.
  std::vector<float> parameter_values();

  const std::vector<FlatUnit>& units() const { return units_; }  // [0] is the root
  // The most layer units gathered at the same time so far (the root not counted).
  std::size_t peak_gathered_layer_units() const { return peak_gathered_; }

 private:
  std::size_t unit_of_layer(std::size_t layer) const { return 1 + layer / options_.layers_per_unit; }
  bool first_layer_of_unit(std::size_t layer) const { return layer % options_.layers_per_unit == 0; }
  bool last_layer_of_unit(std::size_t layer) const;
  void gather(std::size_t unit);        // gathered when it returns (waits for a prefetch)
  void start_gather(std::size_t unit);  // prefetch: started, waited for by gather(unit)
  void note_peak();
  void finish_gradients(FlatUnit& unit);  // reduce (and free) a unit's gradient after its backward

  GPT& model_;
  Communicator& comm_;
  FsdpOptions options_;
  std::vector<FlatUnit> units_;
  std::unique_ptr<Communicator> local_comm_;  // NO_SHARD: the optimizer is not sharded
  std::unique_ptr<ShardedAdamW> adam_;
  std::unique_ptr<Optimizer> optimizer_;      // what the trainer calls
  bool first_micro_step_ = true, last_micro_step_ = true;
  std::size_t peak_gathered_ = 0;
};

}  // namespace trainmem::fsdp
