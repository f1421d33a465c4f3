#include "suites/trainmem/estimator/memory_estimate.h"

#include <algorithm>

#include "common/data/dataset_check.h"
#include "suites/trainmem/estimator/oom_advice.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

// With the ZeRO paper's figures of the stage the sharding matches (ZeRO's complete_formulas).
FormulaBytes formula_bytes(const TrainingSetup& s) { return registered_techniques().formulas(s); }

std::size_t data_batch_limit(const TrainingSetup& setup) {
  return setup.dataset_tokens ? largest_batch_in(setup.dataset_tokens, setup.world_size, setup.seq()) : 0;
}

bool fits_on(const TrainingSetup& setup, std::size_t capacity) {
  return !run_on_meta(setup, capacity, 0, PeakMoment::skip).oom.has_value();
}

MemoryEstimate estimate_memory(const TrainingSetup& setup, std::size_t capacity) {
  MemoryEstimate e;
  e.setup = setup;
  e.num_parameters = setup.model.num_parameters();
  e.run = run_on_meta(setup);
  e.formulas = formula_bytes(setup);
  e.capacity = capacity;
  if (capacity == 0) return e;
  // Within capacity on an unlimited device means it fits; beyond, the allocator may still make it
  // by releasing its cache and retrying, which only the run on the real capacity can tell.
  if (e.peak_reserved() <= capacity) {
    e.fits = true;
  } else {
    e.on_device = run_on_meta(setup, capacity);
    e.fits = !e.on_device->oom.has_value();
  }
  const std::int64_t allocations_per_run = std::max<std::int64_t>(1, e.run.stats.allocation[0].allocated);
  const auto affordable = static_cast<std::size_t>(std::max<std::int64_t>(1, kSearchAllocations / allocations_per_run));
  e.batches = search_batches_on_meta(setup, capacity, std::min(kMaxBatchLimit, affordable));
  if (!e.fits) e.advice = estimator_oom_advice(setup, capacity, *e.on_device->oom);  // as train's OOM report advises
  e.data_max_batch = data_batch_limit(setup);
  return e;
}

}  // namespace trainmem::estimator
