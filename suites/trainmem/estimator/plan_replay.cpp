#include "suites/trainmem/estimator/plan_replay.h"

#include <stdexcept>
#include <unordered_map>

#include "common/allocator/host_device_memory.h"

namespace trainmem::estimator {

namespace {
// "Unlimited": 1 PiB of pretend device, more than any model here asks for.
constexpr std::size_t kUnlimited = std::size_t{1} << 50;
}  // namespace

PlanReplay replay_plan(const std::vector<PlannedOp>& ops, std::size_t capacity, const AllocatorConfig& config) {
  BudgetDeviceMemory device(capacity ? capacity : kUnlimited, /*backed=*/false);
  PlanReplay r;
  std::unordered_map<std::size_t, void*> live;  // plan id -> the allocator's (fake) address
  {
    CachingAllocator allocator(device, config);
    std::int64_t peak = 0;
    for (const PlannedOp& op : ops) {
      if (op.kind == PlannedOp::Kind::free) {
        auto it = live.find(op.id);
        if (it == live.end()) throw std::logic_error("replay_plan: free of a tensor that is not live (" + op.name + ")");
        allocator.free(it->second);
        live.erase(it);
        continue;
      }
      try {
        live[op.id] = allocator.allocate(op.bytes, op.category, kDefaultStream, op.name);
      } catch (const OutOfMemoryError& e) {
        r.oom = e.report();
        r.oom_phase = op.phase;
        r.oom_tensor = op.name;
        break;
      }
      // Allocated memory only grows on an allocation: check for a new peak here.
      const MemoryStats s = allocator.stats();
      if (s.allocated_bytes[0].current > peak) {
        peak = s.allocated_bytes[0].current;
        r.peak_phase = op.phase;
        r.peak_step = op.step;
        r.peak_tensor = op.name;
        for (std::size_t c = 0; c < kNumMemoryCategories; ++c)
          r.at_peak[c] = static_cast<std::size_t>(s.by_category[c].current);
      }
    }
    r.stats = allocator.stats();
    // The allocator must not outlive its blocks' owners: give everything back before it goes.
    for (auto& [id, ptr] : live) allocator.free(ptr);
  }
  r.peak_allocated = static_cast<std::size_t>(r.stats.allocated_bytes[0].peak);
  r.peak_reserved = static_cast<std::size_t>(r.stats.reserved_bytes[0].peak);
  return r;
}

}  // namespace trainmem::estimator
