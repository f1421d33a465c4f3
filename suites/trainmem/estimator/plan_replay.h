// Running a predicted allocation sequence (allocation_plan.h) through a real CachingAllocator on
// a device that has no memory (BudgetDeviceMemory(capacity, /*backed=*/false)): the allocator
// keeps its books exactly as it would in the real run, so peak allocated, peak reserved, the
// per-category peaks and the OOM point come out as the run would have them. No formula for
// segments is needed: the allocator itself is the formula.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/allocator/allocator_config.h"
#include "common/allocator/caching_allocator.h"
#include "suites/trainmem/estimator/allocation_plan.h"

namespace trainmem::estimator {

struct PlanReplay {
  MemoryStats stats;                  // the allocator's statistics at the end (peaks included)
  std::size_t peak_allocated = 0;     // allocated_bytes.all.peak
  std::size_t peak_reserved = 0;      // reserved_bytes.all.peak
  // The moment allocated memory peaked: the allocation that reached it, and what each category
  // held then (they sum to peak_allocated).
  Phase peak_phase = Phase::setup;
  int peak_step = 0;
  std::string peak_tensor;
  std::array<std::size_t, kNumMemoryCategories> at_peak{};
  // Set when the capacity was too small: the replay stops at the allocation that failed.
  std::optional<OomReport> oom;
  Phase oom_phase = Phase::setup;
  std::string oom_tensor;
};

// `capacity`: the device's size (0: unlimited, for the figures of a run that may not fit).
PlanReplay replay_plan(const std::vector<PlannedOp>& ops, std::size_t capacity, const AllocatorConfig& config);

}  // namespace trainmem::estimator
