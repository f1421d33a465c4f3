// Thousands of random allocation/free sequences. After every event, every statistic must equal
// what the segments themselves say, and the invariants must hold (check_invariants):
//   allocated <= active <= reserved; the categories sum to allocated;
//   requested + internal free + external free (+ awaiting) == reserved; no overlapping blocks.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/tests/allocator_test_util.h"

namespace trainmem::test {
namespace {

// Sizes spread over every regime: small (<= 1 MiB), large shared (< 10 MiB), large own segment.
std::size_t random_size(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> regime(0, 9);
  const int r = regime(rng);
  if (r < 5) return std::uniform_int_distribution<std::size_t>(1, 1 * MiB)(rng);
  if (r < 8) return std::uniform_int_distribution<std::size_t>(1 * MiB + 1, 10 * MiB)(rng);
  return std::uniform_int_distribution<std::size_t>(10 * MiB, 60 * MiB)(rng);
}

struct Live {
  void* ptr;
  std::size_t size;
};

void run_sequence(std::uint64_t seed, const char* config, std::size_t budget, int events) {
  std::mt19937_64 rng(seed);
  BudgetDeviceMemory device(budget, /*backed=*/false);
  CachingAllocator a(device, AllocatorConfig::parse(config));
  std::vector<Live> live;
  std::int64_t ooms = 0, highest_allocated = 0;
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> category(0, kNumMemoryCategories - 1);
  const StreamId streams[] = {kDefaultStream, 0x1000};

  for (int e = 0; e < events; ++e) {
    const double r = u(rng);
    if (r < 0.55 || live.empty()) {
      const std::size_t size = random_size(rng);
      try {
        void* p = a.allocate(size, static_cast<MemoryCategory>(category(rng)), streams[u(rng) < 0.2]);
        live.push_back({p, size});
      } catch (const OutOfMemoryError& oom) {
        ++ooms;
        ASSERT_EQ(oom.report().requested_bytes, size);
        ASSERT_GT(oom.report().device_request_bytes + static_cast<std::size_t>(a.stats().reserved_bytes[ALL].current),
                  budget)
            << "an OOM was raised although the device had room";
      }
    } else if (r < 0.98) {
      const std::size_t i = std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng);
      a.free(live[i].ptr);
      live[i] = live.back();
      live.pop_back();
    } else {
      a.empty_cache();
    }
    ASSERT_TRUE(check_invariants(a)) << "seed " << seed << ", config '" << config << "', event " << e;
    const MemoryStats s = a.stats();
    ASSERT_EQ(s.num_ooms, ooms);
    highest_allocated = std::max(highest_allocated, s.allocated_bytes[ALL].current);
    ASSERT_EQ(s.allocated_bytes[ALL].peak, highest_allocated);
    ASSERT_EQ(s.allocation[ALL].current, static_cast<std::int64_t>(live.size()));
  }
  // Each live pointer is the start of an allocated block at least as big as its request.
  std::map<std::uintptr_t, std::size_t> allocated_blocks;
  for (const SegmentSnapshot& seg : a.snapshot())
    for (const BlockSnapshot& b : seg.blocks)
      if (b.state == BlockSnapshot::State::active_allocated) allocated_blocks[b.address] = b.size;
  for (const Live& l : live) {
    auto it = allocated_blocks.find(reinterpret_cast<std::uintptr_t>(l.ptr));
    ASSERT_NE(it, allocated_blocks.end());
    ASSERT_GE(it->second, l.size);
  }
  for (const Live& l : live) a.free(l.ptr);
  a.empty_cache();
  ASSERT_EQ(a.stats().reserved_bytes[ALL].current, 0) << "every segment is free once every block is";
}

TEST(AllocatorRandom, InvariantsHoldAfterEveryEvent) {
  // 3000 sequences: six policies x 500 seeds, budgets small enough that some requests OOM.
  const char* configs[] = {"", "max_split_size_mb:20", "max_split_size_mb:48", "backend:raw",
                           "expandable_segments:True", "expandable_segments:True,max_split_size_mb:20"};
  int sequence = 0;
  for (const char* config : configs) {
    for (std::uint64_t seed = 1; seed <= 500; ++seed, ++sequence) {
      const std::size_t budget = (seed % 3 == 0) ? 128 * MiB : 512 * MiB;
      run_sequence(seed * 7919 + sequence, config, budget, 120);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace trainmem::test
