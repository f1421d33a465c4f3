// Helpers shared by the allocator tests: short names for the statistics, and a check of every
// statistic against the ground truth recomputed from a snapshot of the segments, and the fixture
// of the hand-computed trace tests.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/util/byte_size.h"

namespace trainmem::test {

constexpr std::size_t ALL = 0, SMALL = 1, LARGE = 2;

inline std::int64_t cur(const StatArray& a, std::size_t t = ALL) { return a[t].current; }
inline std::int64_t peak(const StatArray& a, std::size_t t = ALL) { return a[t].peak; }
inline std::int64_t mib(double m) { return static_cast<std::int64_t>(m * MiB); }

// Recomputes every "current" statistic from the segments and blocks themselves and compares, then
// checks the structural invariants: blocks tile their segment, segments do not overlap, no two
// free neighbours are left unmerged, and the byte identities of FragmentationInfo hold.
// Returns a failure with a description, so callers can say which event broke it.
inline ::testing::AssertionResult check_invariants(const CachingAllocator& a) {
  const MemoryStats s = a.stats();
  const auto segments = a.snapshot();
  const FragmentationInfo f = a.fragmentation();

  std::int64_t segment_count[3] = {}, reserved[3] = {}, allocation[3] = {}, allocated[3] = {}, active[3] = {},
               active_bytes[3] = {}, requested[3] = {}, inactive_split[3] = {}, inactive_split_bytes[3] = {};
  std::int64_t by_category[kNumMemoryCategories] = {};
  std::uintptr_t previous_end = 0;
  std::size_t internal = 0, external = 0, awaiting = 0, largest = 0, requested_by_live = 0;

  for (const SegmentSnapshot& seg : segments) {
    const std::size_t pool = seg.is_small ? SMALL : LARGE;
    if (seg.address < previous_end) return ::testing::AssertionFailure() << "segments overlap at " << seg.address;
    previous_end = seg.address + seg.total_size;
    std::uintptr_t expected_address = seg.address;
    std::size_t sum = 0;
    bool previous_inactive = false;
    for (const BlockSnapshot& b : seg.blocks) {
      if (b.address != expected_address) return ::testing::AssertionFailure() << "blocks do not tile the segment at " << seg.address;
      if (b.size == 0 || b.size % kMinBlockSize != 0) return ::testing::AssertionFailure() << "block size " << b.size << " is not a multiple of 512";
      const bool inactive = b.state == BlockSnapshot::State::inactive;
      if (inactive && previous_inactive) return ::testing::AssertionFailure() << "two free neighbours were not merged at " << b.address;
      previous_inactive = inactive;
      expected_address += b.size;
      sum += b.size;
      for (std::size_t t : {ALL, pool}) {
        if (b.state == BlockSnapshot::State::active_allocated) {
          allocation[t] += 1;
          allocated[t] += static_cast<std::int64_t>(b.size);
        }
        if (!inactive) {
          active[t] += 1;
          active_bytes[t] += static_cast<std::int64_t>(b.size);
          requested[t] += static_cast<std::int64_t>(b.requested_size);
        } else if (seg.blocks.size() > 1) {
          inactive_split[t] += 1;
          inactive_split_bytes[t] += static_cast<std::int64_t>(b.size);
        }
      }
      if (b.state == BlockSnapshot::State::active_allocated) {
        by_category[index_of(b.category)] += static_cast<std::int64_t>(b.size);
        if (b.requested_size > b.size) return ::testing::AssertionFailure() << "block smaller than its request";
        internal += b.size - b.requested_size;
        requested_by_live += b.requested_size;
      }
      if (b.state == BlockSnapshot::State::active_awaiting_free) awaiting += b.size;
      if (inactive) {
        external += b.size;
        largest = std::max(largest, b.size);
      }
    }
    if (sum != seg.total_size) return ::testing::AssertionFailure() << "blocks do not sum to the segment size";
    if (a.config().expandable_segments) {
      // A mapped range of an expandable segment is a whole number of pages.
      if (!seg.is_expandable || seg.total_size % expandable_page_size(seg.is_small) != 0)
        return ::testing::AssertionFailure() << "expandable mapped range of " << seg.total_size << " bytes is not whole pages";
    } else if (seg.is_small && seg.total_size != kSmallBuffer && a.config().backend == AllocatorConfig::Backend::caching) {
      return ::testing::AssertionFailure() << "small segment of " << seg.total_size << " bytes";
    }
    for (std::size_t t : {ALL, pool}) {
      segment_count[t] += 1;
      reserved[t] += static_cast<std::int64_t>(seg.total_size);
    }
  }

  const std::pair<const char*, std::pair<const StatArray*, std::int64_t*>> checks[] = {
      {"segment", {&s.segment, segment_count}},
      {"reserved_bytes", {&s.reserved_bytes, reserved}},
      {"allocation", {&s.allocation, allocation}},
      {"allocated_bytes", {&s.allocated_bytes, allocated}},
      {"active", {&s.active, active}},
      {"active_bytes", {&s.active_bytes, active_bytes}},
      {"requested_bytes", {&s.requested_bytes, requested}},
      {"inactive_split", {&s.inactive_split, inactive_split}},
      {"inactive_split_bytes", {&s.inactive_split_bytes, inactive_split_bytes}},
  };
  for (const auto& [name, pair] : checks) {
    for (std::size_t t : {ALL, SMALL, LARGE}) {
      const Stat& stat = (*pair.first)[t];
      if (stat.current != pair.second[t])
        return ::testing::AssertionFailure() << name << "[" << t << "].current = " << stat.current
                                             << " but the segments say " << pair.second[t];
      if (stat.peak < stat.current) return ::testing::AssertionFailure() << name << " peak below current";
      if (stat.allocated - stat.freed != stat.current)
        return ::testing::AssertionFailure() << name << ": allocated - freed != current";
    }
  }
  std::int64_t category_sum = 0;
  for (MemoryCategory c : kAllMemoryCategories) {
    if (s.by_category[index_of(c)].current != by_category[index_of(c)])
      return ::testing::AssertionFailure() << "category " << to_string(c) << " disagrees with the blocks";
    category_sum += s.by_category[index_of(c)].current;
  }
  // The orderings and identities the issue names.
  const std::int64_t alloc_b = cur(s.allocated_bytes), active_b = cur(s.active_bytes), reserved_b = cur(s.reserved_bytes);
  if (!(alloc_b <= active_b && active_b <= reserved_b))
    return ::testing::AssertionFailure() << "allocated <= active <= reserved violated";
  if (category_sum != alloc_b) return ::testing::AssertionFailure() << "categories do not sum to allocated";
  if (f.internal_free_bytes != internal || f.external_free_bytes != external || f.awaiting_free_bytes != awaiting ||
      f.largest_free_block != largest)
    return ::testing::AssertionFailure() << "fragmentation() disagrees with the blocks";
  // What the program asked for + internal (rounding) free + external (gap) free + awaiting == reserved,
  // and allocated_bytes = what the program asked for + internal free.
  if (static_cast<std::int64_t>(requested_by_live + f.internal_free_bytes + f.external_free_bytes +
                                f.awaiting_free_bytes) != reserved_b)
    return ::testing::AssertionFailure() << "requested + internal + external + awaiting != reserved";
  if (static_cast<std::int64_t>(requested_by_live + f.internal_free_bytes) != alloc_b)
    return ::testing::AssertionFailure() << "requested + internal != allocated";
  // (Expandable segments map and unmap pages: maps - unmaps is not a count of mapped ranges.)
  if (!a.config().expandable_segments && s.num_device_alloc - s.num_device_free != cur(s.segment))
    return ::testing::AssertionFailure() << "device allocs - device frees != segments";
  if (static_cast<std::size_t>(reserved_b) + a.device().free_bytes() != a.device().total_bytes())
    return ::testing::AssertionFailure() << "reserved + device free != capacity";
  return ::testing::AssertionSuccess();
}

// A caching allocator on a simulated card (addresses only, no memory touched), with every event
// followed by the invariant check. The hand-computed trace tests derive their fixtures from it.
class SimulatedCardTest : public ::testing::Test {
 protected:
  // A fresh card of `budget` bytes and an allocator with `config` (PYTORCH_CUDA_ALLOC_CONF text).
  void make(std::size_t budget, const char* config) {
    allocator_.reset();
    device_ = std::make_unique<BudgetDeviceMemory>(budget, /*backed=*/false);
    allocator_ = std::make_unique<CachingAllocator>(*device_, AllocatorConfig::parse(config));
  }
  void TearDown() override {
    if (allocator_) {
      EXPECT_TRUE(check_invariants(*allocator_));
    }
  }
  void* alloc(std::size_t bytes, MemoryCategory category = MemoryCategory::other, StreamId stream = kDefaultStream) {
    void* p = allocator_->allocate(bytes, category, stream);
    EXPECT_TRUE(check_invariants(*allocator_)) << "after allocating " << bytes;
    return p;
  }
  void release(void* p) {
    allocator_->free(p);
    EXPECT_TRUE(check_invariants(*allocator_)) << "after freeing";
  }
  void empty_cache() {
    allocator_->empty_cache();
    EXPECT_TRUE(check_invariants(*allocator_)) << "after empty_cache";
  }
  MemoryStats s() const { return allocator_->stats(); }
  static std::uintptr_t addr(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

  // The fragmented card of the OOM-advice tests: 8 blocks of 5 MiB fill 40 MiB (two 20 MiB
  // segments or pages), every second one is freed (20 MiB free, in 5 MiB pieces), and 10 MiB is
  // asked for. Returns the error's message and checks the report's figures for that state.
  std::string oom_with_20_mib_free_in_5_mib_pieces() {
    constexpr std::size_t MiB = std::size_t{1} << 20;
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(alloc(5 * MiB));
    for (int i = 1; i < 8; i += 2) release(blocks[i]);
    try {
      allocator_->allocate(10 * MiB);
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.report().reserved_unallocated_bytes(), 20 * MiB);
      EXPECT_EQ(e.report().largest_free_block, 5 * MiB);
      return e.what();
    }
    ADD_FAILURE() << "expected OutOfMemoryError";
    return {};
  }

  std::unique_ptr<BudgetDeviceMemory> device_;
  std::unique_ptr<CachingAllocator> allocator_;
};

}  // namespace trainmem::test
