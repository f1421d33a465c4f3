#include "common/sharding/sharding_engine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "common/device/device_ops.h"
#include "common/model/parameter_table.h"

namespace trainmem {

namespace {

// The trainer's optimizer when the updates ran in the backward (gradients_reduced): it counts the
// steps, and checks that the gradients carried no factor but the 1/N share of the mean, which
// the N-rank reduction cancels (no loss scale: the updates used a factor of 1).
class StepCounter : public Optimizer {
 public:
  explicit StepCounter(int world_size) : world_size_(world_size) {}
  StepOutcome step(double loss_scale) override {
    if (std::abs(loss_scale * world_size_ - 1.0) > 1e-9)
      throw std::logic_error("the optimizer in the backward updated without a loss scale, but the step has one");
    ++steps_;
    return {};  // no whole gradient ever existed: its norm is not known (0)
  }
  long steps_taken() const override { return steps_; }

 private:
  int world_size_;
  long steps_ = 0;
};

}  // namespace

ShardingEngine::ShardingEngine(Model& model, Communicator& comm, ShardingPlan plan)
    : model_(model), comm_(comm), plan_(plan) {
  const ModelConfig& config = model_.config();
  if (config.layers == 0) throw std::invalid_argument("sharding needs a model with at least one layer");
  if (plan_.parameters == Keep::host_shard || plan_.gradients == Keep::host_shard)
    throw std::invalid_argument("ShardingPlan: host-resident parameter shards are asked by Offload::params");
  if (plan_.offload == Offload::params && plan_.parameters != Keep::shard)
    throw std::invalid_argument("ShardingPlan: offloaded parameters (Offload::params) need sharded parameters (ZeRO-3)");
  if (!plan_.shard_optimizer && (plan_.parameters != Keep::whole || plan_.gradients != Keep::whole || plan_.offload != Offload::none))
    throw std::invalid_argument("ShardingPlan: a replicated optimizer needs whole parameters and gradients on the device");
  if (model_.parameters().size() != ParameterTable(config).size())
    throw std::logic_error("sharding: the model's parameters are not its parameter table's");

  // Unsharded units are cut into one slice: no padding, every rank owns the whole unit.
  const auto N = static_cast<std::size_t>(comm_.world_size());
  const Keep parameters = plan_.offload == Offload::params ? Keep::host_shard : plan_.parameters;
  std::vector<UnitLayout> layouts = unit_layouts(config, plan_.shard_optimizer ? N : 1, plan_.layers_per_unit);
  units_.reserve(layouts.size());
  for (UnitLayout& layout : layouts)
    units_.emplace_back(model_, comm_, std::move(layout), parameters, plan_.gradients, !plan_.keeps_gradients());

  Device& device = model_.device();
  if (plan_.shard_optimizer) {
    adam_ = std::make_unique<ShardedAdamW>(device, comm_, plan_.adam, plan_.max_grad_norm, plan_.offload);
  } else {
    local_comm_ = make_communicator(device, "local");
    adam_ = std::make_unique<ShardedAdamW>(device, *local_comm_, plan_.adam, plan_.max_grad_norm);
    replicated_ = std::make_unique<ReplicatedOptimizer>(*adam_, comm_.world_size());
  }
  if (plan_.optimizer_in_backward) {
    if (plan_.max_grad_norm > 0)
      throw std::invalid_argument("ShardingPlan: the optimizer in the backward cannot clip by the global norm");
    step_counter_ = std::make_unique<StepCounter>(comm_.world_size());
  }
  for (FlatUnit& u : units_)  // (units_ is never resized again: &u stays valid)
    adam_->add_shard(u.owned_parameters(), [&u] { return u.owned_gradients(); }, u.layout().shard_numel, model_.dtype(),
                     u.layout().name);
  // Building the model whole is not training (header).
  device.allocator().reset_peak_stats();
}

ShardingEngine::~ShardingEngine() {
  // The model's parameters are views into the units' buffers, which go with the engine.
  for (Parameter& p : model_.parameters()) {
    if (p.value.is_view()) p.value.reset();
    if (p.grad.is_view()) p.grad.reset();
  }
}

bool ShardingEngine::last_layer_of_unit(std::size_t layer) const {
  return layer % plan_.layers_per_unit == plan_.layers_per_unit - 1 || layer + 1 == model_.config().layers;
}

void ShardingEngine::gather(std::size_t u) {
  units_.at(u).gather();
  note_gathered();
}

void ShardingEngine::start_gather(std::size_t u) {
  units_.at(u).start_gather();
  note_gathered();
}

void ShardingEngine::note_gathered() {
  if (plan_.parameters == Keep::whole) return;  // always "gathered": nothing to count
  std::size_t gathered = 0;
  for (std::size_t u = 1; u < units_.size(); ++u) gathered += units_[u].gathered() ? 1 : 0;
  if (gathered > peak_gathered_) peak_gathered_ = gathered;
}

void ShardingEngine::release_gradients() {
  if (plan_.keeps_gradients()) return;
  for (FlatUnit& u : units_) u.release_gradients();
}

void ShardingEngine::gradients_reduced(std::size_t u, long step) {
  if (!plan_.optimizer_in_backward) return;
  adam_->update_shard(u, step, 1.0f);  // the factor is 1 (header)
  units_.at(u).release_gradients();
}

Optimizer& ShardingEngine::optimizer() {
  if (step_counter_) return *step_counter_;
  if (replicated_) return *replicated_;
  return *adam_;
}

std::size_t ShardingEngine::host_bytes() const {
  std::size_t n = adam_->host_state_bytes();
  for (const FlatUnit& u : units_) n += u.host_bytes();
  return n;
}

std::vector<float> ShardingEngine::parameter_values() {
  std::vector<bool> was_gathered;
  for (FlatUnit& u : units_) {
    was_gathered.push_back(u.gathered());
    u.gather();
  }
  std::vector<float> values = model_.parameter_values();
  for (std::size_t u = 0; u < units_.size(); ++u)
    if (!was_gathered[u]) units_[u].release();
  return values;
}

std::vector<float> ShardingEngine::master_values() {
  // Where each parameter starts in parameters() order.
  const ParameterTable table(model_.config());
  std::vector<std::size_t> start;
  std::size_t total = 0;
  for (const ParameterInfo& p : table.all()) {
    start.push_back(total);
    total += p.numel();
  }
  std::vector<float> out(total);
  Device& device = model_.device();
  for (std::size_t ui = 0; ui < units_.size(); ++ui) {
    const UnitLayout& layout = units_[ui].layout();
    std::vector<float> whole = adam_->master_values(ui);  // this rank's S elements
    if (layout.shard_numel != layout.padded_numel) {
      // Every rank's slice, through a device buffer that exists only to move them (communication).
      Tensor staging(device.allocator(), {static_cast<std::int64_t>(layout.padded_numel)}, DType::f32,
                     MemoryCategory::communication, layout.name + ".master_staging");
      float* mine = staging.data_as<float>() + static_cast<std::size_t>(comm_.rank()) * layout.shard_numel;
      copy_host_to_device(device, mine, whole.data(), whole.size() * sizeof(float));
      comm_.all_gather(mine, staging.data(), layout.shard_numel, DType::f32, MemoryCategory::optimizer_state);
      whole.resize(layout.padded_numel);
      copy_device_to_host(device, whole.data(), staging.data(), staging.nbytes());
    }
    for (std::size_t k = 0; k < layout.parameters.size(); ++k) {
      const std::size_t i = layout.parameters[k];
      const std::size_t n = (k + 1 < layout.offsets.size() ? layout.offsets[k + 1] : layout.numel) - layout.offsets[k];
      std::copy_n(whole.begin() + static_cast<std::ptrdiff_t>(layout.offsets[k]), n,
                  out.begin() + static_cast<std::ptrdiff_t>(start[i]));
    }
  }
  return out;
}

}  // namespace trainmem
