// One training run, built the one way every command and benchmark builds it: `trainmem train` on
// its device, the estimator on the meta device, `max-batch`'s trials on a budget, the suites'
// benchmarks. Because there is one builder, the allocation sequence an estimate replays is the
// run's own, not a description of it.
//
// The order (it decides where blocks land, so it is part of the memory figures):
//   model  ->  data loader  ->  the techniques' strategies  ->  trainer (its optimizer; the batch)
// The strategies go in hook order (Technique::HookOrder): sharding (its before-hooks gather what
// the others' recompute needs), recompute, loss scaling, then what runs after the whole step
// (empty_cache); within one order, in the order of the registrations.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/comm/communicator.h"
#include "common/data/batch_source.h"
#include "common/data/host_tokens.h"
#include "common/train/technique.h"
#include "common/train/trainer.h"
#include "common/train/training_setup.h"

namespace trainmem {

class TrainingRun {
 public:
  // `techniques`: the registrations the setup's options belong to (kept by reference). `world`:
  // the ranks of data parallelism (nullptr: a single process; needed when a technique shards);
  // the run keeps a reference. `tokens`: the dataset on the host (each rank takes its rows of
  // every global batch). Throws what the parts throw: std::invalid_argument for a bad mix,
  // DataError for a dataset smaller than one batch, OutOfMemoryError when the model or the loader
  // does not fit.
  TrainingRun(const TrainingSetup& setup, const Techniques& techniques, Device& device, Communicator* world,
              HostTokens tokens);
  ~TrainingRun();

  // One optimizer step. The loss is the global batch's (the mean over the ranks) and the loss
  // scale the one the user set (the data-parallel 1/N share of the mean taken out).
  StepResult step();

  Model& model() { return *model_; }
  Trainer& trainer() { return *trainer_; }
  const TrainingSetup& setup() const { return setup_; }
  // The techniques in the progress line: "bf16 accum=4 recompute=selective attention=flash ...".
  std::string techniques() const;
  // The strategy `technique` added to this run (nullptr: none), e.g. to read its own figures.
  const Strategy* strategy_of(const Technique& technique) const;
  Strategy* strategy_of(const Technique& technique) {
    return const_cast<Strategy*>(std::as_const(*this).strategy_of(technique));
  }
  // Each technique's part of `trainmem train --json` (config and result sections).
  void add_json(nlohmann::json& result, const MemoryStats& stats, long steps) const;

 private:
  TrainingSetup setup_;
  const Techniques& techniques_;
  Communicator* world_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<BatchSource> data_;
  std::vector<std::pair<const Technique*, TechniqueInRun>> joined_;  // in hook order
  double loss_share_ = 1.0;  // the product of the techniques' loss shares
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace trainmem
