// Expandable segments (expandable_segments:True): PyTorch's ExpandableSegment
// (c10/cuda/CUDACachingAllocator.cpp), rule for rule where it has one.
//
// Fixed segments fragment when requests grow: a freed 12 MiB segment cannot hold the next 14 MiB
// request, so a new segment is taken and the old one sits cached. An expandable segment is one
// reserved address range per (stream, pool) into which memory is mapped page by page, so the free
// block at its end simply grows.
//
//   segment   one per (stream, pool): address space for capacity + capacity/8 (PyTorch: 1 1/8 of
//             the card), no memory behind it until pages are mapped; another one only when a
//             request finds no room in the first
//   page      2 MiB (small pool) or 20 MiB (large pool): the unit of mapping and unmapping
//   miss      the lowest place in this stream's segments where a free block followed by unmapped
//             pages (or unmapped pages alone) has room; map what is missing right there:
//             pages mapped = ceil(missing bytes / page)
//   split     a found block is split whenever the rest is >= 512 B, in both pools
//   free      as always: merge with free mapped neighbours and stay cached; nothing is unmapped
//   release   empty_cache and the OOM retry: every cached free block gives back the whole pages
//             inside it; a segment with nothing mapped any more gives back its address range
//   stats     reserved_bytes = mapped bytes; segment = mapped ranges (one per contiguous mapped
//             stretch, as the snapshot shows them); num_device_alloc / num_device_free = map /
//             unmap calls; the trace records segment_map / segment_unmap
#include <algorithm>
#include <memory>
#include <vector>

#include "common/allocator/allocator_blocks.h"
#include "common/allocator/caching_allocator.h"

namespace trainmem {

namespace {
std::size_t round_up(std::size_t n, std::size_t unit) { return (n + unit - 1) / unit * unit; }
std::size_t round_down(std::size_t n, std::size_t unit) { return n / unit * unit; }
void* as_pointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

void change(Stat& stat, std::int64_t delta) {
  if (delta > 0) stat.increase(delta);
  if (delta < 0) stat.decrease(-delta);
}
}  // namespace

// A miss with expandable segments: find room, map the pages it lacks, hand out the free block.
CachingAllocator::Block* CachingAllocator::try_allocate_expandable_block(BlockPool& pool, std::size_t rounded,
                                                                         StreamId stream, bool is_retry) {
  if (is_retry) stats_.num_alloc_retries += 1;
  refused_map_bytes_ = round_up(rounded, expandable_page_size(pool.is_small));  // map_block refines it
  Block* candidate = find_expandable_block(pool, rounded, stream);
  if (!candidate) return nullptr;
  // The candidate starts a run of free and unmapped stretches with room for the request:
  //   [unmapped ...]   or   [free][unmapped][free?]...
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, rounded))) return nullptr;
  while (candidate->size < rounded) {
    // [free, too small][unmapped]: map what is missing at the free block's end; map_block merges
    // the two, and the merged block is the newly mapped one.
    Block* unmapped = candidate->next;
    if (!map_block(unmapped, std::min(rounded - candidate->size, unmapped->size))) return nullptr;
    candidate = unmapped;
  }
  pool.blocks.erase(candidate);
  return candidate;
}

// The lowest stretch of this stream's segments (in the pool) that can hold `rounded` bytes once
// mapped: an unmapped stretch, or the free block just before one, followed by enough free and
// unmapped bytes. If there is none, a new segment (address space only).
CachingAllocator::Block* CachingAllocator::find_expandable_block(BlockPool& pool, std::size_t rounded,
                                                                 StreamId stream) {
  // Free (cached, not awaiting another stream) or unmapped: a block the request may use.
  auto usable = [](const Block* b) { return b != nullptr && !b->allocated && b->event_count == 0; };
  auto has_room = [&](const Block* b) {
    std::size_t bytes = 0;
    for (; bytes < rounded && usable(b); b = b->next) bytes += b->size;
    return bytes >= rounded;
  };
  Block key;
  key.stream = stream;
  key.address = 0;
  for (auto it = pool.unmapped.lower_bound(&key); it != pool.unmapped.end() && (*it)->stream == stream; ++it) {
    Block* candidate = *it;
    if (usable(candidate->prev)) candidate = candidate->prev;  // a free block grows into the pages after it
    if (has_room(candidate)) return candidate;
  }

  // A new segment for this stream and pool: 1 1/8 of the capacity, so that pages unmapped in the
  // middle can be mapped again at the end while the rest stays mapped.
  const std::size_t page = expandable_page_size(pool.is_small);
  const std::size_t capacity = device_.total_bytes();
  const std::size_t reserved = round_up(capacity + capacity / 8, page);
  if (reserved < rounded) return nullptr;  // more than the device has: cannot be mapped anyway
  void* address = device_.reserve_address_range(reserved);
  if (!address) return nullptr;
  auto segment = std::make_unique<ExpandableSegment>();
  segment->address = reinterpret_cast<std::uintptr_t>(address);
  segment->reserved_bytes = reserved;
  segment->page_bytes = page;
  segment->stream = stream;
  segment->pool = &pool;

  auto* whole = new Block;
  whole->address = segment->address;
  whole->size = reserved;
  whole->stream = stream;
  whole->pool = &pool;
  whole->mapped = false;
  whole->segment = segment.get();
  pool.unmapped.insert(whole);
  expandable_segments_.push_back(std::move(segment));
  return whole;
}

// Maps whole pages at the start of the unmapped stretch `to_map`, enough for `bytes`:
//   [to_map: unmapped] -> [to_map: mapped, ceil(bytes / page) pages][rest: unmapped]
// then merges it with free mapped neighbours. False (nothing changed) when the device refuses.
bool CachingAllocator::map_block(Block* to_map, std::size_t bytes) {
  BlockPool& pool = *to_map->pool;
  const ExpandableSegment& segment = *to_map->segment;
  const std::size_t map_bytes = round_up(bytes, segment.page_bytes);  // <= to_map->size: stretches are whole pages
  const std::uintptr_t address = to_map->address;
  const ShapeWindow window = shape_window(to_map);
  const SegmentShape before = shape_of(to_map, window);
  if (!device_.map_pages(as_pointer(address), map_bytes, segment.page_bytes)) {
    refused_map_bytes_ = map_bytes;
    return false;
  }

  pool.unmapped.erase(to_map);
  to_map->mapped = true;
  if (map_bytes < to_map->size) {
    auto* rest = new Block;
    rest->address = address + map_bytes;
    rest->size = to_map->size - map_bytes;
    rest->stream = to_map->stream;
    rest->pool = &pool;
    rest->segment = to_map->segment;
    rest->mapped = false;
    rest->prev = to_map;
    rest->next = to_map->next;
    if (rest->next) rest->next->prev = rest;
    to_map->next = rest;
    to_map->size = map_bytes;
    pool.unmapped.insert(rest);
  }
  try_merge_blocks(to_map, to_map->prev, pool);
  try_merge_blocks(to_map, to_map->next, pool);
  pool.cache(to_map);

  for_pool_stats(pool, [&](std::size_t t) { stats_.reserved_bytes[t].increase(static_cast<std::int64_t>(map_bytes)); });
  stats_.num_device_alloc += 1;
  apply_shape_change(pool, before, shape_of(to_map, window));
  recorder_.record(TraceAction::segment_map, address, map_bytes, map_bytes, MemoryCategory::other, to_map->stream);
  return true;
}

// Gives back the whole pages inside the cached free block `block`:
//   [block: free] -> [free part before the first page boundary][unmapped pages][free part after]
// A block that holds no whole page stays as it is.
void CachingAllocator::unmap_block(Block* block) {
  BlockPool& pool = *block->pool;
  const ExpandableSegment& segment = *block->segment;
  const std::uintptr_t block_end = block->address + block->size;
  const std::uintptr_t begin = segment.address + round_up(block->address - segment.address, segment.page_bytes);
  const std::uintptr_t end = segment.address + round_down(block_end - segment.address, segment.page_bytes);
  if (end <= begin) return;  // no whole page is free
  const ShapeWindow window = shape_window(block);
  const SegmentShape before = shape_of(block, window);
  device_.unmap_pages(as_pointer(begin), end - begin, segment.page_bytes, block->stream);

  pool.blocks.erase(block);
  auto make_free_part = [&](std::uintptr_t address, std::size_t size) {
    auto* part = new Block;
    part->address = address;
    part->size = size;
    part->stream = block->stream;
    part->pool = &pool;
    part->segment = block->segment;
    return part;
  };
  if (begin > block->address) {  // prev -> [before] -> block
    Block* before_part = make_free_part(block->address, begin - block->address);
    before_part->prev = block->prev;
    if (before_part->prev) before_part->prev->next = before_part;
    before_part->next = block;
    block->prev = before_part;
    pool.cache(before_part);
  }
  if (end < block_end) {  // block -> [after] -> next
    Block* after_part = make_free_part(end, block_end - end);
    after_part->next = block->next;
    if (after_part->next) after_part->next->prev = after_part;
    after_part->prev = block;
    block->next = after_part;
    pool.cache(after_part);
  }
  block->address = begin;
  block->size = end - begin;
  block->mapped = false;
  try_merge_blocks(block, block->prev, pool);  // with unmapped neighbours
  try_merge_blocks(block, block->next, pool);
  pool.unmapped.insert(block);

  for_pool_stats(pool, [&](std::size_t t) { stats_.reserved_bytes[t].decrease(static_cast<std::int64_t>(end - begin)); });
  stats_.num_device_free += 1;
  apply_shape_change(pool, before, shape_of(block, window));
  recorder_.record(TraceAction::segment_unmap, begin, end - begin, end - begin, MemoryCategory::other, block->stream);
}

// Every segment of the pool with nothing mapped (one unmapped block from end to end) gives its
// address range back.
void CachingAllocator::release_unmapped_segments(BlockPool& pool) {
  std::vector<Block*> empty_segments;
  for (Block* b : pool.unmapped)
    if (!b->prev && !b->next) empty_segments.push_back(b);
  for (Block* b : empty_segments) release_expandable_segment(b);
}

void CachingAllocator::release_expandable_segment(Block* whole_segment) {
  ExpandableSegment* segment = whole_segment->segment;
  device_.release_address_range(as_pointer(segment->address), segment->reserved_bytes);
  whole_segment->pool->unmapped.erase(whole_segment);
  delete whole_segment;
  expandable_segments_.erase(std::find_if(expandable_segments_.begin(), expandable_segments_.end(),
                                          [&](const auto& s) { return s.get() == segment; }));
}

// The allocator is going away: unmap every mapped range and give back every address range,
// whatever is still allocated in them.
void CachingAllocator::release_all_expandable_segments() {
  std::vector<Block*> heads;
  for (BlockPool* pool : {small_pool_.get(), large_pool_.get()}) {
    for (Block* b : pool->blocks)
      if (b->segment && !b->prev) heads.push_back(b);
    for (Block* b : pool->unmapped)
      if (!b->prev) heads.push_back(b);
  }
  for (auto& [address, b] : live_blocks_)
    if (b->segment && !b->prev) heads.push_back(b);
  for (Block* head : heads) {
    const ExpandableSegment& segment = *head->segment;
    for (Block* b = head; b;) {
      if (!b->mapped) {
        b = b->next;
        continue;
      }
      const std::uintptr_t range_start = b->address;
      while (b && b->mapped) b = b->next;
      const std::uintptr_t range_end = b ? b->address : segment.address + segment.reserved_bytes;
      // The destructor has waited for every stream (synchronize_all_streams): streams that used
      // the pages may be gone by now, so none is named here.
      device_.unmap_pages(as_pointer(range_start), range_end - range_start, segment.page_bytes, kDefaultStream);
    }
    device_.release_address_range(as_pointer(segment.address), segment.reserved_bytes);
    for (Block* b = head; b;) {
      Block* next = b->next;
      if (b->mapped) b->pool->blocks.erase(b);
      else b->pool->unmapped.erase(b);
      live_blocks_.erase(b->address);
      delete b;
      b = next;
    }
  }
  expandable_segments_.clear();
}

// What a map or unmap of `block` can change: `block` itself, its neighbours (which it may absorb,
// or which are split off it), and one more block on each side, since a block's share of the shape
// reads its neighbours ("a mapped range starts here", is_split()). Those outer blocks are never
// absorbed, so the same window bounds the shape before and after; blocks further out keep their
// share. Counting the window instead of the whole segment keeps a map O(1), not O(blocks).
CachingAllocator::ShapeWindow CachingAllocator::shape_window(const Block* block) {
  ShapeWindow w;
  if (block->prev && block->prev->prev) w.first = block->prev->prev;
  if (block->next && block->next->next) w.last = block->next->next;
  return w;
}

CachingAllocator::SegmentShape CachingAllocator::shape_of(const Block* block, const ShapeWindow& window) {
  const Block* b = window.first;
  if (!b) {  // the segment's first block: a few steps back at most (the window had no second block before)
    b = block;
    while (b->prev) b = b->prev;
  }
  SegmentShape shape;
  for (; b; b = b->next) {
    if (b->mapped) {
      if (!b->prev || !b->prev->mapped) shape.mapped_ranges += 1;  // a mapped range starts here
      const bool inactive = !b->allocated && b->event_count == 0;
      if (inactive && b->is_split()) {
        shape.inactive_split_blocks += 1;
        shape.inactive_split_bytes += static_cast<std::int64_t>(b->size);
      }
    }
    if (b == window.last) break;
  }
  return shape;
}

void CachingAllocator::apply_shape_change(const BlockPool& pool, const SegmentShape& before, const SegmentShape& after) {
  for_pool_stats(pool, [&](std::size_t t) {
    change(stats_.segment[t], after.mapped_ranges - before.mapped_ranges);
    change(stats_.inactive_split[t], after.inactive_split_blocks - before.inactive_split_blocks);
    change(stats_.inactive_split_bytes[t], after.inactive_split_bytes - before.inactive_split_bytes);
  });
}

}  // namespace trainmem
