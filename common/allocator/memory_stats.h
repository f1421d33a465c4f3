// Allocator statistics with PyTorch's names and meanings (torch.cuda.memory_stats()).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/memory_category.h"

namespace trainmem {

// One counter: its current value, the highest it has been since the last reset_peak, and the
// totals ever added (allocated) and removed (freed).
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  // current and peak are bounded by the device's memory (at most 2^62 bytes); the running totals
  // grow for ever, so they stop at the largest int64 instead of wrapping around to negative.
  void increase(std::int64_t amount) {
    current += amount;
    if (current > peak) peak = current;
    allocated = saturating_add(allocated, amount);
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed = saturating_add(freed, amount);
  }
  static std::int64_t saturating_add(std::int64_t total, std::int64_t amount) {
    std::int64_t sum = 0;
    return __builtin_add_overflow(total, amount, &sum) ? INT64_MAX : sum;
  }
  void reset_peak() { peak = current; }
};

// Each statistic is kept three times: for all memory, for the small pool, for the large pool.
enum class StatType : int { all = 0, small_pool = 1, large_pool = 2 };
constexpr std::size_t kNumStatTypes = 3;
using StatArray = std::array<Stat, kNumStatTypes>;

struct MemoryStats {
  // PyTorch's statistics (same names, same meanings):
  StatArray allocation;            // number of live blocks handed to callers
  StatArray segment;               // number of device allocations held (segments); with expandable
                                   // segments: contiguous mapped ranges
  StatArray active;                // blocks allocated or waiting for other streams to finish
  StatArray inactive_split;        // free blocks inside segments that are split (not wholly free)
  StatArray allocated_bytes;       // bytes of live blocks (the block size: rounded, or whole block)
  StatArray reserved_bytes;        // bytes of all segments (expandable: bytes mapped)
  StatArray active_bytes;          // bytes of active blocks
  StatArray inactive_split_bytes;  // bytes of inactive_split blocks
  StatArray requested_bytes;       // bytes callers asked for (before rounding)
  Stat oversize_allocations;       // live blocks >= max_split_size
  Stat oversize_segments;          // segments >= max_split_size
  std::int64_t num_alloc_retries = 0;  // device refused; all cached blocks released; tried again
  std::int64_t num_ooms = 0;           // allocations that failed for good
  std::int64_t num_device_alloc = 0;   // calls to the device allocator (cudaMalloc; expandable: page maps)
  std::int64_t num_device_free = 0;    // calls to the device free (cudaFree; expandable: page unmaps)
  std::int64_t num_sync_all_streams = 0;

  // Beyond PyTorch: allocated bytes (block sizes) per category, so that
  // sum over categories of by_category[c].current == allocated_bytes[all].current.
  std::array<Stat, kNumMemoryCategories> by_category;

  void reset_peak();         // every peak := current (torch.cuda.reset_peak_memory_stats)

  // The flat dictionary torch.cuda.memory_stats() returns, e.g. "allocated_bytes.all.peak",
  // "num_alloc_retries"; plus "by_category.<name>.<current|peak|allocated|freed>".
  nlohmann::json to_json() const;
};

constexpr std::size_t stat_index(StatType t) { return static_cast<std::size_t>(t); }

}  // namespace trainmem
