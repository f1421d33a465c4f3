// CachingAllocator::restore_segment: a segment put back as it stood before a recorded trace
// began (caching_allocator.h says what a layout may be). The statistics are those the blocks
// would have added had the allocator made them: the segment's reserved bytes, each live block's
// allocated/active/requested bytes, and each free block of a split segment as inactive_split.
#include <stdexcept>
#include <string>

#include "common/allocator/allocator_blocks.h"
#include "common/util/byte_size.h"

namespace trainmem {

namespace {

// The layout's shape, checked before anything is taken from the device.
void check_layout(const SegmentSnapshot& layout) {
  const std::string where = "restore_segment: segment at " + std::to_string(layout.address) + " (" +
                            std::to_string(layout.total_size) + " bytes)";
  if (layout.is_expandable)
    throw std::invalid_argument(where + ": an expandable segment's mapped range cannot be restored (fixed segments only)");
  if (layout.total_size == 0 || layout.blocks.empty()) throw std::invalid_argument(where + ": has no blocks");
  std::uintptr_t next = layout.address;
  bool previous_free = false;
  for (const BlockSnapshot& b : layout.blocks) {
    const std::string block = where + ": block at " + std::to_string(b.address);
    if (b.address != next) throw std::invalid_argument(block + " does not start where the one before it ends");
    if (b.size == 0 || b.size % kMinBlockSize != 0)
      throw std::invalid_argument(block + ": size " + std::to_string(b.size) + " is not a positive multiple of 512");
    const bool free = b.state == BlockSnapshot::State::inactive;
    if (b.state == BlockSnapshot::State::active_awaiting_free)
      throw std::invalid_argument(block + ": a block awaiting another stream cannot be restored");
    if (free && previous_free) throw std::invalid_argument(block + ": two free blocks side by side would be one");
    if (!free && (b.requested_size == 0 || b.requested_size > b.size))
      throw std::invalid_argument(block + ": requested " + std::to_string(b.requested_size) + " bytes of a " +
                                  std::to_string(b.size) + "-byte block");
    previous_free = free;
    next += b.size;
  }
  if (next - layout.address != layout.total_size)
    throw std::invalid_argument(where + ": its blocks cover " + std::to_string(next - layout.address) + " bytes");
}

}  // namespace

std::vector<void*> CachingAllocator::restore_segment(const SegmentSnapshot& layout) {
  check_layout(layout);
  std::lock_guard<std::mutex> lock(mutex_);
  BlockPool& pool = layout.is_small ? *small_pool_ : *large_pool_;
  void* ptr = device_.allocate(layout.total_size);
  if (!ptr) raise_oom(layout.total_size, layout.total_size, layout.total_size, MemoryCategory::other, layout.stream,
                      "a segment held before the trace began");
  const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(ptr);
  for_pool_stats(pool, [&](std::size_t t) {
    stats_.segment[t].increase(1);
    stats_.reserved_bytes[t].increase(static_cast<std::int64_t>(layout.total_size));
  });
  if (layout.total_size >= config_.max_split_size) stats_.oversize_segments.increase(1);
  recorder_.record(TraceAction::segment_alloc, base, layout.total_size, layout.total_size, MemoryCategory::other,
                   layout.stream);

  const bool split = layout.blocks.size() > 1;
  std::vector<void*> live;
  Block* previous = nullptr;
  for (const BlockSnapshot& b : layout.blocks) {
    auto* block = new Block;
    block->address = base + (b.address - layout.address);
    block->size = b.size;
    block->stream = layout.stream;
    block->pool = &pool;
    block->prev = previous;
    if (previous) previous->next = block;
    previous = block;
    if (b.state == BlockSnapshot::State::inactive) {
      pool.cache(block);
      if (split)
        for_pool_stats(pool, [&](std::size_t t) {
          stats_.inactive_split[t].increase(1);
          stats_.inactive_split_bytes[t].increase(static_cast<std::int64_t>(block->size));
        });
      continue;
    }
    hand_out(block, b.requested_size, b.category, /*name=*/0);
    live.push_back(reinterpret_cast<void*>(block->address));
  }
  return live;
}

}  // namespace trainmem
