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
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/comm/communicator.h"
#include "suites/trainmem/planner/device_model.h"
#include "suites/trainmem/planner/technique_settings.h"

namespace trainmem::planner {

// The configurations checked, as `trainmem train` flags: each of the check's own shapes (tiny,
// small, the 124M shape cut to 2 layers, llama-tiny) as it is, then every setting the registered
// techniques offer a plan (technique_settings.h), each on the next shape in turn -- on one rank all
// of them (precisions, attention, recompute, accumulation, offload, gradient memory), over more
// ranks those that shard the model states (ZeRO 1-3, FSDP). None is one of the calibration's
// workloads (calibration.cpp): the check times shapes the curves were not read off.
const std::vector<Shape>& checked_shapes();
std::vector<std::string> checked_configurations(int ranks);

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
  std::size_t configurations = 0;
};
Agreement agreement(const std::vector<CheckedStep>& steps);

// What an agreement must reach: the planner's target, and the margin a test allows on a shared
// 2-core CI machine (a mistake across the step misses it, e.g. the memory-bound kernels left out:
// 25% and 29% in two rounds; a small or local one does not: attention left out gave 16.6%).
struct AgreementBound {
  double median_abs_error;
  double spearman;
  bool met_by(const Agreement& a) const { return a.median_abs_error <= median_abs_error && a.spearman >= spearman; }
};
inline constexpr AgreementBound kTarget{0.15, 0.9};
inline constexpr AgreementBound kCiMargin{0.25, 0.8};

// How repeatable this machine is, read off two rounds of the same check (each calibrated and
// measured anew) with one model: what differs between them is the machine's doing.
//   error_spread   median over the configurations of |error in round 1 - error in round 2|
//   rank_agreement Spearman of round 1's measured times against round 2's (the machine ranking
//                  the same steps twice)
struct MachineNoise {
  double error_spread = 0;
  double rank_agreement = 1;
};
MachineNoise machine_noise(const std::vector<CheckedStep>& round1, const std::vector<CheckedStep>& round2);

// Why `bound` cannot judge a model on a machine this noisy (nullopt: it can). A bound sits above
// the target by a margin kept for the machine's noise (kCiMargin - kTarget: 10 points of error,
// 0.1 of Spearman); a machine whose own rounds differ by more than that margin cannot tell a model
// that meets the target from one that misses the bound. Derived from the two bounds, not fitted.
std::optional<std::string> too_noisy_to_judge(const MachineNoise& noise, const AgreementBound& bound,
                                              const AgreementBound& target = kTarget);

// Calibrates this machine and checks every configuration (5 steps each), printing a round's
// agreement on rank 0. A machine's own speed drifts (on a shared VM the same step measured 6.8
// and 8.7 ms a minute apart, every step of a round 25% slower than its calibration), so a round
// whose agreement misses `bound` is measured once more, calibration included; rank 0's agreement
// decides. Every rank of `world` (nullptr: one process) calls it.
struct RoundsOnThisMachine {
  Agreement agreement;                // the last round's
  bool met = false;                   // whether a round met the bound
  std::optional<MachineNoise> noise;  // when a second round ran: the two rounds compared
  Calibration calibration;            // the last round's
};
RoundsOnThisMachine agreement_on_this_machine(Communicator* world, const AgreementBound& bound);

}  // namespace trainmem::planner
