#include "suites/fsdp/fsdp_strategy.h"

#include "common/train/trainer.h"

namespace trainmem::fsdp {

namespace {

// FULL_SHARD and SHARD_GRAD_OP shard everything; NO_SHARD keeps everything whole on every rank.
ShardingPlan plan_of(const FsdpOptions& o, kernels::AdamWHyper hyper, float max_grad_norm, GradientMode grads,
                     OptimizerInBackwardChoice in_backward) {
  const bool sharded = o.mode != ShardingMode::none;
  ShardingPlan plan;
  plan.layers_per_unit = o.layers_per_unit;
  plan.parameters = sharded ? Keep::shard : Keep::whole;
  plan.gradients = sharded ? Keep::shard : Keep::whole;
  plan.shard_optimizer = sharded;
  plan.adam = hyper;
  plan.max_grad_norm = max_grad_norm;
  plan.gradients_on_demand = grads == GradientMode::on_demand;
  plan.optimizer_in_backward = in_backward.on;
  return plan;
}

}  // namespace

FsdpStrategy::FsdpStrategy(Model& model, Communicator& comm, FsdpOptions options, kernels::AdamWHyper hyper,
                           float max_grad_norm, GradientMode grads, OptimizerInBackwardChoice in_backward)
    : comm_(comm), options_(options), engine_(model, comm, plan_of(options, hyper, max_grad_norm, grads, in_backward)) {}

std::string FsdpStrategy::name() const {
  std::string s = "fsdp:";
  s += to_string(options_.mode);
  s += " unit=";
  s += unit_to_string(options_.layers_per_unit);
  s += options_.prefetch ? " prefetch=on" : " prefetch=off";
  return s;
}

void FsdpStrategy::on_data_fetch(StepContext& ctx) {
  first_micro_step_ = ctx.micro_step == 0;
  last_micro_step_ = ctx.micro_step + 1 == ctx.trainer.options().accumulation_steps;
  engine_.gather(0);  // the root: the embedding runs before the first layer hook
}

void FsdpStrategy::before_layer_forward(StepContext&, std::size_t layer) {
  if (!engine_.first_layer_of_unit(layer)) return;
  const std::size_t u = engine_.unit_of_layer(layer);
  engine_.gather(u);
  // The next unit's gather runs while this one computes; its first layer waits for it.
  if (options_.prefetch && u + 1 < engine_.units().size()) engine_.start_gather(u + 1);
}

void FsdpStrategy::after_layer_forward(StepContext& ctx, std::size_t layer) {
  if (engine_.last_layer_of_unit(layer) && options_.mode == ShardingMode::full) engine_.release(engine_.unit_of_layer(layer));
  // The head's backward (tied wte, lnf) writes the root's gradients before any layer's backward.
  if (layer + 1 == ctx.model.config().layers) engine_.unit(0).open_gradients(!first_micro_step_);
}

void FsdpStrategy::before_layer_backward(StepContext&, std::size_t layer) {
  if (!engine_.last_layer_of_unit(layer)) return;
  const std::size_t u = engine_.unit_of_layer(layer);
  engine_.gather(u);  // FULL_SHARD freed it after forward; SHARD_GRAD_OP still holds it
  if (options_.prefetch && u > 1) engine_.start_gather(u - 1);  // gathered while this one computes its backward
  engine_.unit(u).open_gradients(!first_micro_step_);
}

// Then, with the optimizer in the backward, the engine updates the unit's shard (gradients_reduced).
void FsdpStrategy::finish_gradients(std::size_t unit, long step) {
  if (options_.mode == ShardingMode::none) {
    // Earlier micro-batches accumulate locally; the sum over ranks is taken once per step.
    if (last_micro_step_) {
      engine_.unit(unit).all_reduce_gradients();
      engine_.gradients_reduced(unit, step);
    }
    return;
  }
  engine_.unit(unit).reduce_scatter_gradients();
  engine_.gradients_reduced(unit, step);
  engine_.release(unit);
}

void FsdpStrategy::after_layer_backward(StepContext& ctx, std::size_t layer) {
  if (engine_.first_layer_of_unit(layer)) finish_gradients(engine_.unit_of_layer(layer), ctx.step);
}

void FsdpStrategy::after_backward(StepContext& ctx) { finish_gradients(0, ctx.step); }

void FsdpStrategy::after_optimizer_step(StepContext&) { engine_.release_gradients(); }  // nothing when kept

}  // namespace trainmem::fsdp
