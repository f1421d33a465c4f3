// The planner's step time checked against this machine: a fixed list of configurations, each
// predicted from its meta run and the calibration (step_time.h), and timed for real on the CPU
// backend (cpu_timing.h). tests/test_planner.cpp and tests/test_planner_ranks.cpp check the
// agreement with margins for a noisy CI machine; bench_planner records the table (planner/README.md).
//
// Agreement is measured two ways, as the issue that asked for the planner states its target:
//   median |predicted - measured| / measured   over the configurations   (target <= 15%)
//   Spearman's rank correlation of predicted and measured                (target >= 0.9):
//     rho = 1 - 6 sum d_i^2 / (n (n^2 - 1)),  d_i = rank(predicted_i) - rank(measured_i)
// The ranking matters as much as the error: a plan is a choice among candidates.
#pragma once
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "suites/trainmem/planner/device_model.h"

namespace trainmem::planner {

// The configurations checked, as `trainmem train` flags. One rank: tiny, small, the 124M shape cut
// to 2 layers and llama-tiny, across recompute modes, precisions, attention, accumulation and
// offload. More ranks: ZeRO 0-3 and FSDP full / grad_op, with precision, accumulation and
// recompute. None is one of the calibration's workloads (calibration.cpp): the check times shapes
// the curves were not read off.
const std::vector<std::string>& checked_configurations(int ranks);

struct CheckedStep {
  std::string flags;
  double predicted_s = 0;
  double measured_s = 0;  // the median of the steps after the first (first touches, Adam's state)
  double error() const { return (predicted_s - measured_s) / measured_s; }
};

// Times `flags` for `steps` steps on the CPU backend (every rank of `world` together; nullptr: one
// process) and predicts it with `device`. Every rank of `world` must call it.
CheckedStep check_step(const std::string& flags, const DeviceModel& device, Communicator* world, int steps);

// Every configuration of checked_configurations(ranks) in turn, one line each printed on rank 0.
std::vector<CheckedStep> check_configurations(const DeviceModel& device, Communicator* world, int steps);

double spearman(const std::vector<double>& a, const std::vector<double>& b);

struct Agreement {
  double median_abs_error = 0;
  double spearman = 0;
};
Agreement agreement(const std::vector<CheckedStep>& steps);

}  // namespace trainmem::planner
