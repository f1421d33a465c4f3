// A real run on the CPU backend, timed: every kernel, copy and collective with its wall time (a
// cost log, common/device/cost_log.h), and each step's. What the calibration fits its lines to,
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

// The setup `trainmem train FLAGS` runs over `world_size` ranks on `backend` (std::invalid_argument,
// CLI::ParseError for flags train rejects).
TrainingSetup train_setup_from_flags(const std::string& flags, std::size_t world_size = 1,
                                     DeviceKind backend = DeviceKind::cpu);

}  // namespace trainmem::planner
