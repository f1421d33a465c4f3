// Replaying an allocation trace through the allocator: "how would this workload fragment under
// these settings?" A trace is a JSON list of events:
//   {"action": "alloc", "id": 7, "size": 1048576, "category": "activations", "stream": 0}
//   {"action": "free", "id": 7}
//   {"action": "empty_cache"}
// ("category" and "stream" are optional; a top-level {"events": [...]} is accepted too.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"

namespace trainmem {

// A trace that cannot be replayed; the message is one line naming the event and the problem.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TraceOp {
  enum class Action { alloc, free, empty_cache };
  Action action = Action::alloc;
  std::int64_t id = 0;
  std::size_t size = 0;
  MemoryCategory category = MemoryCategory::other;
  StreamId stream = kDefaultStream;
};

// Checks the whole trace before anything runs (ids freed that are not live, ids allocated twice,
// missing fields), so a bad trace fails at once with the event it is about. `source` names the
// trace in messages (a file name).
std::vector<TraceOp> parse_trace(const nlohmann::json& trace, const std::string& source = "trace");
std::vector<TraceOp> parse_trace_file(const std::string& path);

struct ReplayResult {
  MemoryStats stats;
  FragmentationInfo fragmentation;
  std::vector<SegmentSnapshot> segments;
  std::optional<OomReport> oom;    // set if an allocation ran out of memory; the replay stops there
  std::size_t oom_event_index = 0;  // the event that failed (meaningful only when oom is set)
  std::size_t events_replayed = 0;  // events completed (== events_total without an OOM)
  std::size_t events_total = 0;     // events in the trace
};

// Runs the ops in order through `allocator` (usually on a BudgetDeviceMemory(budget, false), so no
// memory is touched). An OutOfMemoryError does not escape: the replay stops at that event and the
// result carries the report. Throws TraceError only for ops parse_trace would have rejected
// (a free of an id that is not live).
ReplayResult replay_trace(const std::vector<TraceOp>& ops, CachingAllocator& allocator);

// {"allocator_config", "device_memory_bytes", "events", "events_replayed", "summary": {...},
//  "memory_stats": {flat PyTorch names}, "fragmentation", "segments", "oom": null | {...}}
nlohmann::json replay_result_to_json(const ReplayResult& result, const AllocatorConfig& config,
                                     std::size_t device_memory_bytes);

}  // namespace trainmem
