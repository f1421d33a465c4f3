// A data-parallel strategy with its own optimizer over the shards (suites/zero's ZeroStrategy,
// suites/fsdp's FsdpStrategy): what the run (technique.h, data_parallel_in_run) and the tests need
// of it, whichever technique made it. A test reaches it through the registrations: the run's
// strategy of the sharding technique (TrainingRun::strategy_of(*techniques.sharding(setup))).
#pragma once
#include <vector>

#include "common/train/strategy.h"

namespace trainmem {

class Optimizer;

class DataParallelStrategy : public Strategy {
 public:
  // The optimizer to give the Trainer (owned by the strategy). Its loss_scale() is this rank's
  // share of the global mean (1/N).
  virtual Optimizer& optimizer() = 0;
  // The whole model as one rank with the whole batch would hold it (fp32 host copies,
  // Model::parameters() order): the parameters as stored, and the optimizer's fp32 master weights
  // (an fp32 model's parameters). Collectives: every rank must call them.
  virtual std::vector<float> parameter_values() = 0;
  virtual std::vector<float> master_values() = 0;
};

}  // namespace trainmem
