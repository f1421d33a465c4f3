// The allocator's memory in the structure of PyTorch's snapshot (torch.cuda.memory._snapshot()),
// so that PyTorch's own memory visualizer (pytorch.org/memory_viz) can show a trainmem run: its
// "Active Memory Timeline" replays `device_traces`, its "Allocator State History" walks the same
// trace back from `segments`. The report tool (reports/) pickles this JSON into the file the
// visualizer opens.
//
//   {"segments": [{"device", "address", "total_size", "stream", "segment_type": "small"|"large",
//                  "allocated_size", "active_size", "requested_size", "is_expandable", "frames": [],
//                  "blocks": [{"address", "size", "requested_size",
//                              "state": "active_allocated"|"active_awaiting_free"|"inactive",
//                              "frames": [], "category"}]}],
//    "device_traces": [[{"action", "addr", "size", "stream", "frames": [],
//                        "seq", "block_size", "category", "step", "phase"[, "name"]}, ...]]}
//
// `device_traces` has one list per device (here one: the allocator's device): the events the
// recorder kept, which for `trainmem train --memory-snapshot` are the last kSnapshotMaxEntries
// (PyTorch's _record_memory_history(max_entries=...) keeps the last N the same way; its
// visualizer shows a trace that starts mid-run). The action names are the recorder's, which are
// PyTorch's (alloc, free_requested, free_completed, segment_alloc, segment_free, oom, ...); the
// one PyTorch does not have (empty_cache) is left out. As in PyTorch, `size` is what the caller
// asked for (alloc/free), the segment's size (segment_*), or the rounded request that failed
// (oom). `frames` (stack traces) are empty: trainmem records categories, steps and phases
// instead, added to every entry.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/caching_allocator.h"

namespace trainmem {

// The events `trainmem train --memory-snapshot` keeps for the trace: the last this many
// (64 bytes each in memory: 6.4 MB at most).
constexpr std::size_t kSnapshotMaxEntries = 100000;

// The current segments and the recorder's kept events (none if the recorder was never enabled).
nlohmann::json memory_snapshot_json(const CachingAllocator& allocator);

// Writes memory_snapshot_json(allocator) to `path` an entry at a time, whole or not at all
// (common/util/output_file.h); `flag` names the path in an error message. Throws OutputFileError,
// or RecordingError if the recorder stopped on a failure.
void write_memory_snapshot(const CachingAllocator& allocator, const std::string& path, const std::string& flag = "");

}  // namespace trainmem
