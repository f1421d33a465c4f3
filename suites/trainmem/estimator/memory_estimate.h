// The estimate of a training configuration: its peak memory by category, where in the step the
// peak happens, whether it fits a device, and the largest micro-batch that does.
//
// Two sources, checked against each other:
//   - the simulation: the predicted allocation sequence (allocation_plan.h) replayed through a
//     real CachingAllocator (plan_replay.h) — the figures reported, allocated and reserved, exact
//     by construction for the allocator's part;
//   - the suites' formulas, the ones their own tests verify against measured runs:
//       parameters, gradients, optimizer_state  bytes_per_parameter() per tensor, 512-rounded
//                                               (suites/mixed_precision/precision_memory.h)
//       activations                             predicted_activation_peak()
//                                               (suites/checkpointing/recompute.h)
//       data                                    the trainer's batch + the loader's buffers
//                                               (suites/lazy_loading: eager holds the dataset,
//                                               lazy `prefetch` rings of one batch)
//     The estimator's tests check that the simulation's category peaks equal these.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "common/allocator/memory_category.h"
#include "suites/zero/zero_memory.h"
#include "suites/trainmem/estimator/plan_replay.h"
#include "suites/trainmem/estimator/training_setup.h"

namespace trainmem::estimator {

// The suites' closed-form figures for one configuration (bytes, 512-rounded per tensor as the
// allocator rounds them).
struct FormulaBytes {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0;  // after the first step
  std::size_t activations = 0;                                     // peak within a step
  std::size_t data = 0;                                            // constant from the start
  std::size_t model_states() const { return parameters + gradients + optimizer_state; }
};
FormulaBytes formula_bytes(const TrainingSetup& setup);

// Data parallelism over N ranks: one rank's figures. The model states come from the sharding
// suites' exact formulas (suites/zero/zero_memory.h exact_model_states, suites/fsdp/fsdp_memory.h),
// which their tests check against the allocator byte for byte; everything else a rank allocates
// (activations, workspace, data) is what one device allocates for the same micro-batch. The
// rank's peak is composed: the single-device peak moment with its model states replaced by the
// sharded ones (plus communication buffers), and the reserved figure keeps the single-device
// cache overhead (reserved - allocated). An estimate, not an allocator replay: the sharding
// strategies' own allocation order is not simulated.
struct ShardedFigures {
  std::string scheme;            // "ZeRO-3 (P_os+g+p) over 64 ranks"
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, communication = 0;  // per-rank peaks
  std::size_t host = 0;          // offloaded to host memory
  int paper_stage = 0;           // the ZeRO stage whose paper formula applies (FSDP full = 3, grad_op = 2)
  zero::ModelStateBytes paper;   // the ZeRO paper's per-rank model states (Ψ exact, no rounding)
  std::size_t peak_allocated = 0, peak_reserved = 0;  // per rank, composed
  std::size_t model_states() const { return parameters + gradients + optimizer_state; }
};

struct MemoryEstimate {
  TrainingSetup setup;
  std::size_t num_parameters = 0;
  PlanReplay replay;      // on an unlimited device: the run's figures whether or not it fits
  FormulaBytes formulas;
  std::optional<ShardedFigures> sharded;  // when setup.sharding is active

  // What must fit the device: one rank's reserved memory.
  std::size_t peak_reserved_per_device() const { return sharded ? sharded->peak_reserved : peak_reserved(); }

  std::size_t peak_allocated() const { return replay.peak_allocated; }
  std::size_t peak_reserved() const { return replay.peak_reserved; }
  std::size_t category_peak(MemoryCategory c) const {
    return static_cast<std::size_t>(replay.stats.by_category[index_of(c)].peak);
  }

  // Given a device of `capacity` bytes (0: none given).
  std::size_t capacity = 0;
  bool fits = true;                       // the replay on that device runs without OOM
  std::optional<PlanReplay> on_device;    // that replay (its OOM report when it does not fit)
  std::size_t max_batch = 0;              // the largest micro-batch that fits (0: not even 1)
  bool max_batch_capped = false;          // max_batch is only the search's upper limit
};

// One rank's figures for a sharded setup, composed with the single-device replay of the same
// micro-batch (see ShardedFigures).
ShardedFigures sharded_figures(const TrainingSetup& setup, const PlanReplay& single_device);

// The search for the largest micro-batch stops here (then reported as ">= limit").
constexpr std::size_t kMaxBatchLimit = std::size_t{1} << 16;

// Simulates one configuration; with a capacity, also whether it fits and the largest micro-batch
// that fits (binary search over B, one simulation each).
MemoryEstimate estimate_memory(const TrainingSetup& setup, std::size_t capacity = 0);

// Whether the configuration runs on a device of `capacity` bytes without running out of memory.
bool fits_on(const TrainingSetup& setup, std::size_t capacity);
// The largest B in [1, limit] for which fits_on holds (0: none). `capped` is set when limit fits.
std::size_t largest_fitting_batch(TrainingSetup setup, std::size_t capacity, std::size_t limit = kMaxBatchLimit,
                                  bool* capped = nullptr);

}  // namespace trainmem::estimator
