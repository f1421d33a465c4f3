// One event of the allocator's history, and the list of its actions: said once, here, for the
// recorder that writes them (memory_recorder.h, trace_file.h), the snapshot that passes them on
// in PyTorch's format (memory_snapshot.h), and `trainmem replay`, which reads them back
// (trace_replay.h). The names are PyTorch's (torch.cuda.memory._record_memory_history), but for
// empty_cache, which PyTorch does not record.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/allocator/device_memory.h"
#include "common/allocator/memory_category.h"

namespace trainmem {

enum class TraceAction {
  alloc,           // a block was handed to a caller
  free_requested,  // the caller freed it (it may still be in use by another stream)
  free_completed,  // the block is back in the cache (or returned to the device in raw mode)
  segment_alloc,   // a new segment was taken from the device (cudaMalloc)
  segment_free,    // a segment was given back to the device (cudaFree)
  oom,             // an allocation failed for good
  segment_map,     // expandable segments: pages were mapped at addr (size bytes: cuMemCreate + cuMemMap)
  segment_unmap,   // expandable segments: pages were unmapped and given back (cuMemUnmap + cuMemRelease)
  empty_cache,     // the program asked for every wholly free segment back (torch.cuda.empty_cache)
};

struct TraceActionName {
  TraceAction action;
  std::string_view name;
  bool in_pytorch_trace;  // PyTorch's snapshot has it (its memory visualizer knows it)
};

// Every action, in the order of the enum.
inline constexpr std::array<TraceActionName, 9> kTraceActions = {{
    {TraceAction::alloc, "alloc", true},
    {TraceAction::free_requested, "free_requested", true},
    {TraceAction::free_completed, "free_completed", true},
    {TraceAction::segment_alloc, "segment_alloc", true},
    {TraceAction::segment_free, "segment_free", true},
    {TraceAction::oom, "oom", true},
    {TraceAction::segment_map, "segment_map", true},
    {TraceAction::segment_unmap, "segment_unmap", true},
    {TraceAction::empty_cache, "empty_cache", false},
}};

constexpr bool trace_actions_in_enum_order() {
  for (std::size_t i = 0; i < kTraceActions.size(); ++i)
    if (static_cast<std::size_t>(kTraceActions[i].action) != i) return false;
  return true;
}
static_assert(trace_actions_in_enum_order(), "kTraceActions lists the actions in the order of the enum");

constexpr const TraceActionName& describe(TraceAction a) { return kTraceActions[static_cast<std::size_t>(a)]; }
constexpr std::string_view to_string(TraceAction a) { return describe(a).name; }
// The action of a name in kTraceActions; nullopt for any other text.
std::optional<TraceAction> parse_trace_action(std::string_view name);

struct TraceEvent {
  std::uint64_t seq = 0;          // 0, 1, 2, ... in the order events happened
  TraceAction action = TraceAction::alloc;
  std::uintptr_t address = 0;     // block or segment address (0 for oom and empty_cache)
  std::size_t size = 0;           // alloc/free: the size the caller asked for; segment: its size;
                                  // segment_map/unmap: the bytes mapped/unmapped at addr;
                                  // oom: the rounded size that could not be served; empty_cache: 0
  std::size_t block_size = 0;     // alloc/free: the block's size (rounded or whole); else == size
  MemoryCategory category = MemoryCategory::other;
  StreamId stream = kDefaultStream;
  std::int64_t step = -1;         // training step set by the trainer; -1 before the first
  std::uint16_t phase = 0;        // index into MemoryRecorder::phases()
  std::uint32_t name = 0;         // alloc/free/oom: index into MemoryRecorder::names() (0: not named)
};

}  // namespace trainmem
