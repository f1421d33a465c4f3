#include "suites/zero/zero_strategy.h"

#include <stdexcept>

#include "common/train/trainer.h"

namespace trainmem::zero {

void validate(const ZeroOptions& options, OptimizerInBackwardChoice in_backward) {
  if (options.offload != Offload::none && options.stage < 1)
    throw std::invalid_argument("--offload " + to_string(options.offload) +
                                " needs --zero 1, 2 or 3: offload moves a rank's shard of the optimizer state to the host, "
                                "and without stages 1-3 every rank keeps every state (there is no shard)");
  if (options.offload == Offload::params && options.stage != 3)
    throw std::invalid_argument("--offload params needs --zero 3: only stage 3 partitions the parameters "
                                "(use --offload optimizer with stages 1 and 2)");
  if (options.stage < -1 || options.stage > 3)
    throw std::invalid_argument("--zero must be 0, 1, 2 or 3, not " + std::to_string(options.stage));
  if (in_backward.on && options.stage == 0)
    throw std::invalid_argument("--optimizer-in-backward needs --zero 1, 2 or 3 (or FSDP): they update each unit's "
                                "shard in the backward; stage 0 keeps a whole optimizer per rank");
}

namespace {

// The engine's plan for a stage: what it keeps whole and what as a shard (the optimizer is
// sharded from stage 1 on), with the trainer's settings.
ShardingPlan plan_of(const ZeroOptions& o, kernels::AdamWHyper hyper, float max_grad_norm, GradientMode grads,
                     bool in_backward) {
  ShardingPlan plan;
  plan.parameters = o.stage == 3 ? Keep::shard : Keep::whole;
  plan.gradients = o.stage >= 2 ? Keep::shard : Keep::whole;
  plan.offload = o.offload;
  plan.adam = hyper;
  plan.max_grad_norm = max_grad_norm;
  plan.gradients_on_demand = grads == GradientMode::on_demand;
  plan.optimizer_in_backward = in_backward;
  return plan;
}

}  // namespace

ZeroStrategy::ZeroStrategy(Model& model, Communicator& comm, ZeroOptions options, kernels::AdamWHyper hyper,
                           float max_grad_norm, GradientMode grads, OptimizerInBackwardChoice in_backward)
    : model_(model), comm_(comm), options_(options), in_backward_(in_backward.on), table_(model.config()) {
  validate(options_, in_backward);
  if (options_.stage < 0) throw std::invalid_argument("ZeroStrategy needs a stage: --zero 0, 1, 2 or 3");
  if (options_.stage == 0) {
    replicated_adamw_ = std::make_unique<AdamWOptimizer>(model_, hyper, max_grad_norm);
    data_parallel_adamw_ = std::make_unique<ReplicatedOptimizer>(*replicated_adamw_, comm_.world_size());
  } else {
    engine_ = std::make_unique<ShardingEngine>(model_, comm_, plan_of(options_, hyper, max_grad_norm, grads, in_backward_));
  }
}

std::string ZeroStrategy::name() const { return "zero-" + std::to_string(options_.stage); }

Optimizer& ZeroStrategy::optimizer() {
  if (engine_) return engine_->optimizer();
  return *data_parallel_adamw_;
}

// Stage 0: every gradient tensor summed over the ranks in place (volume 2 * bytes).
void ZeroStrategy::all_reduce_gradients(const std::vector<std::size_t>& parameters) {
  for (std::size_t i : parameters) {
    Tensor& g = model_.parameters()[i].grad;
    comm_.all_reduce(g.data(), static_cast<std::size_t>(g.numel()), g.dtype(), MemoryCategory::gradients);
  }
}

// ---------------------------------------------------------------------------------------------
// the hooks: unit 0 is the root, unit 1 + l layer l. Gather and release do nothing to whole
// parameters (stages 1-2), opening a bucket nothing to whole gradients (stage 1).
// ---------------------------------------------------------------------------------------------

void ZeroStrategy::on_data_fetch(StepContext& ctx) {
  first_micro_step_ = ctx.micro_step == 0;
  last_micro_step_ = ctx.micro_step + 1 == ctx.trainer.options().accumulation_steps;
  if (engine_) engine_->gather(0);  // the root, for the whole micro-step
}

void ZeroStrategy::before_layer_forward(StepContext&, std::size_t layer) {
  if (engine_) engine_->gather(1 + layer);
}

void ZeroStrategy::after_layer_forward(StepContext&, std::size_t layer) {
  if (!engine_) return;
  engine_->release(1 + layer);
  // The head's backward (tied wte, lnf) writes the root's gradients before any layer's backward.
  if (layer + 1 == model_.config().layers) engine_->unit(0).open_gradients(!first_micro_step_);
}

void ZeroStrategy::before_layer_backward(StepContext&, std::size_t layer) {
  if (!engine_) return;
  engine_->gather(1 + layer);
  engine_->unit(1 + layer).open_gradients(!first_micro_step_);
}

void ZeroStrategy::after_layer_backward(StepContext& ctx, std::size_t layer) {
  // DDP: a layer's gradients are complete; on a GPU this reduction overlaps the next layer's backward.
  if (!engine_) {
    if (last_micro_step_) all_reduce_gradients(table_.layer_indices(layer));
    return;
  }
  reduce_unit_in_backward(1 + layer, ctx.step);
  engine_->release(1 + layer);
}

void ZeroStrategy::after_backward(StepContext& ctx) {
  if (!engine_) {
    if (last_micro_step_) all_reduce_gradients(table_.root_indices());
    return;
  }
  reduce_unit_in_backward(0, ctx.step);
  engine_->release(0);
}

// Stages 2-3 reduce-scatter every unit's bucket after its backward; stage 1 only with the optimizer
// in the backward (else once, before the update). Then the engine may update the unit's shard.
void ZeroStrategy::reduce_unit_in_backward(std::size_t u, long step) {
  if (options_.stage >= 2) engine_->unit(u).reduce_scatter_gradients();
  else if (in_backward_) engine_->unit(u).reduce_scatter_gradients_in_place();
  engine_->gradients_reduced(u, step);
}

// Stage 1: this rank's slice of each unit's summed gradients, in place (volume P_u * e).
void ZeroStrategy::before_optimizer_step(StepContext&) {
  if (options_.stage != 1 || in_backward_) return;
  for (FlatUnit& u : engine_->units()) u.reduce_scatter_gradients_in_place();
}

// Stages 1-2: every rank updated its slice; gather the whole unit again (volume P_u * e). Stage 1's
// gradients start from zero again, padding and the other ranks' slices included (the in-place
// reduce-scatter may have written them) -- or, not kept (on demand, in backward), every stage's are freed.
void ZeroStrategy::after_optimizer_step(StepContext&) {
  if (!engine_) return;
  const bool keeps_gradients = engine_->plan().keeps_gradients();
  if (options_.stage <= 2)
    for (FlatUnit& u : engine_->units()) {
      u.all_gather_parameters_in_place();
      if (options_.stage == 1 && keeps_gradients) u.zero_gradients();
    }
  engine_->release_gradients();  // nothing when kept
}

// ---------------------------------------------------------------------------------------------

std::vector<float> ZeroStrategy::parameter_values() {
  return engine_ ? engine_->parameter_values() : model_.parameter_values();
}

std::vector<float> ZeroStrategy::master_values() {
  if (engine_) return engine_->master_values();
  return replicated_adamw_->has_master_weights() ? replicated_adamw_->master_values() : model_.parameter_values();
}

std::size_t ZeroStrategy::host_bytes() const { return engine_ ? engine_->host_bytes() : 0; }

}  // namespace trainmem::zero
