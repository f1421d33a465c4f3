// Streams: a cached block serves only requests of the stream it was allocated on, and a block
// used on another stream (record_stream) is reused only after that stream's work has finished.
// A device whose events complete only when the test says so plays the GPU.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/host_device_memory.h"
#include "common/tests/allocator_test_util.h"

namespace trainmem::test {
namespace {

// Events are ints; an event is complete when its stream has been "synchronized" by the test.
class ManualEventDevice : public BudgetDeviceMemory {
 public:
  ManualEventDevice() : BudgetDeviceMemory(GiB, /*backed=*/false) {}
  EventHandle record_event(StreamId stream) override {
    events_.push_back(std::make_unique<Event>(Event{stream, false}));
    return events_.back().get();
  }
  bool event_completed(EventHandle e) override { return static_cast<Event*>(e)->done; }
  void synchronize_event(EventHandle e) override { static_cast<Event*>(e)->done = true; }
  void destroy_event(EventHandle e) override { destroyed_.insert(e); }
  void finish_stream(StreamId stream) {
    for (auto& e : events_)
      if (e->stream == stream) e->done = true;
  }
  std::size_t events_destroyed() const { return destroyed_.size(); }

 private:
  struct Event {
    StreamId stream;
    bool done;
  };
  std::vector<std::unique_ptr<Event>> events_;
  std::set<EventHandle> destroyed_;
};

constexpr StreamId kStreamA = 0x1000, kStreamB = 0x2000;

TEST(AllocatorStreams, CachedBlocksServeOnlyTheirOwnStream) {
  ManualEventDevice device;
  CachingAllocator a(device);
  void* on_a = a.allocate(4 * MiB, MemoryCategory::other, kStreamA);
  a.free(on_a);
  void* on_b = a.allocate(4 * MiB, MemoryCategory::other, kStreamB);
  EXPECT_NE(on_b, on_a);  // the cached block belongs to stream A
  EXPECT_EQ(a.stats().num_device_alloc, 2);
  EXPECT_EQ(a.allocate(4 * MiB, MemoryCategory::other, kStreamA), on_a);
  EXPECT_TRUE(check_invariants(a));
}

TEST(AllocatorStreams, RecordStreamDefersReuseUntilTheOtherStreamFinishes) {
  ManualEventDevice device;
  CachingAllocator a(device);
  void* p = a.allocate(1000, MemoryCategory::activations, kStreamA);
  a.record_stream(p, kStreamB);  // stream B reads it too
  a.free(p);

  // Freed by the program, still in use on B: no longer allocated, still active.
  MemoryStats s = a.stats();
  EXPECT_EQ(cur(s.allocated_bytes), 0);
  EXPECT_EQ(cur(s.active_bytes), 1024);
  EXPECT_EQ(cur(s.requested_bytes), 1000);
  EXPECT_EQ(a.fragmentation().awaiting_free_bytes, 1024u);
  const auto segments = a.snapshot();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].blocks[0].state, BlockSnapshot::State::active_awaiting_free);
  EXPECT_TRUE(check_invariants(a));

  void* q = a.allocate(1000, MemoryCategory::activations, kStreamA);
  EXPECT_NE(q, p);  // p is not reusable yet
  a.free(q);

  device.finish_stream(kStreamB);
  a.process_events();
  s = a.stats();
  EXPECT_EQ(cur(s.active_bytes), 0);
  EXPECT_EQ(device.events_destroyed(), 1u);
  EXPECT_EQ(a.allocate(1000, MemoryCategory::activations, kStreamA), p);  // now it is
  EXPECT_TRUE(check_invariants(a));
}

TEST(AllocatorStreams, EmptyCacheWaitsForPendingFreesAndReleasesThem) {
  ManualEventDevice device;
  CachingAllocator a(device);
  void* p = a.allocate(30 * MiB, MemoryCategory::other, kStreamA);
  a.record_stream(p, kStreamB);
  a.free(p);
  EXPECT_EQ(cur(a.stats().reserved_bytes), mib(30));
  a.empty_cache();  // synchronizes with B, completes the free, releases the segment
  const MemoryStats s = a.stats();
  EXPECT_EQ(cur(s.reserved_bytes), 0);
  EXPECT_EQ(cur(s.active_bytes), 0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_device_free, 1);
  EXPECT_TRUE(check_invariants(a));
}

TEST(AllocatorStreams, RecordingTheAllocatingStreamIsANoOp) {
  ManualEventDevice device;
  CachingAllocator a(device);
  void* p = a.allocate(1000, MemoryCategory::other, kStreamA);
  a.record_stream(p, kStreamA);
  a.free(p);
  EXPECT_EQ(cur(a.stats().active_bytes), 0);
  EXPECT_THROW(a.record_stream(p, kStreamB), std::invalid_argument);  // p is no longer live
}

// Teardown gives every page back while work on any stream may still use it (cuMemUnmap, unlike
// cudaFree, does not wait): a page unmapped before the streams that used it have finished is
// memory pulled from under a running kernel. This device knows which streams were waited for.
class TeardownWatchingDevice : public BudgetDeviceMemory {
 public:
  TeardownWatchingDevice() : BudgetDeviceMemory(GiB, /*backed=*/false) {}
  void unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId stream) override {
    finished_.insert(stream);  // what unmap_pages(stream) waits for
    unmapped_while_busy_ += !(all_finished_ || (finished_.count(kStreamA) && finished_.count(kStreamB)));
    BudgetDeviceMemory::unmap_pages(ptr, bytes, page_bytes, stream);
  }
  void synchronize_all_streams() override { all_finished_ = true; }
  int unmapped_while_busy() const { return unmapped_while_busy_; }

 private:
  std::set<StreamId> finished_;
  bool all_finished_ = false;
  int unmapped_while_busy_ = 0;
};

TEST(AllocatorStreams, TeardownWaitsForEveryStreamBeforeUnmapping) {
  TeardownWatchingDevice device;
  {
    CachingAllocator a(device, AllocatorConfig::parse("expandable_segments:True"));
    void* on_a = a.allocate(5 * MiB, MemoryCategory::other, kStreamA);  // stream A's own segment
    void* used_on_b = a.allocate(5 * MiB, MemoryCategory::other, kDefaultStream);
    a.record_stream(used_on_b, kStreamB);  // still used on B when the allocator goes
    a.free(on_a);
  }  // teardown: every mapped page unmapped
  EXPECT_EQ(device.unmapped_while_busy(), 0) << "pages were unmapped before streams A and B had finished";
}

}  // namespace
}  // namespace trainmem::test
