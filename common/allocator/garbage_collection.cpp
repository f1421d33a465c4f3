// CachingAllocator::garbage_collect_cached_blocks: garbage_collection_threshold (PyTorch's
// garbage_collect_cached_blocks). Before a miss asks the device for more, if reserved memory is
// above threshold x the card, cached whole segments of the large pool are given back, oldest
// first, until reserved is back at the threshold:
//
//   target = reserved - threshold x capacity           (nothing to do if reserved <= that)
//   age(b) = the pool's cache searches since b was cached
//   repeat while reclaimed < target and something was freed:
//     free every unsplit cached block (fixed segments) with age >= the mean age of those left
//
// Unlike the out-of-memory retry, this runs before the device is asked, so a run that stays
// below the card keeps reserved memory near the threshold instead of at its peak.
#include "common/allocator/allocator_blocks.h"

namespace trainmem {

void CachingAllocator::garbage_collect_cached_blocks() {
  const std::size_t reserved = static_cast<std::size_t>(stats_.reserved_bytes[stat_index(StatType::all)].current);
  const auto threshold =
      static_cast<std::size_t>(config_.garbage_collection_threshold * static_cast<double>(device_.total_bytes()));
  if (reserved <= threshold) return;
  const std::size_t target = reserved - threshold;

  BlockPool& pool = *large_pool_;
  auto freeable = [](const Block* b) { return !b->is_split() && b->segment == nullptr; };
  auto age = [&](const Block* b) { return pool.free_block_searches - b->cached_at; };
  std::uint64_t total_age = 0;
  std::size_t count = 0;
  for (const Block* b : pool.blocks)
    if (freeable(b)) {
      total_age += age(b);
      ++count;
    }
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && count > 0) {
    const double mean_age = static_cast<double>(total_age) / static_cast<double>(count);
    freed = false;
    // Every block at least as old as the mean, not stopping at the target: a collection that
    // frees just enough would run again at the next miss.
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      Block* b = *it++;
      if (!freeable(b) || static_cast<double>(age(b)) < mean_age) continue;
      freed = true;
      reclaimed += b->size;
      total_age -= age(b);
      --count;
      release_block(b);
    }
  }
}

}  // namespace trainmem
