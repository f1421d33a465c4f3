// A real run on the CPU backend, timed: every kernel, copy and collective with its wall time (a
// cost log, common/device/cost_log.h), and each step's. What the calibration reads its curves off,
// and what the planner's proof measures its predictions against.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "common/device/cost_log.h"
#include "common/train/training_setup.h"

namespace trainmem::planner {

// Runs `steps` optimizer steps of `setup` on a CPU device (as rank world->rank() of the world
// when the setup shards) with `log` listening, and returns each step's wall time in seconds.
std::vector<double> run_timed_on_cpu(const TrainingSetup& setup, Communicator* world, int steps, CostLog* log);

}  // namespace trainmem::planner
