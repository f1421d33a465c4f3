// The estimate of a training configuration: its peak memory by category, where in the step the
// peak happens, whether it fits a device, and the largest micro-batch that does.
//
// The figures are measured, not modelled: the run itself on the meta device (meta_run.h), whose
// allocator keeps its books exactly as on a real device. Next to them, the suites' closed-form
// formulas, the ones that teach where the bytes go (and that the suites' own tests verify):
//   parameters, gradients, optimizer_state  bytes_per_parameter() per tensor, 512-rounded
//                                           (suites/mixed_precision's registration)
//   activations                             predicted_activation_peak()
//                                           (suites/checkpointing's registration)
//   data                                    the trainer's batch + the loader's buffers
//                                           (suites/lazy_loading's registration: eager holds
//                                           the dataset, lazy `prefetch` rings of one batch)
//   sharded model states, per rank          suites/zero's and suites/fsdp's registrations, and
//                                           the ZeRO paper's Figure 1 arithmetic
// The estimator's tests check the formulas against the meta run and the meta run against real
// training.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/allocator/memory_category.h"
#include "common/train/formula_bytes.h"
#include "common/train/training_setup.h"
#include "suites/trainmem/estimator/batch_search.h"
#include "suites/trainmem/estimator/meta_run.h"

namespace trainmem::estimator {

// The suites' closed-form figures for one configuration: each registered technique's formula
// (Technique::add_formulas), and beside sharded figures the ZeRO paper's per-rank model states.
FormulaBytes formula_bytes(const TrainingSetup& setup);

struct MemoryEstimate {
  TrainingSetup setup;
  std::size_t num_parameters = 0;
  // On an unlimited meta device: the run's figures whether or not it fits. Sharded: one rank's.
  MetaRun run;
  FormulaBytes formulas;  // formulas.sharded: when a technique shards the model states

  std::size_t peak_allocated() const { return run.peak_allocated; }
  std::size_t peak_reserved() const { return run.peak_reserved; }
  std::size_t category_peak(MemoryCategory c) const { return run.category_peak(c); }

  // Given a device of `capacity` bytes (0: none given).
  std::size_t capacity = 0;
  bool fits = true;                       // the run on a meta device of that size has no OOM
  std::optional<MetaRun> on_device;       // that run, when it differs from `run` (its OOM report)
  BatchSearch batches;                    // the largest micro-batch that fits, its holes (batch_search.h)
  std::size_t data_max_batch = 0;         // the largest micro-batch --data holds (0: no limit, synthetic)
  std::vector<std::string> advice;        // when it does not fit: the OOM advisor's lines (oom_advice.h)
};

// The search for the largest micro-batch stops here (then reported as ">= limit"), and so does
// max-batch's by default: it tries every batch up to its answer (batch_search.h), one meta run of
// about a millisecond each, so an estimate stays within seconds. A micro-batch of 4096 rows is
// reached only by the toy presets (tiny, small) or with most of a card to spare.
constexpr std::size_t kMaxBatchLimit = 4096;
// And within this many allocations of its meta runs, their whole work (no kernel runs on meta; an
// allocation costs 0.6-1.6 us on the CI machine, so about 2 s): a run that makes many tensors (1024
// layers: 94,000 allocations) has fewer batches tried, then reported as ">= limit".
constexpr std::int64_t kSearchAllocations = std::int64_t{1} << 21;

// Runs one configuration on the meta device; with a capacity, also whether it fits and the largest
// micro-batch that fits (batch_search.h: every B from 1, one meta run each).
MemoryEstimate estimate_memory(const TrainingSetup& setup, std::size_t capacity = 0);

// The largest micro-batch the run's dataset holds (a file's dataset_tokens, world_size x B rows of
// T tokens; common/data/dataset_check.h largest_batch_in); 0: no limit (the synthetic corpus is
// made for the batch). A search over B goes no further: train would refuse a larger batch.
std::size_t data_batch_limit(const TrainingSetup& setup);

// Whether the configuration runs on a device of `capacity` bytes without running out of memory.
bool fits_on(const TrainingSetup& setup, std::size_t capacity);

}  // namespace trainmem::estimator
