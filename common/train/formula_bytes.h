// The closed-form memory of one training configuration, as the techniques' formulas give it: what
// `trainmem estimate` prints beside the measured (meta-run) figures, and what the suites' tests
// check against real runs. Each technique fills its part (Technique::add_formulas).
#pragma once
#include <cstddef>
#include <optional>
#include <string>

namespace trainmem {

// Model states per rank in the ZeRO paper's arithmetic (Ψ parameters, no allocator rounding).
struct ModelStateBytes {
  double parameters = 0, gradients = 0, optimizer_state = 0;  // device memory
  double host = 0;                                            // host memory (offload)
  double device_total() const { return parameters + gradients + optimizer_state; }
};

// Data parallelism over N ranks: one rank's model states, by the sharding technique's formulas.
struct ShardedFormulas {
  std::string scheme;  // "ZeRO-3 (P_os+g+p) over 64 ranks"
  // This implementation's exact figures, per rank: peaks in the step (FSDP) or what a rank holds
  // after a step (ZeRO: the paper's figures are of these).
  bool peaks = false;
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, communication = 0;
  // The gradient bytes a rank holds between steps (ZeRO: `gradients`; FSDP, whose figures are
  // peaks: its gradient shards), 0 when they are made on demand or updated in the backward.
  std::size_t gradients_between_steps = 0;
  // Each category's peak within a step, per rank (beside the estimate's per-category peaks): ZeRO's
  // figures at rest plus the units gathered and the buckets open at once; FSDP's are peaks already.
  std::size_t parameters_peak = 0, gradients_peak = 0, optimizer_state_peak = 0;
  std::size_t host = 0;     // offloaded to host memory
  int paper_stage = 0;      // the ZeRO stage whose paper formula applies (FSDP full = 3, grad_op = 2)
  ModelStateBytes paper;    // the ZeRO paper's per-rank model states of that stage (the estimator's)
  std::size_t model_states() const { return parameters + gradients + optimizer_state; }
};

// Bytes, 512-rounded per tensor as the allocator rounds them.
struct FormulaBytes {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0;  // after the first step
  std::size_t activations = 0;                                     // peak within a step
  std::size_t data = 0;                                            // constant from the start
  std::optional<ShardedFormulas> sharded;                          // when the model states are sharded
  std::size_t model_states() const { return parameters + gradients + optimizer_state; }
};

}  // namespace trainmem
