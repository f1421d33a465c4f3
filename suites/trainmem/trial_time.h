// How long the real trials of `trainmem max-batch` will take on this machine's CPU, said before
// they run: a trial of gpt2-124m on a laptop's CPU takes minutes, a search of every batch hours.
//
// The work is the run's own, as `trainmem plan` times it: a meta run of the trial's setup declares
// every kernel with its flops and bytes (kernels/kernel_cost.h), and the planner's step-time
// simulation (planner/step_time.h) plays them on a device model. The model here is two rates of
// this CPU, measured in milliseconds rather than calibrated in seconds (planner/calibration.h):
//
//   t(GEMM or attention kernel) = flops / product rate   (a [512, 768] x [768, 768] product through
//                                                           the run's own kernel, in its storage type)
//   t(any other kernel)         = bytes / copy rate        (a 64 MiB memcpy)
//
// A rough figure, good to a factor of about two (products of other shapes run at other rates, the
// memory-bound kernels below copy speed): enough to say "20 s" or "3 h" before starting.
#pragma once
#include <string>

#include "common/train/training_setup.h"

namespace trainmem::cli {

struct CpuSpeed {
  double product_flops_per_s = 0;
  double copy_bytes_per_s = 0;
};

// This CPU's two rates for `setup`'s storage type (the fastest of three tries of each).
CpuSpeed measure_cpu_speed(const TrainingSetup& setup);

// Seconds for `steps` training steps of `setup` at `speed` (its meta run's work, simulated).
double expected_seconds(const TrainingSetup& setup, int steps, const CpuSpeed& speed);

// "45 s", "12 min", "3.2 h": a duration as a person says it.
std::string spoken_duration(double seconds);

}  // namespace trainmem::cli
