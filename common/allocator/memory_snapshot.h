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
//                        "seq", "block_size", "category", "step", "phase"}, ...]]}
//
// `device_traces` has one list per device (here one: the allocator's device). The action names
// are the recorder's, which are PyTorch's (alloc, free_requested, free_completed, segment_alloc,
// segment_free, oom, ...). As in PyTorch, `size` is what the caller asked for (alloc/free), the
// segment's size (segment_*), or the rounded request that failed (oom). `frames` (stack traces)
// are empty: trainmem records categories, steps and phases instead, added to every entry.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/caching_allocator.h"

namespace trainmem {

// The current segments and the whole recorded trace (empty if the recorder was never enabled).
nlohmann::json memory_snapshot_json(const CachingAllocator& allocator);

// Writes memory_snapshot_json(allocator) to `path`, whole or not at all (common/util/output_file.h);
// `flag` names the path in an error message. Throws OutputFileError.
void write_memory_snapshot(const CachingAllocator& allocator, const std::string& path, const std::string& flag = "");

}  // namespace trainmem
