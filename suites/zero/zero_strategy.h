// ZeRO (Rajbhandari et al. 2019) as a trainer strategy: data parallelism over N ranks in which
// each rank keeps only its 1/N of the model states it does not need at the moment.
//
//   --zero 0   plain data parallelism (DDP): every rank holds everything; the gradients are
//              all-reduced during the last micro-batch's backward, layer by layer as each
//              layer's gradients are complete (the other micro-batches accumulate locally,
//              as DDP's no_sync); AdamWOptimizer on every rank.
//   --zero 1   P_os: the fp32 master weights and Adam's moments are sharded (ShardedAdamW over
//              this rank's slice of every unit, zero_layout.h). Parameters and gradients stay
//              whole, in one flat buffer per unit (the model's tensors become views into them).
//              Before the update: reduce-scatter each unit's gradients (this rank gets the sum
//              of its slice); after it: all-gather each unit's updated parameters.
//   --zero 2   P_os+g: the gradients are sharded too. A unit's full gradients exist only while
//              its backward runs, in a bucket (category communication): opened in
//              before_layer_backward(l), reduce-scattered and freed in after_layer_backward(l);
//              the root unit's bucket lives for the whole micro-step (the tied embedding's
//              gradient is written at both ends) and is reduced in after_backward. With gradient
//              accumulation this happens every micro-batch (as DeepSpeed does): the bucket is
//              seeded with the shard accumulated so far in this rank's slice, so the reduction
//              adds it in. After the update: all-gather the parameters as in stage 1.
//   --zero 3   P_os+g+p: the parameters are sharded too. A layer is all-gathered (category
//              communication) in before_layer_forward(l) and freed in after_layer_forward(l),
//              gathered again in before_layer_backward(l) and freed after it. The root unit is
//              gathered once per micro-step (on_data_fetch .. after_backward), as FSDP's root
//              unit: embedding forward comes before any layer hook and the LM head reuses wte.
//              So stage 3 moves 3P - P_root elements per micro-batch, not 3P.
//   --offload optimizer   (stages 1-3) the optimizer state and the update are on the host
//   --offload params      (stage 3 only) the parameter shards live on the host as well; a unit
//                         is copied to the device into its gather buffer when it is gathered
//
// Averaging over the ranks: each rank's loss is multiplied by 1/N (loss_scale() below), so each
// rank's gradient is its share of the global batch's mean and the reduced SUM is that mean, as
// large as one rank's gradient — never N times larger, which in fp16 (max 65504, with a loss scale
// of 2^16) would overflow in the reduction where the single-rank run does not. The trainer gives
// the optimizer the product of the strategies' factors (loss scale / N) and the optimizers divide
// by it times N (ShardedAdamW; stage 0's DataParallelAdamW): net, the loss scale alone.
//
// Place this strategy FIRST in the trainer's list: its before-hooks must gather parameters before
// another strategy (recompute) runs the layer. With stage 3, recompute policies that rebuild
// other layers than the one being back-propagated (sqrt) are not supported.
//
// The set-up copies the model's tensors into the sharded buffers and frees them, then resets the
// allocator's peak statistics: a real run builds the model sharded from the start
// (deepspeed.zero.Init), so the full model's construction is not part of training's peak.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/model/gpt.h"
#include "common/train/adamw_optimizer.h"
#include "common/train/sharded_adamw.h"
#include "common/train/strategy.h"
#include "suites/zero/zero_layout.h"

namespace trainmem::zero {

struct ZeroOptions {
  int stage = 0;                    // 0, 1, 2 or 3
  Offload offload = Offload::none;  // optimizer: stages 1-3; params: stage 3
  kernels::AdamWHyper adam;
  float max_grad_norm = 1.0f;       // 0 disables clipping
};

// Throws std::invalid_argument naming the flag to change.
void validate(const ZeroOptions& options);

class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(GPT& model, Communicator& comm, ZeroOptions options);
  ~ZeroStrategy() override;

  std::string name() const override;  // "zero-0" .. "zero-3"
  double loss_scale() const override { return 1.0 / comm_.world_size(); }  // this rank's share of the mean
  // The optimizer to give the Trainer (owned by this strategy).
  Optimizer& optimizer() { return *optimizer_; }

  void on_data_fetch(StepContext& ctx) override;
  void before_layer_forward(StepContext& ctx, std::size_t layer) override;
  void after_layer_forward(StepContext& ctx, std::size_t layer) override;
  void before_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_layer_backward(StepContext& ctx, std::size_t layer) override;
  void after_backward(StepContext& ctx) override;
  void before_optimizer_step(StepContext& ctx) override;
  void after_optimizer_step(StepContext& ctx) override;

  // The whole model's parameters as one rank with the whole batch would hold them (fp32 host
  // copy, GPT::parameters() order). A collective with stage 3: every rank must call it.
  std::vector<float> parameter_values();
  std::size_t host_bytes() const;  // offloaded optimizer state and parameter shards
  const ZeroOptions& options() const { return options_; }
  const ZeroLayout& layout() const { return *layout_; }

 private:
  struct UnitBuffers;
  const ZeroUnit& unit_of_layer(std::size_t layer) const { return layout_->layer(layer); }
  std::size_t index_of_layer(std::size_t layer) const { return 1 + layer; }
  bool last_micro_step(const StepContext& ctx) const;

  // model tensors <-> flat buffers
  void point_values(const ZeroUnit& u, void* flat);
  void point_grads(const ZeroUnit& u, void* flat);
  void release_values(const ZeroUnit& u);
  void release_grads(const ZeroUnit& u);
  void* my_slice(void* flat, const ZeroUnit& u) const;  // flat + rank * S_u elements

  // the collectives of each stage
  void all_reduce_gradients(const ZeroUnit& u);            // stage 0
  void gather(std::size_t unit_index);                     // stage 3
  void release_gathered(std::size_t unit_index);           // stage 3
  void open_bucket(std::size_t unit_index);                // stages 2-3
  void reduce_scatter_bucket(std::size_t unit_index);      // stages 2-3

  GPT& model_;
  Communicator& comm_;
  ZeroOptions options_;
  DType dtype_;
  std::size_t element_size_;
  std::vector<std::vector<std::int64_t>> shapes_;  // of every parameter (views need them)
  std::unique_ptr<ZeroLayout> layout_;
  std::vector<UnitBuffers> buffers_;  // per unit, layout order
  std::unique_ptr<AdamWOptimizer> replicated_adamw_;  // stage 0
  std::unique_ptr<Optimizer> data_parallel_adamw_;    // stage 0: the above, averaging over ranks
  std::unique_ptr<ShardedAdamW> sharded_adamw_;       // stages 1-3
  Optimizer* optimizer_ = nullptr;                    // the one of the two the trainer calls
};

}  // namespace trainmem::zero
