// The caching allocator's rules, one test each, with the expected pools, segments, splits and
// statistics worked out by hand from PyTorch's policy (see caching_allocator.h). Every test also
// checks all statistics against the segments themselves (check_invariants).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/tests/allocator_test_util.h"

namespace trainmem::test {
namespace {

class AllocatorRules : public SimulatedCardTest {
 protected:
  void make(std::size_t budget = GiB, const char* config = "") { SimulatedCardTest::make(budget, config); }
  void SetUp() override { make(); }
};

TEST(AllocatorConstants, RoundingAndSegmentSizes) {
  EXPECT_EQ(round_size(1), 512u);
  EXPECT_EQ(round_size(512), 512u);
  EXPECT_EQ(round_size(513), 1024u);
  EXPECT_EQ(segment_size_for(512), 2 * MiB);            // small pool
  EXPECT_EQ(segment_size_for(1 * MiB), 2 * MiB);        // 1 MiB is still small
  EXPECT_EQ(segment_size_for(1 * MiB + 512), 20 * MiB);  // large, under 10 MiB: shared 20 MiB
  EXPECT_EQ(segment_size_for(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(segment_size_for(10 * MiB), 10 * MiB);  // from 10 MiB: rounded up to 2 MiB
  EXPECT_EQ(segment_size_for(10 * MiB + 512), 12 * MiB);
  EXPECT_EQ(segment_size_for(25 * MiB), 26 * MiB);
}

TEST_F(AllocatorRules, RequestsAreRoundedTo512Bytes) {
  alloc(1);
  alloc(512);
  alloc(513);
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.allocated_bytes), 512 + 512 + 1024);
  EXPECT_EQ(cur(st.requested_bytes), 1 + 512 + 513);
  EXPECT_EQ(cur(st.allocation), 3);
}

TEST_F(AllocatorRules, ZeroBytesAllocatesNothing) {
  EXPECT_EQ(allocator_->allocate(0), nullptr);
  allocator_->free(nullptr);  // freeing nullptr is a no-op, as with cudaFree
  EXPECT_EQ(s().num_device_alloc, 0);
  EXPECT_EQ(cur(s().allocation), 0);
}

TEST_F(AllocatorRules, SmallRequestIsCarvedFromATwoMiBSegment) {
  void* a = alloc(1000);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.segment, SMALL), 1);
  EXPECT_EQ(cur(st.segment, LARGE), 0);
  EXPECT_EQ(cur(st.reserved_bytes, SMALL), mib(2));
  EXPECT_EQ(cur(st.allocated_bytes, SMALL), 1024);
  EXPECT_EQ(cur(st.requested_bytes, SMALL), 1000);
  // The rest of the segment is one inactive split block: 2 MiB - 1024.
  EXPECT_EQ(cur(st.inactive_split, SMALL), 1);
  EXPECT_EQ(cur(st.inactive_split_bytes, SMALL), mib(2) - 1024);

  void* b = alloc(1000);  // the next block of the same segment
  st = s();
  EXPECT_EQ(addr(b), addr(a) + 1024);
  EXPECT_EQ(st.num_device_alloc, 1);
  EXPECT_EQ(cur(st.inactive_split_bytes, SMALL), mib(2) - 2048);
}

TEST_F(AllocatorRules, OneMiBIsTheLastSmallSize) {
  alloc(1 * MiB);
  EXPECT_EQ(cur(s().reserved_bytes, SMALL), mib(2));
  alloc(1 * MiB + 1);  // rounds to 1 MiB + 512: large pool, a 20 MiB segment, split
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes, LARGE), mib(20));
  EXPECT_EQ(cur(st.allocated_bytes, LARGE), mib(1) + 512);
  EXPECT_EQ(cur(st.inactive_split_bytes, LARGE), mib(19) - 512);
}

TEST_F(AllocatorRules, SmallPoolSplitsDownTo512ByteRemainders) {
  // 2047 blocks of 1 KiB leave 1 KiB of the 2 MiB segment; a 512 B request splits it (the
  // remainder of 512 B is >= 512), and the last 512 B request takes the rest whole.
  for (int i = 0; i < 2047; ++i) allocator_->allocate(1024);
  alloc(512);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.inactive_split, SMALL), 1);
  EXPECT_EQ(cur(st.inactive_split_bytes, SMALL), 512);
  alloc(512);
  st = s();
  EXPECT_EQ(cur(st.segment, SMALL), 1);
  EXPECT_EQ(cur(st.inactive_split, SMALL), 0);
  EXPECT_EQ(cur(st.allocated_bytes, SMALL), mib(2));
  alloc(512);  // the segment is full: a second one
  EXPECT_EQ(cur(s().segment, SMALL), 2);
}

TEST_F(AllocatorRules, LargeRequestsUnderTenMiBShareATwentyMiBSegment) {
  alloc(5 * MiB);
  alloc(5 * MiB);
  alloc(5 * MiB);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.segment, LARGE), 1);
  EXPECT_EQ(cur(st.inactive_split_bytes, LARGE), mib(5));
  alloc(5 * MiB);  // takes the last 5 MiB whole: no split left
  st = s();
  EXPECT_EQ(cur(st.segment, LARGE), 1);
  EXPECT_EQ(cur(st.inactive_split, LARGE), 0);
  alloc(5 * MiB);
  EXPECT_EQ(cur(s().segment, LARGE), 2);
}

TEST_F(AllocatorRules, LargeRemainderOfOneMiBOrLessIsNotSplit) {
  alloc(19 * MiB);  // 20 MiB segment; remainder exactly 1 MiB is not > 1 MiB: the block stays whole
  MemoryStats st = s();
  EXPECT_EQ(cur(st.allocated_bytes), mib(20));
  EXPECT_EQ(cur(st.requested_bytes), mib(19));
  EXPECT_EQ(cur(st.inactive_split), 0);
  alloc(19 * MiB - 512);  // remainder 1 MiB + 512 > 1 MiB: split
  st = s();
  EXPECT_EQ(cur(st.allocated_bytes), mib(20) + mib(19) - 512);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(1) + 512);
}

TEST_F(AllocatorRules, TenMiBAndAboveGetTheirOwnTwoMiBRoundedSegment) {
  alloc(10 * MiB);
  alloc(11 * MiB + 1);  // rounded 11 MiB + 512 -> segment 12 MiB, remainder < 1 MiB: not split
  alloc(25 * MiB);      // segment 26 MiB, remainder exactly 1 MiB: not split
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.segment, LARGE), 3);
  EXPECT_EQ(cur(st.reserved_bytes, LARGE), mib(10 + 12 + 26));
  EXPECT_EQ(cur(st.allocated_bytes, LARGE), mib(10 + 12 + 26));
  EXPECT_EQ(cur(st.requested_bytes, LARGE), mib(10 + 11 + 25) + 1);
}

TEST_F(AllocatorRules, BestFitTakesTheSmallestCachedBlockThatFits) {
  void* a = alloc(12 * MiB);
  void* b = alloc(16 * MiB);
  void* c = alloc(14 * MiB);
  release(a);
  release(b);
  release(c);
  EXPECT_EQ(addr(alloc(13 * MiB)), addr(c));  // 14 MiB is the smallest block >= 13 MiB
  EXPECT_EQ(addr(alloc(11 * MiB)), addr(a));  // then 12 MiB
  EXPECT_EQ(s().num_device_alloc, 3);         // no new segment
}

TEST_F(AllocatorRules, FreedBlocksMergeWithFreeNeighbours) {
  void* a = alloc(2 * MiB);
  void* b = alloc(3 * MiB);
  void* c = alloc(4 * MiB);
  // [a 2][b 3][c 4][free 11]
  EXPECT_EQ(addr(b), addr(a) + 2 * MiB);
  EXPECT_EQ(addr(c), addr(b) + 3 * MiB);
  EXPECT_EQ(cur(s().inactive_split), 1);

  release(b);  // [a][free 3][c][free 11]
  EXPECT_EQ(cur(s().inactive_split), 2);
  EXPECT_EQ(cur(s().inactive_split_bytes), mib(14));
  release(a);  // [free 5][c][free 11]
  EXPECT_EQ(cur(s().inactive_split), 2);
  EXPECT_EQ(cur(s().inactive_split_bytes), mib(16));
  release(c);  // [free 20]: one whole block, no longer split
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.inactive_split), 0);
  EXPECT_EQ(cur(st.inactive_split_bytes), 0);
  const auto segments = allocator_->snapshot();
  ASSERT_EQ(segments.size(), 1u);
  ASSERT_EQ(segments[0].blocks.size(), 1u);
  EXPECT_EQ(segments[0].blocks[0].size, 20 * MiB);
  EXPECT_EQ(allocator_->fragmentation().largest_free_block, 20 * MiB);
}

TEST_F(AllocatorRules, AFreedBlockIsReusedWithoutAskingTheDevice) {
  void* a = alloc(3 * MiB);
  release(a);
  EXPECT_EQ(alloc(3 * MiB), a);
  EXPECT_EQ(s().num_device_alloc, 1);
  EXPECT_EQ(s().num_device_free, 0);
}

TEST_F(AllocatorRules, EmptyCacheFreesOnlySegmentsWithNoLiveBlock) {
  void* x = alloc(5 * MiB);   // 20 MiB segment, stays (x is live)
  void* y = alloc(30 * MiB);  // 30 MiB segment
  void* z = alloc(1000);      // 2 MiB small segment
  void* w = alloc(5 * MiB);   // second block of x's segment
  release(y);
  release(z);
  release(w);
  EXPECT_EQ(cur(s().reserved_bytes), mib(52));
  allocator_->empty_cache();
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(20));  // x's segment, still split around x
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(st.num_device_free, 2);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(15));
  EXPECT_TRUE(check_invariants(*allocator_));
  release(x);
  allocator_->empty_cache();
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), 0);
  EXPECT_EQ(st.num_device_free, 3);
  EXPECT_EQ(peak(st.reserved_bytes), mib(52));
}

// --- max_split_size (here 32 MiB)

TEST_F(AllocatorRules, MaxSplitSizeBlocksAreNeverSplit) {
  make(GiB, "max_split_size_mb:32");
  void* a = alloc(40 * MiB);
  EXPECT_EQ(s().oversize_segments.current, 1);
  release(a);
  // 35 MiB >= max_split: may take the 40 MiB block (40 < 35 + 20) and takes it whole.
  EXPECT_EQ(alloc(35 * MiB), a);
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.allocated_bytes), mib(40));
  EXPECT_EQ(cur(st.inactive_split), 0);
  EXPECT_EQ(st.oversize_allocations.current, 1);
}

TEST_F(AllocatorRules, RequestsBelowMaxSplitSizeDoNotTakeOversizeBlocks) {
  make(GiB, "max_split_size_mb:32");
  release(alloc(40 * MiB));
  alloc(12 * MiB);  // would fit in the cached 40 MiB block, but it is oversize: new segment
  EXPECT_EQ(s().num_device_alloc, 2);
  EXPECT_EQ(cur(s().reserved_bytes), mib(52));
}

TEST_F(AllocatorRules, WithoutMaxSplitSizeTheSameRequestSplitsTheCachedBlock) {
  release(alloc(40 * MiB));
  alloc(12 * MiB);  // takes the 40 MiB block and splits off 28 MiB
  EXPECT_EQ(s().num_device_alloc, 1);
  EXPECT_EQ(cur(s().inactive_split_bytes), mib(28));
}

TEST_F(AllocatorRules, OversizeRequestsWasteAtMostTwentyMiBOfACachedBlock) {
  make(GiB, "max_split_size_mb:32");
  void* big = alloc(60 * MiB);
  release(big);
  alloc(36 * MiB);  // 60 >= 36 + 20: too wasteful, new segment of 36 MiB
  EXPECT_EQ(s().num_device_alloc, 2);
  EXPECT_EQ(alloc(42 * MiB), big);  // 60 < 42 + 20: takes it whole
  EXPECT_EQ(cur(s().allocated_bytes), mib(36 + 60));
}

// --- the miss path: release oversize blocks, release everything, OOM

TEST_F(AllocatorRules, DeviceRefusalReleasesTheCacheAndRetries) {
  make(23 * MiB);
  release(alloc(1000));  // a cached 2 MiB small segment
  alloc(21 * MiB);       // needs a 22 MiB segment: 2 + 22 > 23, so the cache is released first
  const MemoryStats st = s();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_EQ(st.num_ooms, 0);
  EXPECT_EQ(cur(st.reserved_bytes), mib(22));
}

TEST_F(AllocatorRules, ReleasesTheSmallestSufficientOversizeBlockFirst) {
  make(60 * MiB, "max_split_size_mb:20");
  void* a = alloc(30 * MiB);
  void* b = alloc(24 * MiB);
  release(a);
  release(b);
  // 10 MiB < max_split cannot use the oversize blocks; a new 10 MiB segment exceeds 60 MiB, so
  // the smallest oversize block >= max(10, 20) MiB (24 MiB) is released, and that is enough.
  alloc(10 * MiB);
  const MemoryStats st = s();
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(st.num_alloc_retries, 0);  // the full release was not needed
  EXPECT_EQ(cur(st.reserved_bytes), mib(30 + 10));
}

TEST_F(AllocatorRules, ReleasesOversizeBlocksLargestFirstUntilEnough) {
  make(100 * MiB, "max_split_size_mb:20");
  void* a = alloc(22 * MiB);
  void* b = alloc(24 * MiB);
  void* c = alloc(26 * MiB);
  release(a);
  release(b);
  release(c);
  // 40 MiB: no cached block is big enough and 72 + 40 > 100: release 26, then 24 (50 >= 40).
  alloc(40 * MiB);
  const MemoryStats st = s();
  EXPECT_EQ(st.num_device_free, 2);
  EXPECT_EQ(st.num_alloc_retries, 0);
  EXPECT_EQ(cur(st.reserved_bytes), mib(22 + 40));
}

TEST_F(AllocatorRules, NotEnoughOversizeBytesFallsThroughToTheFullRelease) {
  make(60 * MiB, "max_split_size_mb:20");
  release(alloc(30 * MiB));
  // 40 MiB: the 30 MiB block is released but is not enough (30 < 40), so the allocator goes on
  // to release every free segment and retries: that retry is what num_alloc_retries counts.
  alloc(40 * MiB);
  const MemoryStats st = s();
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
}

TEST_F(AllocatorRules, OutOfMemoryRaisesAReportAndLeavesTheAllocatorUsable) {
  make(64 * MiB);
  alloc(30 * MiB, MemoryCategory::activations);
  alloc(1000, MemoryCategory::parameters);
  try {
    allocator_->allocate(40 * MiB, MemoryCategory::activations);  // 32 + 40 > 64 even after release
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    EXPECT_EQ(r.requested_bytes, 40 * MiB);
    EXPECT_EQ(r.rounded_bytes, 40 * MiB);
    EXPECT_EQ(r.device_request_bytes, 40 * MiB);
    EXPECT_EQ(r.capacity_bytes, 64 * MiB);
    EXPECT_EQ(r.device_free_bytes, 32 * MiB);
    EXPECT_EQ(r.allocated_bytes, 30 * MiB + 1024);
    EXPECT_EQ(r.reserved_bytes, 32 * MiB);
    EXPECT_EQ(r.reserved_unallocated_bytes(), 2 * MiB - 1024);
    EXPECT_EQ(r.largest_free_block, 2 * MiB - 1024);
    EXPECT_EQ(r.category_bytes[index_of(MemoryCategory::activations)], mib(30));
    EXPECT_EQ(r.category_bytes[index_of(MemoryCategory::parameters)], 1024);
    const std::string message = e.what();
    EXPECT_NE(message.find("tried to allocate 40.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("activations=30.00 MiB"), std::string::npos) << message;
    // The allocator alone knows no technique: without an advisor (the driver installs one built
    // from the registrations, oom_advice.h) it proposes what it knows of, a larger device.
    EXPECT_NE(message.find("use a device with more memory"), std::string::npos) << message;
    EXPECT_EQ(message.find("--recompute"), std::string::npos) << message;
  }
  MemoryStats st = s();
  EXPECT_EQ(st.num_ooms, 1);
  EXPECT_EQ(st.num_alloc_retries, 1);
  alloc(10 * MiB);  // still works
  EXPECT_EQ(s().num_ooms, 1);
}

TEST_F(AllocatorRules, OomAdviceNamesFragmentationWhenTheCacheHasTheBytesInPieces) {
  make(40 * MiB);
  const std::string what = oom_with_20_mib_free_in_5_mib_pieces();  // two full 20 MiB segments, then holes
  EXPECT_NE(what.find("expandable_segments"), std::string::npos) << what;
}

TEST_F(AllocatorRules, CpuBudgetEmulatesACardOfThatSize) {
  make(100 * MiB);
  for (int i = 0; i < 5; ++i) alloc(20 * MiB);
  EXPECT_EQ(device_->free_bytes(), 0u);
  EXPECT_THROW(allocator_->allocate(512), OutOfMemoryError);  // even 512 B needs a new 2 MiB segment
  EXPECT_EQ(s().num_ooms, 1);
}

TEST_F(AllocatorRules, EveryAllocationIsCountedInItsCategory) {
  void* p = alloc(1000, MemoryCategory::parameters);
  void* g = alloc(3 * MiB, MemoryCategory::gradients);
  alloc(5 * MiB, MemoryCategory::activations);
  MemoryStats st = s();
  EXPECT_EQ(st.by_category[index_of(MemoryCategory::parameters)].current, 1024);
  EXPECT_EQ(st.by_category[index_of(MemoryCategory::gradients)].current, mib(3));
  EXPECT_EQ(st.by_category[index_of(MemoryCategory::activations)].current, mib(5));
  release(g);
  st = s();
  EXPECT_EQ(st.by_category[index_of(MemoryCategory::gradients)].current, 0);
  EXPECT_EQ(st.by_category[index_of(MemoryCategory::gradients)].peak, mib(3));
  release(p);
  // The category goes with the block: reused for activations, it counts there.
  alloc(1000, MemoryCategory::activations);
  EXPECT_EQ(s().by_category[index_of(MemoryCategory::parameters)].current, 0);
  EXPECT_EQ(s().by_category[index_of(MemoryCategory::activations)].current, mib(5) + 1024);
}

TEST_F(AllocatorRules, RawModeAsksTheDeviceForEveryRequest) {
  make(GiB, "backend:raw");
  void* a = alloc(1000);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), 1024);  // exactly the rounded request, no 2 MiB segment
  EXPECT_EQ(cur(st.allocated_bytes), 1024);
  release(a);
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), 0);  // given back at once
  EXPECT_EQ(st.num_device_free, 1);
  for (int i = 0; i < 10; ++i) release(alloc(3 * MiB));
  EXPECT_EQ(s().num_device_alloc, 11);
  EXPECT_EQ(s().num_device_free, 11);
}

TEST_F(AllocatorRules, ResetPeakStatsSetsPeaksToCurrent) {
  void* a = alloc(30 * MiB);
  alloc(1000);
  release(a);
  EXPECT_EQ(peak(s().allocated_bytes), mib(30) + 1024);
  allocator_->reset_peak_stats();
  const MemoryStats st = s();
  EXPECT_EQ(peak(st.allocated_bytes), 1024);
  EXPECT_EQ(peak(st.reserved_bytes), cur(st.reserved_bytes));
  EXPECT_EQ(st.allocated_bytes[ALL].allocated, mib(30) + 1024);  // totals are kept
}

TEST_F(AllocatorRules, FreeingAForeignOrFreedPointerIsAnError) {
  void* a = alloc(1000);
  int local = 0;
  EXPECT_THROW(allocator_->free(&local), std::invalid_argument);
  release(a);
  EXPECT_THROW(allocator_->free(a), std::invalid_argument);
}

TEST_F(AllocatorRules, StatsUsePyTorchNames) {
  alloc(1000);
  const nlohmann::json j = s().to_json();
  for (const char* key : {"allocated_bytes.all.current", "allocated_bytes.small_pool.peak",
                          "reserved_bytes.large_pool.freed", "requested_bytes.all.allocated",
                          "active_bytes.all.current", "inactive_split_bytes.all.current", "segment.all.current",
                          "allocation.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
                          "num_device_free", "by_category.parameters.peak"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["allocated_bytes.all.current"], 1024);
}

// roundup_power2_divisions: the block is the request rounded to its division, as allocated_bytes
// counts it.
TEST_F(AllocatorRules, RoundupPowerOfTwoDivisionsRoundTheBlock) {
  make(GiB, "roundup_power2_divisions:4");
  alloc(5 * MiB + 1);
  EXPECT_EQ(cur(s().allocated_bytes), mib(6));
  EXPECT_EQ(cur(s().requested_bytes), static_cast<std::int64_t>(5 * MiB + 1));
}

// garbage_collection_threshold, worked by hand on a 100 MiB card at 0.6 (60 MiB): before a miss
// with reserved above 60 MiB, cached whole segments at least as old as the mean age are given back.
TEST_F(AllocatorRules, GarbageCollectionGivesBackTheOldestCachedSegmentsFirst) {
  for (const char* config : {"garbage_collection_threshold:0.6", ""}) {
    SCOPED_TRACE(config);
    make(100 * MiB, config);
    void* a = alloc(20 * MiB);  // search 1: a miss; reserved 20
    void* b = alloc(30 * MiB);  // search 2: a miss; reserved 50
    release(a);                 // cached at search 2
    void* c = alloc(25 * MiB);  // search 3: A is too small; reserved 50 <= 60: no collection; 26 MiB more
    release(b);                 // cached at search 3
    void* d = alloc(40 * MiB);  // search 4: a miss with reserved 76 > 60: collect 16 MiB
    const MemoryStats st = s();
    if (config[0] != '\0') {
      // Ages: A 2, B 1, mean 1.5: A goes (20 MiB >= the 16 needed), B stays cached.
      EXPECT_EQ(st.num_device_free, 1);
      EXPECT_EQ(cur(st.reserved_bytes), mib(30 + 26 + 40));
      EXPECT_EQ(st.num_alloc_retries, 0);
    } else {
      // Without it the device refuses (76 + 40 > 100): both cached segments go, and a retry.
      EXPECT_EQ(st.num_device_free, 2);
      EXPECT_EQ(cur(st.reserved_bytes), mib(26 + 40));
      EXPECT_EQ(st.num_alloc_retries, 1);
    }
    release(c);
    release(d);
  }
}

}  // namespace
}  // namespace trainmem::test
