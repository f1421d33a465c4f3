// The caching allocator's constants (the same as PyTorch's CUDA caching allocator,
// c10/cuda/CUDACachingAllocator.cpp) and its user-settable options.
#pragma once
#include <array>
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

// roundup_power2_divisions: one count per power-of-two interval of request sizes, [1, 2) MiB,
// [2, 4) MiB, ..., [32, 64) GiB (PyTorch's 16 intervals; the first also takes requests below
// 1 MiB, the last those above 64 GiB).
constexpr std::size_t kRoundupIntervals = 16;

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
//   roundup_power2_divisions:N or [MB:N,MB:N,...,>:N]
//                          requests are rounded up to one of N equal steps between two powers of
//                          two instead of to 512 B (N a power of two; 1: plain 512 B rounding).
//                          The list gives N per interval by its start in MiB (a power of two; the
//                          first entry also covers the intervals below it, ">" those after the
//                          last), as PyTorch reads it
//   garbage_collection_threshold:T
//                          0 < T < 1: when a miss would take reserved memory above T x the card,
//                          first give back cached whole segments of the large pool that have gone
//                          unused longest (PyTorch does so under set_per_process_memory_fraction;
//                          here the simulated card is the allowed maximum)
struct AllocatorConfig {
  enum class Backend { caching, raw };
  Backend backend = Backend::caching;
  std::size_t max_split_size = kNoMaxSplit;  // in bytes
  bool expandable_segments = false;
  std::array<std::size_t, kRoundupIntervals> roundup_power2_divisions{};  // 0: plain 512 B rounding
  double garbage_collection_threshold = 0.0;                             // 0: off

  static AllocatorConfig parse(std::string_view text);  // throws AllocatorConfigError
  std::string to_string() const;                        // parse(to_string()) == *this
  // Only what differs from the default, as to_string writes it ("expandable_segments:True",
  // "backend:raw,max_split_size_mb:20"), or "default": a setting's name in a table.
  std::string label() const;
  bool operator==(const AllocatorConfig& o) const {  // (spelled out: .cu files are C++17)
    return backend == o.backend && max_split_size == o.max_split_size && expandable_segments == o.expandable_segments &&
           roundup_power2_divisions == o.roundup_power2_divisions &&
           garbage_collection_threshold == o.garbage_collection_threshold;
  }
  bool operator!=(const AllocatorConfig& o) const { return !(*this == o); }
};

// The size a request of n bytes is rounded to under `config` (PyTorch's round_size):
//   n < 512                                   -> 512
//   N = divisions for n's interval, N > 1 and n > 512 N
//                                             -> n itself if a power of two, else the next multiple of
//                                                floor_pow2(n) / N (floor_pow2(n) * 2 if that step is 0)
//   otherwise                                 -> round_size(n): the next multiple of 512
std::size_t round_request(std::size_t n, const AllocatorConfig& config);

// The names of backend:NAME (PyTorch's "native" is read as caching besides).
inline constexpr auto kAllocatorBackends = cli::enum_table<AllocatorConfig::Backend>(
    "allocator config: backend", {{AllocatorConfig::Backend::caching, "caching"}, {AllocatorConfig::Backend::raw, "raw"}});

}  // namespace trainmem
