// The caching allocator: PyTorch's CUDA caching allocator policy, written to be read.
//
// Asking a device for memory (cudaMalloc) is slow and synchronizes the GPU, so the allocator asks
// for big *segments* and carves *blocks* out of them. A freed block is not returned to the
// device: it goes back to a *pool* of cached free blocks for the next request of that stream.
//
//   request n bytes -> rounded = round_size(n)                  (multiple of 512)
//                   -> pool    = small if rounded <= 1 MiB else large
//                   -> the smallest cached free block >= rounded on this stream (best fit)
//                   -> else a new segment of segment_size_for(rounded) from the device
//                      -> if the device refuses: release cached oversize blocks, retry;
//                         release every wholly free segment, retry; else OutOfMemoryError
//                   -> split the block if the remainder is worth keeping:
//                        small pool: remainder >= 512 B
//                        large pool: remainder > 1 MiB and rounded < max_split_size
//   free           -> the block is merged with free neighbours in its segment and cached
//
// With expandable_segments:True, step "a new segment" becomes "map more pages": each stream has
// one segment per pool, a reserved address range into which pages (2 MiB small, 20 MiB large) are
// mapped at the end as it grows, so a bigger request extends the free block at the end instead of
// needing a new segment; large blocks are split down to 512 B remainders; empty_cache (and the
// OOM retry) unmaps every wholly free page. See README "Expandable segments" for the rules.
//
// Every statistic is named and counted as PyTorch counts it (see memory_stats.h), and every
// allocation carries a MemoryCategory. The same code runs on a GPU (CudaDeviceMemory), on the CPU
// (BudgetDeviceMemory, a budget that emulates a card) and in the trace replayer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/allocator/allocator_config.h"
#include "common/allocator/device_memory.h"
#include "common/allocator/memory_category.h"
#include "common/allocator/memory_recorder.h"
#include "common/allocator/memory_stats.h"
#include "common/allocator/out_of_memory.h"

namespace trainmem {

// Beyond PyTorch: how the reserved bytes split up right now.
//   allocated_bytes = requested bytes of live blocks + internal_free_bytes
//   reserved_bytes  = allocated_bytes + awaiting_free_bytes + external_free_bytes
struct FragmentationInfo {
  std::size_t internal_free_bytes = 0;   // rounding waste inside live blocks (block size - requested)
  std::size_t external_free_bytes = 0;   // cached free blocks: the gaps between and after live blocks
  std::size_t awaiting_free_bytes = 0;   // freed blocks still in use by another stream
  std::size_t largest_free_block = 0;    // the biggest request the cache could serve without the device
};

// A snapshot of one segment and its blocks (the shape of torch.cuda.memory_snapshot()).
struct BlockSnapshot {
  enum class State { active_allocated, active_awaiting_free, inactive };
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;  // 0 for inactive blocks
  State state = State::inactive;
  MemoryCategory category = MemoryCategory::other;
};

struct SegmentSnapshot {
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  StreamId stream = kDefaultStream;
  bool is_small = false;  // segment_type "small" or "large"
  bool is_expandable = false;  // a mapped range of an expandable segment (as PyTorch reports them)
  std::size_t allocated_size = 0;
  std::size_t active_size = 0;
  std::size_t requested_size = 0;
  std::vector<BlockSnapshot> blocks;  // in address order, tiling the segment exactly
};

class CachingAllocator {
 public:
  // `device` must outlive the allocator.
  CachingAllocator(DeviceMemory& device, AllocatorConfig config = {});
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream`. Returns nullptr for 0 bytes (nothing is
  // allocated, as in PyTorch). Throws OutOfMemoryError when the device cannot serve it. `name`
  // (a tensor's, e.g. "h3.attn.probs") goes into the recorder's events and the OOM report.
  void* allocate(std::size_t bytes, MemoryCategory category = MemoryCategory::other,
                 StreamId stream = kDefaultStream, std::string_view name = {});
  // Returns a block to the cache. Throws std::invalid_argument for a pointer this allocator did
  // not hand out, or one freed twice.
  void free(void* ptr);
  // The block will also be used on `stream`: on free, it is reused only after that stream's
  // queued work is done (PyTorch's Tensor.record_stream).
  void record_stream(void* ptr, StreamId stream);
  // A free of a block another stream still uses, as a replayed trace records one (a PyTorch
  // snapshot's free_requested whose free_completed comes later): the block is reused once
  // `other_stream_done()` says so (the replay reached the trace's free_completed), or at a
  // synchronization (empty_cache, the out-of-memory retry), as a device event would be.
  void free_after(void* ptr, std::function<bool()> other_stream_done);

  // Gives every wholly free segment back to the device (torch.cuda.empty_cache). Segments that
  // hold a live block stay, split as they are.
  void empty_cache();
  // Completes frees whose cross-stream events have finished.
  void process_events();

  // Puts back a segment as it stood before a recorded trace began (restore_segment.cpp): a
  // replay of a PyTorch snapshot starts where the real allocator stood, with segments taken and
  // blocks live before recording. `layout` is one fixed segment (not expandable): its blocks in
  // address order tiling total_size exactly, each active_allocated (live: requested_size and
  // category kept) or inactive (cached free; two free neighbours are one block, so they may not
  // touch). The segment comes from the device like any other (device_.allocate(total_size)), so
  // the block addresses are the device's plus the layout's offsets; returned: the live blocks'
  // pointers in layout order. Counted in every statistic as if allocated before the first event,
  // except num_device_alloc (what the replay's own trace asked of the device). Throws
  // std::invalid_argument for a layout the allocator could not have made, OutOfMemoryError when
  // the device has no room for it.
  std::vector<void*> restore_segment(const SegmentSnapshot& layout);

  MemoryStats stats() const;
  void reset_peak_stats();
  FragmentationInfo fragmentation() const;
  std::vector<SegmentSnapshot> snapshot() const;

  const AllocatorConfig& config() const { return config_; }
  DeviceMemory& device() { return device_; }
  const DeviceMemory& device() const { return device_; }
  MemoryRecorder& recorder() { return recorder_; }
  const MemoryRecorder& recorder() const { return recorder_; }

  // Lets a later layer (the estimator) give better OOM advice than the generic one.
  using OomAdvisor = std::function<std::vector<std::string>(const OomReport&)>;
  void set_oom_advisor(OomAdvisor advisor);

 private:
  struct Block;
  struct BlockPool;
  struct ExpandableSegment;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct AddressOrder {
    bool operator()(const Block* a, const Block* b) const;
  };

  // Allocation steps, in the order allocate() uses them (all called with mutex_ held).
  BlockPool& pool_for(std::size_t rounded);
  Block* get_free_block(BlockPool& pool, std::size_t rounded, StreamId stream);
  Block* alloc_segment(BlockPool& pool, std::size_t segment_size, StreamId stream, bool is_retry);
  Block* new_device_memory(BlockPool& pool, std::size_t rounded, StreamId stream, bool is_retry);
  bool release_available_cached_blocks(BlockPool& pool, std::size_t rounded, StreamId stream);
  void release_cached_blocks();
  void garbage_collect_cached_blocks();  // garbage_collection.cpp
  bool should_split(const Block* block, std::size_t rounded) const;
  void* alloc_found_block(Block* block, std::size_t rounded, std::size_t requested, MemoryCategory category,
                          std::uint32_t name);
  void hand_out(Block* block, std::size_t requested, MemoryCategory category, std::uint32_t name);
  [[noreturn]] void raise_oom(std::size_t requested, std::size_t rounded, std::size_t segment_size,
                              MemoryCategory category, StreamId stream, std::string_view name);

  // Expandable segments (expandable_segments.cpp): find room, map pages, unmap pages, release.
  Block* try_allocate_expandable_block(BlockPool& pool, std::size_t rounded, StreamId stream, bool is_retry);
  Block* find_expandable_block(BlockPool& pool, std::size_t rounded, StreamId stream);
  bool map_block(Block* to_map, std::size_t bytes);
  void unmap_block(Block* block);
  void release_unmapped_segments(BlockPool& pool);
  void release_expandable_segment(Block* whole_segment);
  void release_all_expandable_segments();  // destructor only
  // What an expandable segment's layout contributes to the statistics: its mapped ranges (each is
  // one "segment", as PyTorch's snapshot reports them) and its inactive split blocks. Mapping and
  // unmapping change the layout; the statistics follow by recounting the one segment.
  struct SegmentShape {
    std::int64_t mapped_ranges = 0, inactive_split_blocks = 0, inactive_split_bytes = 0;
  };
  // A map or unmap changes the shape only near the block it works on: see shape_window.
  struct ShapeWindow {
    const Block* first = nullptr;  // nullptr: from the segment's first block
    const Block* last = nullptr;   // nullptr: to the segment's last block
  };
  static ShapeWindow shape_window(const Block* block);
  static SegmentShape shape_of(const Block* block, const ShapeWindow& window);
  void apply_shape_change(const BlockPool& pool, const SegmentShape& before, const SegmentShape& after);

  // Freeing steps.
  void insert_events(Block* block);
  Block* free_requested(void* ptr, const char* what);  // free and free_after: the caller gives the block up
  void free_block(Block* block);
  std::size_t try_merge_blocks(Block* dst, Block* src, BlockPool& pool);
  void release_block(Block* block);
  void synchronize_and_free_events();
  void process_events_locked();

  // The statistics of the pool a block belongs to: "all" and its own pool.
  template <typename F>
  void for_pool_stats(const BlockPool& pool, F&& f);
  FragmentationInfo fragmentation_locked() const;

  DeviceMemory& device_;
  AllocatorConfig config_;
  mutable std::mutex mutex_;
  std::unique_ptr<BlockPool> small_pool_;
  std::unique_ptr<BlockPool> large_pool_;
  std::unordered_map<std::uintptr_t, Block*> live_blocks_;  // allocated or awaiting free
  std::vector<std::unique_ptr<ExpandableSegment>> expandable_segments_;
  std::size_t refused_map_bytes_ = 0;  // expandable: the pages the device last refused (for the OOM report)
  // Frees waiting on other streams: a device event each (insert_events), or a replay's own
  // completion (free_after: `done` set, no event).
  struct PendingFree {
    EventHandle event = nullptr;
    Block* block = nullptr;
    std::function<bool()> done;
  };
  std::vector<PendingFree> pending_events_;
  MemoryStats stats_;
  MemoryRecorder recorder_;
  OomAdvisor oom_advisor_;
};

}  // namespace trainmem
