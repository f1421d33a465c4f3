// The caching allocator's inside (not for use outside common/allocator/): blocks, pools and
// expandable segments. Shared by caching_allocator.cpp (the policy) and expandable_segments.cpp
// (the expandable-segment rules).
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <tuple>

#include "common/allocator/caching_allocator.h"

namespace trainmem {

// A block is a piece of a segment: [address, address + size). The blocks of one segment form a
// doubly linked list in address order (prev/next); a segment that is one block has neither.
//
// In an expandable segment the list covers the whole reserved address range, and blocks are
// either mapped (memory behind them: allocated, awaiting free, or cached free) or unmapped
// (address space only, in the pool's `unmapped` set). Blocks of fixed segments are always mapped.
struct CachingAllocator::Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;  // what the caller asked for (0 while free)
  StreamId stream = kDefaultStream;
  BlockPool* pool = nullptr;
  bool allocated = false;  // handed to a caller and not yet freed
  bool mapped = true;      // false: an unmapped stretch of an expandable segment
  Block* prev = nullptr;
  Block* next = nullptr;
  ExpandableSegment* segment = nullptr;  // the expandable segment it is part of; nullptr: a fixed segment
  MemoryCategory category = MemoryCategory::other;
  std::uint32_t name = 0;         // the recorder's index of the caller's name (0: none, or not recording)
  std::uint64_t cached_at = 0;    // the pool's free_block_searches when it was cached (its age: now - this)
  int event_count = 0;            // cross-stream events still to complete before reuse
  std::set<StreamId> stream_uses;  // other streams that used this block (record_stream)

  // Split: the block shares its mapped memory with another block. For fixed segments that is
  // "has a neighbour"; in an expandable segment only mapped neighbours count, so a free block
  // alone between unmapped pages is a wholly free segment, as PyTorch's snapshot shows it.
  bool is_split() const { return (prev != nullptr && prev->mapped) || (next != nullptr && next->mapped); }
};

// Free blocks ordered by (stream, size, address): lower_bound on (stream, n, 0) is the best fit.
inline bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->address) < std::tie(b->stream, b->size, b->address);
}

// Unmapped blocks ordered by (stream, address): the lowest unmapped stretch of a stream first.
inline bool CachingAllocator::AddressOrder::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->address) < std::tie(b->stream, b->address);
}

struct CachingAllocator::BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  bool is_small;
  std::set<Block*, BlockOrder> blocks;       // cached free (mapped) blocks
  std::set<Block*, AddressOrder> unmapped;   // expandable segments: stretches with no memory behind
  // Searches of the cache so far (counted with garbage_collection_threshold only): the clock by
  // which a cached block's age is told (PyTorch's get_free_blocks_call_count).
  std::uint64_t free_block_searches = 0;
  StatType stat_type() const { return is_small ? StatType::small_pool : StatType::large_pool; }
  // A free block into the cache, its age starting now.
  void cache(Block* block) {
    block->cached_at = free_block_searches;
    blocks.insert(block);
  }
};

// One reserved address range of one stream and pool, into which pages are mapped as it grows.
struct CachingAllocator::ExpandableSegment {
  std::uintptr_t address = 0;  // start of the reserved range
  std::size_t reserved_bytes = 0;  // address space: a whole number of pages
  std::size_t page_bytes = 0;      // 2 MiB (small pool) or 20 MiB (large pool)
  StreamId stream = kDefaultStream;
  BlockPool* pool = nullptr;
};

template <typename F>
void CachingAllocator::for_pool_stats(const BlockPool& pool, F&& f) {
  f(stat_index(StatType::all));
  f(stat_index(pool.stat_type()));
}

}  // namespace trainmem
