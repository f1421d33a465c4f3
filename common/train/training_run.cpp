#include "common/train/training_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>

#include "common/train/strategy.h"

namespace trainmem {

TrainingRun::TrainingRun(const TrainingSetup& setup, const Techniques& techniques, Device& device, Communicator* world,
                         HostTokens tokens)
    : setup_(setup), techniques_(techniques), world_(world) {
  const std::size_t ranks = world ? static_cast<std::size_t>(world->world_size()) : 1;
  const std::size_t rank = world ? static_cast<std::size_t>(world->rank()) : 0;
  setup_.world_size = ranks;
  techniques_.complete(setup_);
  techniques_.validate(setup_);
  if (const Technique* sharding = techniques_.sharding(setup_); sharding && !world)
    throw std::invalid_argument("TrainingRun: " + sharding->describe(setup_) + " needs a communicator");

  ModelOptions model_options;
  model_options.precision = setup_.precision;
  model_options.attention = setup_.attention;
  const Technique* sharding = techniques_.sharding(setup_);
  model_options.values_on_host = sharding != nullptr && sharding->takes_the_parameters(setup_);
  model_ = make_model(device, setup_.model, setup_.seed, model_options);
  for (const Technique* t : techniques_)
    if ((data_ = t->make_loader(setup_, device, tokens, rank, ranks))) break;
  if (!data_)  // the dataset on the host, read in order
    data_ = std::make_unique<SequentialBatches>(device, std::move(tokens), setup_.batch, setup_.seq(), rank, ranks,
                                                setup_.model.vocab);

  // The techniques join in hook order (stable: registration order within one order).
  std::vector<const Technique*> in_hook_order(techniques_.begin(), techniques_.end());
  std::stable_sort(in_hook_order.begin(), in_hook_order.end(),
                   [](const Technique* a, const Technique* b) { return a->hook_order() < b->hook_order(); });
  RunParts parts{setup_, device, *model_, world, techniques_.sharding(setup_)};
  std::vector<Strategy*> strategies;
  Optimizer* optimizer = nullptr;  // nullptr: the trainer's own AdamW
  for (const Technique* t : in_hook_order) {
    TechniqueInRun joined = t->join(parts);
    if (!joined.strategy && !joined.optimizer) continue;
    if (joined.strategy) strategies.push_back(joined.strategy.get());
    if (joined.optimizer) optimizer = joined.optimizer;
    loss_share_ *= joined.loss_share;
    joined_.emplace_back(t, std::move(joined));
  }
  TrainerOptions topt;
  topt.batch = setup_.batch;
  topt.seq = setup_.seq();
  topt.adam = setup_.adam;
  topt.max_grad_norm = setup_.max_grad_norm;
  topt.accumulation_steps = setup_.accum;
  trainer_ = std::make_unique<Trainer>(*model_, *data_, topt, strategies, optimizer);
}

TrainingRun::~TrainingRun() = default;

StepResult TrainingRun::step() {
  StepResult r = trainer_->step();
  // Each rank's loss is the mean over its rows: the mean over the ranks is the global batch's.
  if (world_) r.loss = world_->all_reduce_sum(r.loss) / static_cast<double>(world_->world_size());
  // The trainer's factor includes data parallelism's 1/N share of the mean: the scale shown is the user's.
  r.loss_scale /= loss_share_;
  return r;
}

std::string TrainingRun::techniques() const {
  std::string t = techniques_.describe(setup_);
  if (world_) t += " N=" + std::to_string(world_->world_size());
  return t;
}

const Strategy* TrainingRun::strategy_of(const Technique& technique) const {
  for (const auto& [joined_technique, joined] : joined_)
    if (joined_technique == &technique) return joined.strategy.get();
  return nullptr;
}

void TrainingRun::add_json(nlohmann::json& result, const MemoryStats& stats, long steps) const {
  const RunFacts facts{setup_, *model_, world_, stats, steps};
  for (const Technique* t : techniques_) {
    t->add_config_json(setup_, result["config"]);
    t->add_result_json(facts, strategy_of(*t), result);
  }
}

}  // namespace trainmem
