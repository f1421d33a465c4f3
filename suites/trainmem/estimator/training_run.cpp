#include "suites/trainmem/estimator/training_run.h"

#include <utility>

#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"

namespace trainmem::estimator {

namespace {

std::unique_ptr<BatchSource> make_loader(const TrainingSetup& s, Device& device, lazy_loading::HostTokens tokens,
                                         std::size_t rank, std::size_t ranks) {
  const std::size_t B = s.batch, T = s.seq();
  switch (s.loader) {
    case Loader::sequential:  // the dataset on the host, read in order
      return std::make_unique<SequentialBatches>(device, std::move(tokens).to_vector(), B, T, rank, ranks);
    case Loader::eager:  // all of it on the device
      return std::make_unique<lazy_loading::EagerLoader>(device, std::move(tokens), B, T,
                                                        lazy_loading::EagerLoaderOptions{s.seed, true, rank, ranks});
    case Loader::lazy: {  // on the host; batches prefetched by a background thread
      lazy_loading::LazyLoaderOptions o;
      o.prefetch = s.prefetch;
      o.pinned = s.pinned;
      o.seed = s.seed;
      o.rank = rank;
      o.world = ranks;
      return std::make_unique<lazy_loading::LazyLoader>(device, std::move(tokens), B, T, o);
    }
  }
  throw std::logic_error("make_loader: unknown loader");
}

}  // namespace

TrainingRun::TrainingRun(const TrainingSetup& setup, Device& device, Communicator* world, lazy_loading::HostTokens tokens)
    : setup_(setup),
      device_(device),
      world_(world),
      recompute_(setup.recompute),
      loss_scaler_(setup.loss_scaler),
      empty_cache_(setup.empty_cache) {
  const std::size_t ranks = world ? static_cast<std::size_t>(world->world_size()) : 1;
  const std::size_t rank = world ? static_cast<std::size_t>(world->rank()) : 0;
  setup_.sharding.world_size = ranks;
  if (setup_.sharding.active() && !world)
    throw std::invalid_argument("TrainingRun: " + setup_.sharding.describe() + " needs a communicator");
  stage_ = setup_.sharding.zero_stage();

  ModelOptions model_options;
  model_options.precision = setup_.precision;
  model_options.attention = setup_.attention;
  model_ = std::make_unique<GPT>(device, setup_.model, setup_.seed, model_options);
  data_ = make_loader(setup_, device, std::move(tokens), rank, ranks);

  TrainerOptions topt;
  topt.batch = setup_.batch;
  topt.seq = setup_.seq();
  topt.adam = setup_.adam;
  topt.max_grad_norm = setup_.max_grad_norm;
  topt.accumulation_steps = setup_.accum;
  std::vector<Strategy*> strategies;
  Optimizer* optimizer = nullptr;  // nullptr: the trainer's own AdamW
  if (stage_ >= 0) {
    zero::ZeroOptions zo;
    zo.stage = stage_;
    zo.offload = setup_.sharding.offload;
    zo.adam = topt.adam;
    zo.max_grad_norm = topt.max_grad_norm;
    zero_ = std::make_unique<zero::ZeroStrategy>(*model_, *world, zo);
    strategies.push_back(zero_.get());
    optimizer = &zero_->optimizer();
  }
  if (setup_.sharding.fsdp) {
    fsdp_ = std::make_unique<fsdp::FsdpStrategy>(*model_, *world, setup_.sharding.fsdp_options, topt.adam,
                                                 topt.max_grad_norm);
    strategies.push_back(fsdp_.get());
    optimizer = &fsdp_->optimizer();
    // The whole model existed once, before it was sharded (as in PyTorch without meta-device
    // initialization); the peaks from here on are those of training.
    device.allocator().reset_peak_stats();
  }
  if (setup_.recompute.kind != RecomputePolicy::Kind::none) strategies.push_back(&recompute_);
  if (setup_.precision == Precision::fp16) strategies.push_back(&loss_scaler_);
  if (setup_.empty_cache.every != 0) strategies.push_back(&empty_cache_);
  trainer_ = std::make_unique<Trainer>(*model_, *data_, topt, strategies, optimizer);
}

TrainingRun::~TrainingRun() = default;

StepResult TrainingRun::step() {
  StepResult r = trainer_->step();
  // Each rank's loss is the mean over its rows: the mean over the ranks is the global batch's.
  if (world_) r.loss = world_->all_reduce_sum(r.loss) / static_cast<double>(world_->world_size());
  // The trainer's factor includes the sharding strategy's 1/N share of the mean (zero_strategy.h,
  // fsdp_strategy.h): the loss scale shown is the user's.
  if (zero_) r.loss_scale /= zero_->loss_scale();
  if (fsdp_) r.loss_scale /= fsdp_->loss_scale();
  return r;
}

std::string TrainingRun::techniques() const {
  const TrainingSetup& s = setup_;
  std::string t = to_string(s.precision);
  t += " accum=" + std::to_string(s.accum);
  t += " recompute=" + s.recompute.to_string();
  t += " attention=" + to_string(s.attention);
  if (s.loader != Loader::sequential) t += " loader=" + to_string(s.loader);
  if (stage_ >= 0) {
    t += " zero=" + std::to_string(stage_);
    if (s.sharding.offload != Offload::none) t += " offload=" + to_string(s.sharding.offload);
  }
  if (fsdp_) {
    const fsdp::FsdpOptions& o = s.sharding.fsdp_options;
    t += " fsdp=" + fsdp::to_string(o.mode);
    t += " unit=" + fsdp::unit_to_string(o.layers_per_unit);
    t += std::string(" prefetch=") + (o.prefetch ? "on" : "off");
  }
  if (s.empty_cache.every != 0) t += " empty-cache=" + s.empty_cache.to_string();
  if (world_) t += " N=" + std::to_string(world_->world_size());
  return t;
}

}  // namespace trainmem::estimator
