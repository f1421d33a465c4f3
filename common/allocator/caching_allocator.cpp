#include "common/allocator/caching_allocator.h"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "common/allocator/allocator_blocks.h"

#include "common/util/byte_size.h"
#include "common/util/checked_math.h"

namespace trainmem {

CachingAllocator::CachingAllocator(DeviceMemory& device, AllocatorConfig config)
    : device_(device),
      config_(config),
      small_pool_(std::make_unique<BlockPool>(true)),
      large_pool_(std::make_unique<BlockPool>(false)) {
  if (config_.expandable_segments && !device_.supports_virtual_memory())
    throw AllocatorConfigError("expandable_segments:True: " + device_.name() +
                               " cannot reserve address space and map pages into it; use expandable_segments:False");
}

CachingAllocator::~CachingAllocator() {
  // Tensors should be gone by now; whatever is left is given back to the device regardless.
  std::lock_guard<std::mutex> lock(mutex_);
  // Work on any stream may still use the memory (a block freed on the compute stream, another
  // stream's use of one): unmapping a page does not wait for it as cudaFree would, so wait for
  // the whole device first.
  device_.synchronize_all_streams();
  for (const PendingFree& p : pending_events_)
    if (!p.done) device_.destroy_event(p.event);
  release_all_expandable_segments();
  std::vector<Block*> heads;
  for (BlockPool* pool : {small_pool_.get(), large_pool_.get()})
    for (Block* b : pool->blocks)
      if (!b->prev) heads.push_back(b);
  for (auto& [address, b] : live_blocks_)
    if (!b->prev) heads.push_back(b);
  for (Block* head : heads) {
    std::size_t segment_size = 0;
    for (Block* b = head; b; b = b->next) segment_size += b->size;
    device_.release(reinterpret_cast<void*>(head->address), segment_size);
    for (Block* b = head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

CachingAllocator::BlockPool& CachingAllocator::pool_for(std::size_t rounded) {
  return is_small_request(rounded) ? *small_pool_ : *large_pool_;
}

// ------------------------------------------------------------------------------------------
// allocate
// ------------------------------------------------------------------------------------------

void* CachingAllocator::allocate(std::size_t bytes, MemoryCategory category, StreamId stream, std::string_view name) {
  if (bytes == 0) return nullptr;
  // The statistics are signed 64-bit sums (PyTorch's too): a request above 2^62 bytes could not be
  // counted, and rounding it up to a segment could wrap around. No device holds one anyway.
  checked_limit(bytes, "allocation request (bytes)");
  std::lock_guard<std::mutex> lock(mutex_);
  process_events_locked();

  const std::size_t rounded = round_request(bytes, config_);
  BlockPool& pool = pool_for(rounded);

  if (config_.backend == AllocatorConfig::Backend::raw) {
    // Raw mode: one device allocation per request, nothing cached, nothing retried.
    Block* block = alloc_segment(pool, rounded, stream, /*is_retry=*/false);
    if (!block) raise_oom(bytes, rounded, rounded, category, stream, name);
    return alloc_found_block(block, rounded, bytes, category, recorder_.name_index(name));
  }

  // 1. The cache: the smallest free block that fits, on this stream.
  Block* block = get_free_block(pool, rounded, stream);
  if (!block) {
    // 2. New memory from the device: a new segment (or, expandable, more pages mapped) -- with
    //    garbage_collection_threshold, after giving back long-unused cached segments if reserved
    //    memory is above the threshold.
    if (config_.garbage_collection_threshold > 0) garbage_collect_cached_blocks();
    block = new_device_memory(pool, rounded, stream, /*is_retry=*/false);
    // 3. The device refused: free cached oversize blocks (only with max_split_size), retry.
    if (!block && release_available_cached_blocks(pool, rounded, stream))
      block = new_device_memory(pool, rounded, stream, /*is_retry=*/false);
    // 4. Still refused: free every wholly free segment (empty_cache), retry once more.
    if (!block) {
      release_cached_blocks();
      block = new_device_memory(pool, rounded, stream, /*is_retry=*/true);
    }
    // 5. Out of memory. "Tried to allocate": the segment, or the pages, the device refused.
    if (!block)
      raise_oom(bytes, rounded, config_.expandable_segments ? refused_map_bytes_ : segment_size_for(rounded), category,
                stream, name);
  }
  return alloc_found_block(block, rounded, bytes, category, recorder_.name_index(name));
}

CachingAllocator::Block* CachingAllocator::get_free_block(BlockPool& pool, std::size_t rounded, StreamId stream) {
  if (config_.garbage_collection_threshold > 0) ++pool.free_block_searches;  // the cached blocks age
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  if (config_.expandable_segments) {
    // A block followed by unmapped pages can grow into them: for best fit its size is what it
    // can grow to. Walk on to bigger blocks while their grown size is smaller, so a request
    // leaves the growable end of a segment for the requests that need it (PyTorch's rule).
    auto grown_size = [](const Block* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
    for (auto next = std::next(it); next != pool.blocks.end() && (*next)->stream == stream &&
                                    grown_size(*next) < grown_size(*it);
         ++next)
      it = next;
  }
  const std::size_t found = (*it)->size;
  // An oversize block (>= max_split_size) is never split, so a request below the limit must not
  // take one: it would pin the whole block for a small tensor.
  if (rounded < config_.max_split_size && found >= config_.max_split_size) return nullptr;
  // An oversize request may take a bigger oversize block, but waste at most 20 MiB of it.
  if (rounded >= config_.max_split_size && found >= rounded + kLargeBuffer) return nullptr;
  Block* block = *it;
  pool.blocks.erase(it);
  return block;
}

// A miss: a new fixed segment, or with expandable segments, pages mapped into this stream's one.
CachingAllocator::Block* CachingAllocator::new_device_memory(BlockPool& pool, std::size_t rounded, StreamId stream,
                                                             bool is_retry) {
  if (config_.expandable_segments) return try_allocate_expandable_block(pool, rounded, stream, is_retry);
  return alloc_segment(pool, segment_size_for(rounded), stream, is_retry);
}

CachingAllocator::Block* CachingAllocator::alloc_segment(BlockPool& pool, std::size_t segment_size, StreamId stream,
                                                         bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  void* ptr = device_.allocate(segment_size);
  if (!ptr) return nullptr;

  auto* block = new Block;
  block->address = reinterpret_cast<std::uintptr_t>(ptr);
  block->size = segment_size;
  block->stream = stream;
  block->pool = &pool;
  for_pool_stats(pool, [&](std::size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(static_cast<std::int64_t>(segment_size));
  });
  if (segment_size >= config_.max_split_size) stats_.oversize_segments.increase(1);
  stats_.num_device_alloc += 1;
  recorder_.record(TraceAction::segment_alloc, block->address, segment_size, segment_size, MemoryCategory::other, stream);
  return block;
}

// Frees cached blocks >= max_split_size, only as many as the request needs: the smallest single
// oversize block that is big enough, else the largest ones until their sum is big enough.
// Returns true when enough was released to make a retry worthwhile.
bool CachingAllocator::release_available_cached_blocks(BlockPool& pool, std::size_t rounded, StreamId stream) {
  // Expandable segments are never released whole here (PyTorch skips them too): their free
  // pages are unmapped by release_cached_blocks.
  if (config_.max_split_size == kNoMaxSplit || config_.expandable_segments) return false;
  Block key;
  key.stream = stream;
  key.size = std::max(rounded, config_.max_split_size);
  auto it = pool.blocks.lower_bound(&key);
  auto releasable = [](const Block* b) { return !b->is_split(); };  // only whole segments go back
  if (it == pool.blocks.end() || (*it)->stream != stream || !releasable(*it)) {
    // No single block is big enough: release oversize blocks from the largest down.
    if (it == pool.blocks.begin()) return false;
    std::size_t released = 0;
    --it;  // the largest block below the key (if it is on this stream)
    while (released < key.size && (*it)->size >= config_.max_split_size && (*it)->stream == stream) {
      Block* current = *it;
      const bool is_first = (it == pool.blocks.begin());
      if (!is_first) --it;
      if (releasable(current)) {
        released += current->size;
        release_block(current);
      }
      if (is_first) break;
    }
    return released >= key.size;
  }
  release_block(*it);
  return true;
}

// What empty_cache() does: every free block that is a whole segment goes back to the device.
// In expandable segments, every wholly free page is unmapped, and a segment left with nothing
// mapped gives its address range back.
void CachingAllocator::release_cached_blocks() {
  synchronize_and_free_events();
  for (BlockPool* pool : {large_pool_.get(), small_pool_.get()}) {
    std::vector<Block*> to_unmap;  // unmapping changes the pool: collect first
    for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
      Block* block = *it++;
      if (block->segment) to_unmap.push_back(block);
      else if (!block->is_split()) release_block(block);
    }
    for (Block* block : to_unmap) unmap_block(block);
    release_unmapped_segments(*pool);
  }
}

bool CachingAllocator::should_split(const Block* block, std::size_t rounded) const {
  const std::size_t remaining = block->size - rounded;
  // Expandable segments split large blocks too: the rest of a page is never wasted (PyTorch's rule).
  if (block->pool->is_small || config_.expandable_segments) return remaining >= kMinBlockSize;
  return rounded < config_.max_split_size && remaining > kSmallSize;
}

void* CachingAllocator::alloc_found_block(Block* block, std::size_t rounded, std::size_t requested,
                                          MemoryCategory category, std::uint32_t name) {
  BlockPool& pool = *block->pool;
  const bool already_split = block->is_split();
  const bool split = config_.backend == AllocatorConfig::Backend::caching && should_split(block, rounded);

  if (split) {
    // [block: rounded bytes][remaining: the rest], the remainder going back to the pool.
    Block* remaining = block;
    block = new Block;
    block->address = remaining->address;
    block->size = rounded;
    block->stream = remaining->stream;
    block->pool = &pool;
    block->segment = remaining->segment;
    block->prev = remaining->prev;
    if (block->prev) block->prev->next = block;
    block->next = remaining;
    remaining->prev = block;
    remaining->address += rounded;
    remaining->size -= rounded;
    pool.cache(remaining);

    for_pool_stats(pool, [&](std::size_t t) {
      if (already_split) {
        // An inactive split block shrinks by `rounded` bytes.
        stats_.inactive_split_bytes[t].decrease(static_cast<std::int64_t>(block->size));
      } else {
        // A whole segment becomes split: its remainder is a new inactive split block.
        stats_.inactive_split_bytes[t].increase(static_cast<std::int64_t>(remaining->size));
        stats_.inactive_split[t].increase(1);
      }
    });
  } else if (already_split) {
    // An inactive split block becomes active whole.
    for_pool_stats(pool, [&](std::size_t t) {
      stats_.inactive_split_bytes[t].decrease(static_cast<std::int64_t>(block->size));
      stats_.inactive_split[t].decrease(1);
    });
  }

  hand_out(block, requested, category, name);
  return reinterpret_cast<void*>(block->address);
}

// The block becomes a caller's: live, and counted (alloc_found_block, restore_segment).
void CachingAllocator::hand_out(Block* block, std::size_t requested, MemoryCategory category, std::uint32_t name) {
  block->allocated = true;
  block->requested_size = requested;
  block->category = category;
  block->name = name;
  live_blocks_[block->address] = block;

  for_pool_stats(*block->pool, [&](std::size_t t) {
    stats_.allocation[t].increase(1);
    stats_.allocated_bytes[t].increase(static_cast<std::int64_t>(block->size));
    stats_.active[t].increase(1);
    stats_.active_bytes[t].increase(static_cast<std::int64_t>(block->size));
    stats_.requested_bytes[t].increase(static_cast<std::int64_t>(requested));
  });
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.increase(1);
  stats_.by_category[index_of(category)].increase(static_cast<std::int64_t>(block->size));
  recorder_.record(TraceAction::alloc, block->address, requested, block->size, category, block->stream, name);
}

void CachingAllocator::raise_oom(std::size_t requested, std::size_t rounded, std::size_t segment_size,
                                 MemoryCategory category, StreamId stream, std::string_view name) {
  // The host, not the device, refused (the CPU backend under a process limit): not an OOM of the
  // device, and its advice would not help.
  if (std::string host = device_.host_refusal(); !host.empty()) throw HostMemoryError(std::move(host));
  stats_.num_ooms += 1;
  recorder_.record(TraceAction::oom, 0, rounded, segment_size, category, stream, recorder_.name_index(name));
  OomReport report;
  report.device = device_.name();
  report.category = category;
  report.tensor = std::string(name);
  report.requested_bytes = requested;
  report.rounded_bytes = rounded;
  report.device_request_bytes = segment_size;
  report.capacity_bytes = device_.total_bytes();
  report.device_free_bytes = device_.free_bytes();
  report.allocated_bytes = static_cast<std::size_t>(stats_.allocated_bytes[0].current);
  report.reserved_bytes = static_cast<std::size_t>(stats_.reserved_bytes[0].current);
  report.largest_free_block = fragmentation_locked().largest_free_block;
  report.expandable_segments = config_.expandable_segments;
  for (MemoryCategory c : kAllMemoryCategories)
    report.category_bytes[index_of(c)] = stats_.by_category[index_of(c)].current;
  report.advice = oom_advisor_ ? oom_advisor_(report) : default_oom_advice(report);
  throw OutOfMemoryError(std::move(report));
}

// ------------------------------------------------------------------------------------------
// free
// ------------------------------------------------------------------------------------------

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = free_requested(ptr, "free");
  if (!block->stream_uses.empty()) {
    insert_events(block);  // stays active until the other streams are done with it
  } else {
    free_block(block);
  }
}

void CachingAllocator::free_after(void* ptr, std::function<bool()> other_stream_done) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = free_requested(ptr, "free_after");
  block->event_count += 1;
  pending_events_.push_back({nullptr, block, std::move(other_stream_done)});
}

// The caller's free: the block no longer allocated (its statistics and the recorder's
// free_requested), but still active until free_block.
CachingAllocator::Block* CachingAllocator::free_requested(void* ptr, const char* what) {
  auto it = live_blocks_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == live_blocks_.end() || !it->second->allocated)
    throw std::invalid_argument(std::string(what) + (it == live_blocks_.end() ? ": pointer was not allocated by this allocator"
                                                                              : ": block freed twice"));
  Block* block = it->second;
  block->allocated = false;
  for_pool_stats(*block->pool, [&](std::size_t t) {
    stats_.allocation[t].decrease(1);
    stats_.allocated_bytes[t].decrease(static_cast<std::int64_t>(block->size));
  });
  if (block->size >= config_.max_split_size) stats_.oversize_allocations.decrease(1);
  stats_.by_category[index_of(block->category)].decrease(static_cast<std::int64_t>(block->size));
  recorder_.record(TraceAction::free_requested, block->address, block->requested_size, block->size, block->category,
                   block->stream, block->name);
  return block;
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_blocks_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == live_blocks_.end() || !it->second->allocated)
    throw std::invalid_argument("record_stream: pointer is not a live allocation of this allocator");
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

void CachingAllocator::insert_events(Block* block) {
  for (StreamId s : block->stream_uses) {
    EventHandle event = device_.record_event(s);
    block->event_count += 1;
    pending_events_.push_back({event, block, {}});
  }
  block->stream_uses.clear();
}

void CachingAllocator::process_events() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events_locked();
}

void CachingAllocator::process_events_locked() {
  for (auto it = pending_events_.begin(); it != pending_events_.end();) {
    Block* block = it->block;
    if (it->done ? !it->done() : !device_.event_completed(it->event)) {
      ++it;
      continue;
    }
    if (!it->done) device_.destroy_event(it->event);
    it = pending_events_.erase(it);
    if (--block->event_count == 0) free_block(block);
  }
}

void CachingAllocator::synchronize_and_free_events() {
  stats_.num_sync_all_streams += 1;
  auto pending = std::move(pending_events_);
  pending_events_.clear();
  for (const PendingFree& p : pending) {
    if (!p.done) {
      device_.synchronize_event(p.event);
      device_.destroy_event(p.event);
    }
    if (--p.block->event_count == 0) free_block(p.block);
  }
}

// The block is no longer used by anyone: merge it with free neighbours and cache it
// (or, in raw mode, give it straight back to the device).
void CachingAllocator::free_block(Block* block) {
  BlockPool& pool = *block->pool;
  const std::size_t original_size = block->size;
  const std::size_t requested = block->requested_size;
  live_blocks_.erase(block->address);
  recorder_.record(TraceAction::free_completed, block->address, requested, original_size, block->category,
                   block->stream, block->name);
  block->name = 0;

  // Merging a free split neighbour removes it from inactive_split; the merged block joins it if
  // it is still part of a split segment.
  std::int64_t inactive_split_blocks_change = 0;
  std::int64_t inactive_split_bytes_change = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    const std::size_t subsumed = try_merge_blocks(block, neighbour, pool);
    if (subsumed > 0) {
      inactive_split_blocks_change -= 1;
      inactive_split_bytes_change -= static_cast<std::int64_t>(subsumed);
    }
  }
  if (block->is_split()) {
    inactive_split_blocks_change += 1;
    inactive_split_bytes_change += static_cast<std::int64_t>(block->size);
  }
  block->requested_size = 0;
  block->category = MemoryCategory::other;

  for_pool_stats(pool, [&](std::size_t t) {
    if (inactive_split_blocks_change > 0) stats_.inactive_split[t].increase(inactive_split_blocks_change);
    if (inactive_split_blocks_change < 0) stats_.inactive_split[t].decrease(-inactive_split_blocks_change);
    if (inactive_split_bytes_change > 0) stats_.inactive_split_bytes[t].increase(inactive_split_bytes_change);
    if (inactive_split_bytes_change < 0) stats_.inactive_split_bytes[t].decrease(-inactive_split_bytes_change);
    stats_.active[t].decrease(1);
    stats_.active_bytes[t].decrease(static_cast<std::int64_t>(original_size));
    stats_.requested_bytes[t].decrease(static_cast<std::int64_t>(requested));
  });

  pool.cache(block);
  if (config_.backend == AllocatorConfig::Backend::raw) release_block(block);
}

// Merges `src` into `dst` if `src` is a free neighbour in the same state (mapped, or unmapped
// stretches of an expandable segment); returns the bytes merged (0 if none).
std::size_t CachingAllocator::try_merge_blocks(Block* dst, Block* src, BlockPool& pool) {
  if (!src || src->allocated || src->event_count > 0 || src->mapped != dst->mapped) return 0;
  if (dst->prev == src) {  // [src][dst] -> [dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {  // [dst][src] -> [dst]
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  const std::size_t subsumed = src->size;
  dst->size += subsumed;
  if (src->mapped) pool.blocks.erase(src);
  else pool.unmapped.erase(src);
  delete src;
  return subsumed;
}

// Gives a whole-segment free block back to the device.
void CachingAllocator::release_block(Block* block) {
  BlockPool& pool = *block->pool;
  device_.release(reinterpret_cast<void*>(block->address), block->size);
  for_pool_stats(pool, [&](std::size_t t) {
    stats_.segment[t].decrease(1);
    stats_.reserved_bytes[t].decrease(static_cast<std::int64_t>(block->size));
  });
  if (block->size >= config_.max_split_size) stats_.oversize_segments.decrease(1);
  stats_.num_device_free += 1;
  recorder_.record(TraceAction::segment_free, block->address, block->size, block->size, MemoryCategory::other,
                   block->stream);
  pool.blocks.erase(block);
  delete block;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Recorded (then the segment_free events it causes), so that a replay of the trace releases too.
  recorder_.record(TraceAction::empty_cache, 0, 0, 0, MemoryCategory::other, kDefaultStream);
  release_cached_blocks();
}

// ------------------------------------------------------------------------------------------
// statistics and snapshots
// ------------------------------------------------------------------------------------------

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset_peak();
}

void CachingAllocator::set_oom_advisor(OomAdvisor advisor) {
  std::lock_guard<std::mutex> lock(mutex_);
  oom_advisor_ = std::move(advisor);
}

FragmentationInfo CachingAllocator::fragmentation() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fragmentation_locked();
}

FragmentationInfo CachingAllocator::fragmentation_locked() const {
  FragmentationInfo info;
  for (const auto& [address, b] : live_blocks_) {
    if (b->allocated) info.internal_free_bytes += b->size - b->requested_size;
    else info.awaiting_free_bytes += b->size;
  }
  for (const BlockPool* pool : {small_pool_.get(), large_pool_.get()}) {
    for (const Block* b : pool->blocks) {
      info.external_free_bytes += b->size;
      info.largest_free_block = std::max(info.largest_free_block, b->size);
    }
  }
  return info;
}

std::vector<SegmentSnapshot> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Block*> heads;
  for (const BlockPool* pool : {small_pool_.get(), large_pool_.get()}) {
    for (const Block* b : pool->blocks)
      if (!b->prev) heads.push_back(b);
    for (const Block* b : pool->unmapped)
      if (!b->prev) heads.push_back(b);
  }
  for (const auto& [address, b] : live_blocks_)
    if (!b->prev) heads.push_back(b);
  std::sort(heads.begin(), heads.end(), [](const Block* a, const Block* b) { return a->address < b->address; });

  // A fixed segment is one SegmentSnapshot. An expandable segment is one per mapped range, as
  // PyTorch's snapshot reports them: its unmapped stretches hold no memory.
  std::vector<SegmentSnapshot> segments;
  for (const Block* head : heads) {
    const Block* b = head;
    while (b) {
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      SegmentSnapshot s;
      s.address = b->address;
      s.stream = b->stream;
      s.is_small = b->pool->is_small;
      s.is_expandable = b->segment != nullptr;
      for (; b && b->mapped; b = b->next) {
        BlockSnapshot bs;
        bs.address = b->address;
        bs.size = b->size;
        bs.requested_size = b->requested_size;
        bs.category = b->category;
        const bool live = live_blocks_.count(b->address) > 0;
        bs.state = b->allocated ? BlockSnapshot::State::active_allocated
                   : live       ? BlockSnapshot::State::active_awaiting_free
                                : BlockSnapshot::State::inactive;
        s.total_size += b->size;
        if (b->allocated) s.allocated_size += b->size;
        if (live) {
          s.active_size += b->size;
          s.requested_size += b->requested_size;
        }
        s.blocks.push_back(bs);
      }
      segments.push_back(std::move(s));
    }
  }
  return segments;
}

}  // namespace trainmem
