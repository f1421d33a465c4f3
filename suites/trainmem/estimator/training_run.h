// One training run, built the one way every command builds it: `trainmem train` on its device,
// the estimator on the meta device, `max-batch`'s trials on a budget. Because there is one
// builder, the allocation sequence an estimate replays is the run's own, not a description of it.
//
// The order (it decides where blocks land, so it is part of the memory figures):
//   model  ->  data loader  ->  strategies  ->  trainer (its optimizer; the batch tensors)
// The strategies, in hook order:
//   sharding (ZeRO or FSDP: its before-hooks gather what the others' recompute needs)
//   recompute, loss scaling (fp16), empty_cache (last: after everything else is done with the step)
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/batch_source.h"
#include "common/train/trainer.h"
#include "suites/allocator/empty_cache_policy.h"
#include "suites/fsdp/fsdp_strategy.h"
#include "suites/lazy_loading/host_tokens.h"
#include "suites/mixed_precision/loss_scaler.h"
#include "suites/trainmem/estimator/training_setup.h"
#include "suites/zero/zero_strategy.h"

namespace trainmem::estimator {

class TrainingRun {
 public:
  // `world`: the ranks of data parallelism (nullptr: a single process without sharding); the run
  // keeps a reference. `tokens`: the dataset on the host (each rank takes its rows of every
  // global batch). Throws what the parts throw: std::invalid_argument for a bad mix, DataError for
  // a dataset smaller than one batch, OutOfMemoryError when the model or the loader does not fit.
  TrainingRun(const TrainingSetup& setup, Device& device, Communicator* world, lazy_loading::HostTokens tokens);
  ~TrainingRun();

  // One optimizer step. The loss is the global batch's (the mean over the ranks) and the loss
  // scale the one the user set (ZeRO's 1/N share of the mean taken out).
  StepResult step();

  GPT& model() { return *model_; }
  const TrainingSetup& setup() const { return setup_; }
  int zero_stage() const { return stage_; }  // -1: no ZeRO
  const zero::ZeroStrategy* zero() const { return zero_.get(); }
  const fsdp::FsdpStrategy* fsdp() const { return fsdp_.get(); }
  const DynamicLossScaler& loss_scaler() const { return loss_scaler_; }
  // The techniques in the progress line: "bf16 accum=4 recompute=selective attention=flash ...".
  std::string techniques() const;

 private:
  TrainingSetup setup_;
  Device& device_;
  Communicator* world_;
  int stage_ = -1;
  std::unique_ptr<GPT> model_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<zero::ZeroStrategy> zero_;
  std::unique_ptr<fsdp::FsdpStrategy> fsdp_;
  RecomputeStrategy recompute_;
  DynamicLossScaler loss_scaler_;
  allocator::EmptyCacheStrategy empty_cache_;
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace trainmem::estimator
