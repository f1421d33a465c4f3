#include "suites/trainmem/estimator/memory_estimate.h"

#include <algorithm>

#include "common/model/parameter_table.h"
#include "suites/checkpointing/recompute.h"
#include "suites/fsdp/fsdp_memory.h"
#include "suites/mixed_precision/precision_memory.h"

namespace trainmem::estimator {

FormulaBytes formula_bytes(const TrainingSetup& s) {
  FormulaBytes f;
  // precision_memory.h: bytes per parameter per category, each tensor rounded to 512 bytes; the
  // optimizer's fp32 tensors (m, v and, in 16 bits, the master weights) are 4 bytes each.
  const BytesPerParameter b = bytes_per_parameter(s.precision);
  const ParameterTable table(s.model);
  for (const ParameterInfo& p : table.all()) {
    const std::size_t n = p.numel();
    f.parameters += round_size(n * b.parameters);
    f.gradients += round_size(n * b.gradients);
    f.optimizer_state += (b.optimizer_state / 4) * round_size(n * 4);
  }
  f.activations = predicted_activation_peak(s.model, s.batch, s.seq(), s.recompute, storage_dtype(s.precision), s.attention);
  // The trainer's int32 tokens and targets; eager: the whole dataset as int32; lazy: `prefetch`
  // slots of tokens + targets (suites/lazy_loading/lazy_loader.h).
  const std::size_t batch = round_size(4 * s.batch * s.seq());
  f.data = 2 * batch;
  if (s.loader == Loader::eager) f.data += round_size(4 * s.eager_tokens());
  if (s.loader == Loader::lazy) f.data += s.prefetch * 2 * batch;
  return f;
}

ShardedFormulas sharded_formulas(const TrainingSetup& s) {
  const Sharding& sh = s.sharding;
  ShardedFormulas f;
  f.scheme = sh.describe();
  const int N = static_cast<int>(sh.world_size);
  if (sh.fsdp) {
    const fsdp::FsdpMemory m = fsdp::fsdp_memory(s.model, sh.world_size, sh.fsdp_options, s.precision);
    f.parameters = m.parameters_peak_bytes;  // gathered units count as parameters in the FSDP suite
    f.gradients = m.gradients_peak_bytes;
    f.optimizer_state = m.optimizer_state_peak_bytes;
    f.paper_stage = sh.fsdp_options.mode == fsdp::ShardingMode::full ? 3
                    : sh.fsdp_options.mode == fsdp::ShardingMode::grad_op ? 2 : 0;
  } else {
    const zero::ZeroExactBytes x = zero::exact_model_states(zero::zero_units(s.model), N, sh.zero_stage(), s.precision,
                                                            sh.offload, s.accum);
    f.parameters = x.parameters;
    f.gradients = x.gradients;
    f.optimizer_state = x.optimizer_state;
    f.communication = x.communication_peak;
    f.host = x.host;
    f.paper_stage = sh.zero_stage();
  }
  f.paper = zero::paper_model_states(static_cast<double>(s.model.num_parameters()), N, f.paper_stage, s.precision,
                                     sh.fsdp ? Offload::none : sh.offload);
  return f;
}

bool fits_on(const TrainingSetup& setup, std::size_t capacity) {
  return !run_on_meta(setup, capacity, 0, PeakMoment::skip).oom.has_value();
}

std::size_t largest_fitting_batch(TrainingSetup setup, std::size_t capacity, std::size_t limit, bool* capped) {
  if (capped) *capped = false;
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
  if (setup.sharding.active()) e.sharded = sharded_formulas(setup);
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
  return e;
}

}  // namespace trainmem::estimator
