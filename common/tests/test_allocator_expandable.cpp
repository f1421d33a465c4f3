// Expandable segments (expandable_segments:True), one rule per test, with the expected pages,
// blocks and statistics worked out by hand (see expandable_segments.cpp for the rules). Every test
// also checks all statistics against the segments themselves (check_invariants).
//
// Notation in the comments: offsets in MiB from the start of the segment's reserved range,
// [x 0-5] a live block, [f 5-20] a cached free block, [unmapped 40-..] address space only.
// Pages are 20 MiB (large pool) and 2 MiB (small pool).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/tests/allocator_test_util.h"

namespace trainmem::test {
namespace {

class ExpandableSegments : public SimulatedCardTest {
 protected:
  void make(std::size_t budget = GiB, const char* config = "expandable_segments:True") {
    SimulatedCardTest::make(budget, config);
    allocator_->recorder().enable();
  }
  void SetUp() override { make(); }
  void* alloc(std::size_t bytes, StreamId stream = kDefaultStream) {
    return SimulatedCardTest::alloc(bytes, MemoryCategory::other, stream);
  }
  // The recorded segment_map / segment_unmap events, as (action, address, size).
  std::vector<TraceEvent> page_events() const {
    std::vector<TraceEvent> out;
    for (const TraceEvent& e : allocator_->recorder().events())
      if (e.action == TraceAction::segment_map || e.action == TraceAction::segment_unmap) out.push_back(e);
    return out;
  }
};

TEST_F(ExpandableSegments, SmallPoolMapsTwoMiBPages) {
  void* a = alloc(1000);
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes, SMALL), mib(2));  // one 2 MiB page
  EXPECT_EQ(cur(st.reserved_bytes, LARGE), 0);
  EXPECT_EQ(cur(st.segment, SMALL), 1);
  EXPECT_EQ(cur(st.allocated_bytes), 1024);
  EXPECT_EQ(cur(st.inactive_split_bytes, SMALL), mib(2) - 1024);  // [a][f]: the rest of the page
  EXPECT_EQ(st.num_device_alloc, 1);
  const auto events = allocator_->recorder().events();
  ASSERT_EQ(events.size(), 2u);  // segment_map, then alloc inside it
  EXPECT_EQ(events[0].action, TraceAction::segment_map);
  EXPECT_EQ(events[0].address, addr(a));
  EXPECT_EQ(events[0].size, 2 * MiB);
  EXPECT_EQ(events[1].action, TraceAction::alloc);
  EXPECT_EQ(to_string(TraceAction::segment_map), "segment_map");
  EXPECT_EQ(to_string(TraceAction::segment_unmap), "segment_unmap");
}

TEST_F(ExpandableSegments, LargePoolMapsTwentyMiBPagesAndSplitsDownTo512Bytes) {
  // 20 MiB - 512: one page; the 512 B left is split off (fixed segments keep remainders <= 1 MiB
  // in the block: see LargeRemainderOfOneMiBOrLessIsNotSplit).
  alloc(20 * MiB - 512);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes, LARGE), mib(20));
  EXPECT_EQ(cur(st.allocated_bytes), mib(20) - 512);
  EXPECT_EQ(cur(st.inactive_split_bytes), 512);
  EXPECT_EQ(cur(st.inactive_split), 1);
  // 25 MiB: ceil(25 / 20) = 2 more pages (the 512 B free block at the end grows into them):
  // [f 20-512B .. 20][unmapped 20-..] -> map 20-60 -> [b 20-512B .. 45-512B][f 15+512B].
  void* b = alloc(25 * MiB);
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(60));
  EXPECT_EQ(cur(st.segment), 1);  // still one contiguous mapped range
  EXPECT_EQ(cur(st.allocated_bytes), mib(45) - 512);  // 25 MiB is split off exactly
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(15) + 512);
  EXPECT_EQ(st.num_device_alloc, 2);
  const auto events = page_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].address, events[0].address + 20 * MiB);  // mapped right after the first page
  EXPECT_EQ(events[1].size, 40 * MiB);                          // two pages in one map
  EXPECT_EQ(addr(b), events[0].address + 20 * MiB - 512);       // the block straddles the pages
}

TEST_F(ExpandableSegments, AFreeBlockAtTheEndGrowsInPlace) {
  // Fixed segments: 5 MiB in a 20 MiB segment, then 25 MiB in its own 26 MiB segment (46 MiB).
  // Expandable: [a 0-5][f 5-20] -> the free end grows by one page -> [a 0-5][b 5-30][f 30-40].
  void* a = alloc(5 * MiB);
  void* b = alloc(25 * MiB);
  EXPECT_EQ(addr(b), addr(a) + 5 * MiB);
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(cur(st.allocated_bytes), mib(30));
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(10));
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_EQ(page_events()[1].size, 20 * MiB);  // 25 - 15 free = 10 MiB missing: one page
}

TEST_F(ExpandableSegments, GrowingRequestsReuseOneSegment) {
  // Requests of 12, 14, ..., 22 MiB, each freed before the next (a sequence length that grows).
  // Fixed segments: each is >= 10 MiB and fits no cached block -> a new segment each time:
  // reserved 12 + 14 + 16 + 18 + 20 + 22 = 102 MiB for at most 22 MiB in use.
  // Expandable: 12..20 fit the first page; 22 grows the free block by one page: 40 MiB.
  for (const char* config : {"", "expandable_segments:True"}) {
    make(GiB, config);
    for (std::size_t m = 12; m <= 22; m += 2) release(alloc(m * MiB));
    const MemoryStats st = s();
    EXPECT_EQ(peak(st.allocated_bytes), mib(22)) << config;
    if (std::string(config).empty()) {
      EXPECT_EQ(cur(st.reserved_bytes), mib(102));
      EXPECT_EQ(cur(st.segment), 6);
      EXPECT_EQ(st.num_device_alloc, 6);
    } else {
      EXPECT_EQ(cur(st.reserved_bytes), mib(40));
      EXPECT_EQ(cur(st.segment), 1);
      EXPECT_EQ(st.num_device_alloc, 2);
      EXPECT_EQ(cur(st.inactive_split), 0);  // one free block from end to end of the mapped range
    }
  }
}

// Step i (i = 0..6): an activation of 12 + 2i MiB, then a 2 MiB tensor that is kept (a running
// statistic, a cache entry), then the activation is freed. The kept tensors land in the cached
// free blocks and pin them.
void growing_with_kept_tensors(CachingAllocator& a) {
  for (std::size_t i = 0; i <= 6; ++i) {
    void* activation = a.allocate((12 + 2 * i) * MiB);
    a.allocate(2 * MiB);  // kept
    a.free(activation);
    ASSERT_TRUE(check_invariants(a)) << "step " << i;
  }
}

TEST_F(ExpandableSegments, GrowingSizesFragmentFixedSegmentsButNotExpandableOnes) {
  // Fixed segments, by hand (sizes in MiB; S_i the activation's own segment, L the shared 20 MiB):
  //   i=0: S0 [A0 12]; L [K0 2][f 18]; A0 freed
  //   i=1: A1 14 takes L's 18 -> L [K0][A1 14][f 4]; K1 takes the 4 -> [K0][A1][K1][f 2]; A1 freed
  //   i=2: A2 16 fits nothing -> S2; K2 takes L's last 2 whole
  //   i=3..6: A3..A6 (18..24) fit nothing -> S3..S6; K3..K6 split S0 (12) -> [K3 K4 K5 K6][f 4]
  // reserved = 12 + 20 + 16 + 18 + 20 + 22 + 24 = 132 MiB for 24 + 14 = 38 MiB at most;
  // inactive split: L's 14 (between K0 and K1) and S0's 4.
  make(GiB, "");
  growing_with_kept_tensors(*allocator_);
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(132));
  EXPECT_EQ(cur(st.segment), 7);
  EXPECT_EQ(cur(st.allocated_bytes), mib(14));
  EXPECT_EQ(cur(st.inactive_split), 2);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(18));

  // Expandable, by hand (offsets in MiB):
  //   i=0: map 0-20: [A0 0-12][K0 12-14][f 14-20]; A0 freed -> [f 0-12][K0][f 14-20]
  //   i=1: A1 14 fits no free block; the end block (6) grows by one page: [f 14-40] ->
  //        [A1 14-28][f 28-40]; K1 takes the 12 at 0 (best fit by grown size: the end block
  //        could grow, so it is left alone) -> [K1 0-2][f 2-12]; A1 freed -> [f 14-40]
  //   i=2..6: A_i (16..24) fits [f 14-40]; K_i takes the next 2 MiB of [f 2-12]
  // mapped 40 MiB: [K1..K6 0-12][K0 12-14][f 14-40]; no page mapped after step 1.
  make(GiB);
  growing_with_kept_tensors(*allocator_);
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(cur(st.allocated_bytes), mib(14));
  EXPECT_EQ(cur(st.inactive_split), 1);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(26));
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_EQ(allocator_->fragmentation().largest_free_block, 26 * MiB);
}

TEST_F(ExpandableSegments, AtABudgetFixedSegmentsNeedRetriesWhereExpandableOnesDoNot) {
  // The same steps on a 64 MiB card. Fixed segments, by hand:
  //   i=2: 32 + 16 = 48 fits; i=3: 48 + 18 > 64 -> release the wholly free S0 (12) and S2 (16),
  //   retry: reserved 38 (K3 now splits L's 14); i=4: 38 + 20 = 58 fits; i=5: 58 + 22 > 64 ->
  //   release S3, S4, retry: 42; i=6: 42 + 24 > 64 -> release S5, retry: 44.
  make(64 * MiB, "");
  growing_with_kept_tensors(*allocator_);
  MemoryStats st = s();
  EXPECT_EQ(st.num_alloc_retries, 3);
  EXPECT_EQ(st.num_device_alloc, 7);  // S0, L, S2 .. S6
  EXPECT_EQ(st.num_device_free, 5);   // S0, S2, S3, S4, S5
  EXPECT_EQ(peak(st.reserved_bytes), mib(58));
  EXPECT_EQ(cur(st.reserved_bytes), mib(44));
  // Expandable: the same 40 MiB as without a budget, no retry, nothing given back.
  make(64 * MiB);
  growing_with_kept_tensors(*allocator_);
  st = s();
  EXPECT_EQ(st.num_alloc_retries, 0);
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_EQ(st.num_device_free, 0);
  EXPECT_EQ(peak(st.reserved_bytes), mib(40));
}

TEST_F(ExpandableSegments, AFreedBlockIsReusedWithoutMapping) {
  void* a = alloc(3 * MiB);
  release(a);
  EXPECT_EQ(alloc(3 * MiB), a);
  EXPECT_EQ(s().num_device_alloc, 1);
  EXPECT_EQ(s().num_device_free, 0);
  EXPECT_EQ(page_events().size(), 1u);
}

TEST_F(ExpandableSegments, EmptyCacheUnmapsWhollyFreePagesOnly) {
  void* a = alloc(5 * MiB);   // map 0-20: [a 0-5][f 5-20]
  void* b = alloc(30 * MiB);  // grows by one page: [a][b 5-35][f 35-40]
  release(b);                 // [a 0-5][f 5-40]
  EXPECT_EQ(cur(s().reserved_bytes), mib(40));
  empty_cache();  // the free block holds one whole page (20-40): unmapped; 5-20 stays mapped
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(20));
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(15));  // [a][f 5-20]
  auto events = page_events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].action, TraceAction::segment_unmap);
  EXPECT_EQ(events[2].address, addr(a) + 20 * MiB);
  EXPECT_EQ(events[2].size, 20 * MiB);

  release(a);  // [f 0-20]: a wholly free mapped range (not split)
  EXPECT_EQ(cur(s().inactive_split), 0);
  empty_cache();  // unmaps 0-20; nothing is mapped any more: the address range is given back
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), 0);
  EXPECT_EQ(cur(st.segment), 0);
  EXPECT_EQ(st.num_device_free, 2);
  EXPECT_EQ(peak(st.reserved_bytes), mib(40));
  EXPECT_TRUE(allocator_->snapshot().empty());
}

TEST_F(ExpandableSegments, AFreeBlockWithNoWholePageStaysMapped) {
  void* x = alloc(10 * MiB);  // [x 0-10][f 10-20]
  void* y = alloc(20 * MiB);  // [x][y 10-30][f 30-40]
  alloc(10 * MiB);            // [x][y][z 30-40]
  release(y);                 // [x][f 10-30][z]: the free bytes straddle two pages
  empty_cache();
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
  EXPECT_EQ(st.num_device_free, 0);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(20));
  (void)x;
}

TEST_F(ExpandableSegments, PagesUnmappedInTheMiddleAreMappedAgainInPlace) {
  void* a = alloc(25 * MiB);  // map 0-40: [a 0-25][f 25-40]
  void* b = alloc(5 * MiB);   // [a][b 25-30][f 30-40]
  release(a);                 // [f 0-25][b][f 30-40]
  empty_cache();              // unmaps 0-20: [unmapped 0-20][f 20-25][b 25-30][f 30-40]
  MemoryStats st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(20));
  EXPECT_EQ(cur(st.segment), 1);  // one mapped range, 20-40
  EXPECT_EQ(cur(st.inactive_split), 2);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(15));
  // 18 MiB fits no free block. The lowest place with room is the unmapped 0-20 followed by the
  // free 20-25: map 0-20 again and merge -> [c 0-18][f 18-25][b][f 30-40].
  void* c = alloc(18 * MiB);
  EXPECT_EQ(addr(c), addr(a));
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(cur(st.inactive_split), 2);
  EXPECT_EQ(cur(st.inactive_split_bytes), mib(7 + 10));
  EXPECT_EQ(st.num_device_alloc, 2);  // map 0-40, map 0-20 again
  (void)b;
}

TEST_F(ExpandableSegments, MappedRangesAreCountedAsSegments) {
  void* a = alloc(25 * MiB);  // [a 0-25][f 25-40]
  void* b = alloc(15 * MiB);  // [a][b 25-40]
  void* c = alloc(20 * MiB);  // grows: [a][b][c 40-60]
  release(a);
  release(c);  // [f 0-25][b 25-40][f 40-60]
  empty_cache();  // unmaps 0-20 and 40-60: one mapped range 20-40 is left
  MemoryStats st = s();
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(cur(st.reserved_bytes), mib(20));
  void* d = alloc(50 * MiB);  // no room before b: the end grows from 40: map 40-100
  EXPECT_EQ(addr(d), addr(a) + 40 * MiB);
  st = s();
  EXPECT_EQ(cur(st.reserved_bytes), mib(80));
  EXPECT_EQ(cur(st.segment), 1);  // 20-100, one range
  release(b);
  empty_cache();  // [f 20-40] unmapped: the range is now 40-100
  st = s();
  EXPECT_EQ(cur(st.segment), 1);
  EXPECT_EQ(cur(st.reserved_bytes), mib(60));
  // Two ranges: a small tensor maps a 2 MiB page in its own (small pool) segment.
  alloc(1000);
  EXPECT_EQ(cur(s().segment), 2);
  EXPECT_EQ(cur(s().segment, SMALL), 1);
  const auto segments = allocator_->snapshot();
  ASSERT_EQ(segments.size(), 2u);
  for (const SegmentSnapshot& seg : segments) EXPECT_TRUE(seg.is_expandable);
}

TEST_F(ExpandableSegments, EachStreamHasItsOwnSegment) {
  void* a = alloc(5 * MiB, kDefaultStream);
  void* b = alloc(5 * MiB, 0x1000);
  const MemoryStats st = s();
  EXPECT_EQ(cur(st.segment), 2);
  EXPECT_EQ(cur(st.reserved_bytes), mib(40));
  const auto events = page_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].stream, 0x1000u);
  EXPECT_NE(addr(b), addr(a) + 5 * MiB);  // not carved from the default stream's page
  release(a);
  EXPECT_EQ(addr(alloc(5 * MiB, 0x1000)), addr(b) + 5 * MiB);  // the other stream's own page
}

TEST_F(ExpandableSegments, TheOomRetryUnmapsFreePages) {
  // 40 MiB card: 30 MiB maps two pages; freed, they stay mapped. A small tensor then needs a
  // 2 MiB page: refused (40 + 2 > 40); the retry unmaps the two free pages, then maps it.
  make(40 * MiB);
  release(alloc(30 * MiB));
  alloc(1000);
  const MemoryStats st = s();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(cur(st.reserved_bytes), mib(2));
  EXPECT_EQ(st.num_ooms, 0);
  const auto events = page_events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].action, TraceAction::segment_unmap);
  EXPECT_EQ(events[1].size, 40 * MiB);
  EXPECT_EQ(events[2].action, TraceAction::segment_map);
  EXPECT_EQ(events[2].size, 2 * MiB);
}

TEST_F(ExpandableSegments, OutOfMemoryAtTheRightPageCount) {
  // 50 MiB card. 45 MiB needs ceil(45 / 20) = 3 pages = 60 MiB: out of memory, although a fixed
  // 45 MiB segment fits (the price of 20 MiB pages). 40 MiB (2 pages) fits.
  make(50 * MiB);
  try {
    allocator_->allocate(45 * MiB, MemoryCategory::activations);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    EXPECT_EQ(r.rounded_bytes, 45 * MiB);
    EXPECT_EQ(r.device_request_bytes, 60 * MiB);  // "tried to allocate": the pages refused
    EXPECT_EQ(r.reserved_bytes, 0u);
    EXPECT_TRUE(r.expandable_segments);
    EXPECT_NE(std::string(e.what()).find("tried to allocate 60.00 MiB"), std::string::npos) << e.what();
  }
  MemoryStats st = s();
  EXPECT_EQ(st.num_ooms, 1);
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(cur(st.reserved_bytes), 0);
  alloc(40 * MiB);
  EXPECT_EQ(cur(s().reserved_bytes), mib(40));

  make(50 * MiB, "");
  alloc(45 * MiB);  // fixed segments: exactly 46 MiB (rounded to 2 MiB)
  EXPECT_EQ(cur(s().reserved_bytes), mib(46));
}

TEST_F(ExpandableSegments, OomAdviceDoesNotSuggestWhatIsAlreadyOn) {
  make(40 * MiB);
  const std::string what = oom_with_20_mib_free_in_5_mib_pieces();  // two full pages, then holes
  EXPECT_NE(what.find("already on"), std::string::npos) << what;
  EXPECT_EQ(what.find("expandable_segments:True"), std::string::npos) << what;
}

TEST_F(ExpandableSegments, BackedMemoryIsWritableWhenMappedAndGivenBackWhenUnmapped) {
  BudgetDeviceMemory device(64 * MiB, /*backed=*/true);
  {
    CachingAllocator a(device, AllocatorConfig::parse("expandable_segments:True"));
    auto* p = static_cast<unsigned char*>(a.allocate(25 * MiB));
    for (std::size_t i = 0; i < 25 * MiB; i += 4096) p[i] = static_cast<unsigned char>(i / 4096);
    for (std::size_t i = 0; i < 25 * MiB; i += 4096) ASSERT_EQ(p[i], static_cast<unsigned char>(i / 4096));
    EXPECT_EQ(device.free_bytes(), 24 * MiB);  // 64 - two 20 MiB pages
    a.free(p);
    a.empty_cache();
    EXPECT_EQ(device.free_bytes(), 64 * MiB);
    void* q = a.allocate(1 * MiB + 1);  // maps again: the memory is usable again
    static_cast<unsigned char*>(q)[0] = 7;
    EXPECT_EQ(device.free_bytes(), 44 * MiB);
  }
  EXPECT_EQ(device.free_bytes(), 64 * MiB);  // the destructor unmapped what was still mapped
}

TEST(ExpandableSegmentsConfig, ADeviceWithoutVirtualMemoryIsRefusedWithAMessage) {
  // A device that only knows whole segments (the DeviceMemory defaults).
  struct SegmentsOnly : DeviceMemory {
    void* allocate(std::size_t) override { return nullptr; }
    void release(void*, std::size_t) override {}
    std::size_t total_bytes() const override { return GiB; }
    std::size_t free_bytes() const override { return GiB; }
    std::string name() const override { return "segments-only"; }
  } device;
  try {
    CachingAllocator a(device, AllocatorConfig::parse("expandable_segments:True"));
    FAIL() << "expected AllocatorConfigError";
  } catch (const AllocatorConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("segments-only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expandable_segments:False"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainmem::test
