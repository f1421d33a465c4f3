#include "suites/fsdp/fsdp_strategy.h"

#include <stdexcept>

#include "common/train/trainer.h"

namespace trainmem::fsdp {

namespace {

// The optimizer NO_SHARD runs: the whole AdamW on every rank (a ShardedAdamW over a world of one,
// so it needs no other rank). Its gradients are the SUM over the N ranks (all-reduce) of each
// rank's share (1/N of its mean: loss_scale()), the global mean times the user's loss scale. The
// trainer's factor includes the 1/N; ShardedAdamW divides by factor * its world size (1), so the
// factor it is given is multiplied by N, as the sharded modes' ShardedAdamW does with its N.
class WholeModelAdamW : public Optimizer {
 public:
  WholeModelAdamW(ShardedAdamW& adam, int world) : adam_(adam), world_(world) {}
  StepOutcome step(double loss_scale) override { return adam_.step(loss_scale * world_); }
  long steps_taken() const override { return adam_.steps_taken(); }

 private:
  ShardedAdamW& adam_;
  int world_;
};

}  // namespace

FsdpStrategy::FsdpStrategy(GPT& model, Communicator& comm, FsdpOptions options, kernels::AdamWHyper hyper,
                           float max_grad_norm)
    : model_(model), comm_(comm), options_(options) {
  const GPTConfig& config = model_.config();
  if (config.layers == 0) throw std::invalid_argument("--fsdp needs a model with at least one layer");
  const std::vector<UnitLayout> layouts =
      unit_layouts(config, static_cast<std::size_t>(comm_.world_size()), options_.layers_per_unit, options_.mode);

  // The units' parameters, by the model's parameter table (common/model/parameter_table.h).
  const ParameterTable table(config);
  if (model_.parameters().size() != table.size())
    throw std::logic_error("FSDP: the model's parameters are not its parameter table's");

  units_.reserve(layouts.size());
  for (const UnitLayout& layout : layouts) {
    std::vector<std::size_t> indices;
    if (layout.root) {
      indices = table.root_indices();
    } else {
      for (std::size_t l = layout.first_layer; l < layout.first_layer + layout.layers; ++l)
        for (std::size_t i : table.layer_indices(l)) indices.push_back(i);
    }
    units_.emplace_back(model_, comm_, layout, std::move(indices), options_.mode);
  }

  Device& device = model_.device();
  if (options_.mode == ShardingMode::none) {
    local_comm_ = make_communicator(device, "local");
    adam_ = std::make_unique<ShardedAdamW>(device, *local_comm_, hyper, max_grad_norm);
  } else {
    adam_ = std::make_unique<ShardedAdamW>(device, comm_, hyper, max_grad_norm);
  }
  for (FlatUnit& u : units_)
    adam_->add_shard(u.shard().data(), u.shard_grad().data(), u.layout().shard_numel, model_.dtype(), u.name());
  if (options_.mode == ShardingMode::none)
    optimizer_ = std::make_unique<WholeModelAdamW>(*adam_, comm_.world_size());
}

FsdpStrategy::~FsdpStrategy() {
  // The model's parameters are views into the units' buffers, which go with this strategy.
  for (Parameter& p : model_.parameters()) {
    if (p.value.is_view()) p.value.reset();
    if (p.grad.is_view()) p.grad.reset();
  }
}

std::string FsdpStrategy::name() const {
  std::string s = "fsdp:";
  s += to_string(options_.mode);
  s += " unit=";
  s += unit_to_string(options_.layers_per_unit);
  s += options_.prefetch ? " prefetch=on" : " prefetch=off";
  return s;
}

Optimizer& FsdpStrategy::optimizer() {
  if (optimizer_) return *optimizer_;
  return *adam_;
}

bool FsdpStrategy::last_layer_of_unit(std::size_t layer) const {
  return layer % options_.layers_per_unit == options_.layers_per_unit - 1 || layer + 1 == model_.config().layers;
}

void FsdpStrategy::gather(std::size_t unit) {
  units_[unit].gather();
  note_peak();
}

void FsdpStrategy::start_gather(std::size_t unit) {
  units_[unit].start_gather();
  note_peak();
}

// A unit being gathered counts: its buffer is allocated.
void FsdpStrategy::note_peak() {
  std::size_t gathered = 0;
  for (std::size_t u = 1; u < units_.size(); ++u) gathered += units_[u].gathered() ? 1 : 0;
  if (options_.mode != ShardingMode::none && gathered > peak_gathered_) peak_gathered_ = gathered;
}

void FsdpStrategy::on_data_fetch(StepContext& ctx) {
  first_micro_step_ = ctx.micro_step == 0;
  last_micro_step_ = ctx.micro_step + 1 == ctx.trainer.options().accumulation_steps;
  gather(0);  // the root: the embedding runs before the first layer hook
}

void FsdpStrategy::before_layer_forward(StepContext&, std::size_t layer) {
  if (!first_layer_of_unit(layer)) return;
  const std::size_t u = unit_of_layer(layer);
  gather(u);
  // The next unit's gather runs while this one computes; its first layer waits for it.
  if (options_.prefetch && u + 1 < units_.size()) start_gather(u + 1);
}

void FsdpStrategy::after_layer_forward(StepContext&, std::size_t layer) {
  if (last_layer_of_unit(layer) && options_.mode == ShardingMode::full) units_[unit_of_layer(layer)].release();
  // The head's backward (tied wte, lnf) writes the root's gradients before any layer's backward.
  if (layer + 1 == model_.config().layers) units_[0].begin_gradients(!first_micro_step_);
}

void FsdpStrategy::before_layer_backward(StepContext&, std::size_t layer) {
  if (!last_layer_of_unit(layer)) return;
  const std::size_t u = unit_of_layer(layer);
  gather(u);  // FULL_SHARD freed it after forward; SHARD_GRAD_OP still holds it
  if (options_.prefetch && u > 1) start_gather(u - 1);  // gathered while this one computes its backward
  units_[u].begin_gradients(!first_micro_step_);
}

void FsdpStrategy::finish_gradients(FlatUnit& unit) {
  if (options_.mode == ShardingMode::none) {
    // Earlier micro-batches accumulate locally; the sum over ranks is taken once per step.
    if (last_micro_step_) unit.all_reduce_gradients();
    return;
  }
  unit.reduce_gradients();
  unit.release();
}

void FsdpStrategy::after_layer_backward(StepContext&, std::size_t layer) {
  if (first_layer_of_unit(layer)) finish_gradients(units_[unit_of_layer(layer)]);
}

void FsdpStrategy::after_backward(StepContext&) { finish_gradients(units_[0]); }

std::vector<float> FsdpStrategy::parameter_values() {
  std::vector<bool> was_gathered;
  for (FlatUnit& u : units_) {
    was_gathered.push_back(u.gathered());
    u.gather();
  }
  std::vector<float> values = model_.parameter_values();
  for (std::size_t i = 0; i < units_.size(); ++i)
    if (!was_gathered[i]) units_[i].release();
  return values;
}

}  // namespace trainmem::fsdp
