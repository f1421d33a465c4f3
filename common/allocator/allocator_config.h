// The caching allocator's constants (the same as PyTorch's CUDA caching allocator,
// c10/cuda/CUDACachingAllocator.cpp) and its user-settable options.
#pragma once
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include "common/cli/enum_table.h"
#include "common/util/byte_size.h"

namespace trainmem {

// --- Constants: the policy every figure in trainmem is computed under.
constexpr std::size_t kMinBlockSize = 512;        // every request is rounded up to a multiple of this
constexpr std::size_t kSmallSize = 1 * MiB;       // requests <= 1 MiB go to the small pool
constexpr std::size_t kSmallBuffer = 2 * MiB;     // small-pool segments are 2 MiB
constexpr std::size_t kMinLargeAlloc = 10 * MiB;  // large requests below this share a 20 MiB segment
constexpr std::size_t kLargeBuffer = 20 * MiB;    // the shared large segment
constexpr std::size_t kRoundLarge = 2 * MiB;      // bigger segments are the request rounded to 2 MiB

// Expandable segments map memory in pages: kSmallBuffer for the small pool, kLargeBuffer for the
// large one (as PyTorch's ExpandableSegment does).
constexpr std::size_t expandable_page_size(bool small_pool) { return small_pool ? kSmallBuffer : kLargeBuffer; }

constexpr std::size_t kNoMaxSplit = std::numeric_limits<std::size_t>::max();

// round_size(n) = max(512, 512 * ceil(n / 512))
constexpr std::size_t round_size(std::size_t n) {
  return n < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ((n + kMinBlockSize - 1) / kMinBlockSize);
}

// The segment asked of the device when no cached block fits a request of rounded size n:
//   n <= 1 MiB        -> 2 MiB  (small pool)
//   1 MiB < n < 10 MiB -> 20 MiB (large pool, shared by several requests)
//   n >= 10 MiB       -> n rounded up to a multiple of 2 MiB
constexpr std::size_t segment_size_for(std::size_t n) {
  if (n <= kSmallSize) return kSmallBuffer;
  if (n < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((n + kRoundLarge - 1) / kRoundLarge);
}

constexpr bool is_small_request(std::size_t rounded) { return rounded <= kSmallSize; }

struct AllocatorConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Options, written as PyTorch's PYTORCH_CUDA_ALLOC_CONF is: "key:value,key:value".
//   backend:caching|raw    caching (PyTorch's "native", the default; "native" is accepted) or raw:
//                          one device allocation per request, freed at once (what caching saves)
//   max_split_size_mb:N    blocks of N MiB or more are never split, and requests below N MiB never
//                          take them (N >= 20, as in PyTorch); default: unlimited
//   expandable_segments:B  True: one segment per stream and pool that grows by mapping pages at
//                          its end (2 MiB pages small, 20 MiB large) and gives wholly free pages
//                          back on empty_cache, instead of fixed segments (needs backend:caching)
struct AllocatorConfig {
  enum class Backend { caching, raw };
  Backend backend = Backend::caching;
  std::size_t max_split_size = kNoMaxSplit;  // in bytes
  bool expandable_segments = false;

  static AllocatorConfig parse(std::string_view text);  // throws AllocatorConfigError
  std::string to_string() const;                        // parse(to_string()) == *this
  bool operator==(const AllocatorConfig& o) const {  // (spelled out: .cu files are C++17)
    return backend == o.backend && max_split_size == o.max_split_size && expandable_segments == o.expandable_segments;
  }
};

// The names of backend:NAME (PyTorch's "native" is read as caching besides).
inline constexpr auto kAllocatorBackends = cli::enum_table<AllocatorConfig::Backend>(
    "allocator config: backend", {{AllocatorConfig::Backend::caching, "caching"}, {AllocatorConfig::Backend::raw, "raw"}});

}  // namespace trainmem
