#include "suites/trainmem/estimator/memory_estimate.h"

#include <algorithm>

#include "common/data/dataset_check.h"
#include "suites/trainmem/techniques.h"
#include "suites/zero/zero_memory.h"
#include "suites/zero/zero_technique.h"

namespace trainmem::estimator {

FormulaBytes formula_bytes(const TrainingSetup& s) {
  FormulaBytes f = registered_techniques().formulas(s);
  // The ZeRO paper's figures of the stage the sharding matches (FSDP full = 3, grad_op = 2), exact
  // in Ψ: the column the report sets beside this implementation's.
  if (f.sharded)
    f.sharded->paper = zero::paper_model_states(static_cast<double>(s.model.num_parameters()), static_cast<int>(s.world_size),
                                                f.sharded->paper_stage, s.precision, s.option<zero::ZeroChoice>().offload);
  return f;
}

std::size_t data_batch_limit(const TrainingSetup& setup) {
  return setup.dataset_tokens ? largest_batch_in(setup.dataset_tokens, setup.world_size, setup.seq()) : 0;
}

bool fits_on(const TrainingSetup& setup, std::size_t capacity) {
  return !run_on_meta(setup, capacity, 0, PeakMoment::skip).oom.has_value();
}

std::size_t largest_fitting_batch(TrainingSetup setup, std::size_t capacity, std::size_t limit, bool* capped) {
  if (capped) *capped = false;
  if (const std::size_t data_limit = data_batch_limit(setup)) limit = std::min(limit, data_limit);
  auto with_batch = [&](std::size_t b) {
    setup.batch = b;
    return setup;
  };
  auto fits_with = [&](std::size_t b) { return fits_on(with_batch(b), capacity); };
  if (limit < 2) return limit == 1 && fits_with(1) ? 1 : 0;
  if (!fits_with(1)) return 0;
  // A first guess from the straight line through the peaks at B=1 and B=2: memory grows linearly
  // with the micro-batch, apart from the allocator's rounding. Then gallop from the guess until the
  // answer is bracketed, and bisect: a handful of meta runs instead of one per bit of B.
  const double peak1 = static_cast<double>(run_on_meta(with_batch(1), 0, 0, PeakMoment::skip).peak_reserved);
  const double peak2 = static_cast<double>(run_on_meta(with_batch(2), 0, 0, PeakMoment::skip).peak_reserved);
  const double per_row = peak2 - peak1;
  const double rows = per_row > 0 ? (static_cast<double>(capacity) - peak1) / per_row : static_cast<double>(limit);
  const std::size_t guess =
      rows >= static_cast<double>(limit - 1) ? limit : 1 + static_cast<std::size_t>(std::max(rows, 0.0));
  // The bracket: lo fits, hi does not (hi = limit + 1: not known not to fit).
  std::size_t lo = 1, hi = limit + 1;
  if (guess > lo) {
    if (fits_with(guess)) {
      lo = guess;
      for (std::size_t step = 1; hi - lo > step; step *= 2) {  // up: guess+1, +2, +4, ... until one fails
        if (!fits_with(lo + step)) {
          hi = lo + step;
          break;
        }
        lo += step;
      }
    } else {
      hi = guess;
      for (std::size_t step = 1; hi - lo > step; step *= 2) {  // down: guess-1, -2, -4, ... until one fits
        if (fits_with(hi - step)) {
          lo = hi - step;
          break;
        }
        hi -= step;
      }
    }
  }
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (fits_with(mid) ? lo : hi) = mid;
  }
  if (capped && lo == limit) *capped = true;
  return lo;
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
  e.max_batch = largest_fitting_batch(setup, capacity, kMaxBatchLimit, &e.max_batch_capped);
  e.data_max_batch = data_batch_limit(setup);
  return e;
}

}  // namespace trainmem::estimator
