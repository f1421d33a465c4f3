// Replaying an allocation trace through the allocator: "how would this workload fragment under
// these settings?" A trace is a JSON list of events (or {"events": [...]}) in either of two forms:
//
// Written by hand:
//   {"action": "alloc", "id": 7, "size": 1048576, "category": "activations", "stream": 0}
//   {"action": "free", "id": 7}
//   {"action": "empty_cache"}
// ("category" and "stream" are optional.)
//
// Written by trainmem's recorder (--record-memory, `replay --record`: trace_file.h), whose events
// name their block by "addr" and carry every action of trace_event.h. What the replay does with
// each (replay_action, the one switch over the recorder's actions):
//   alloc            the request again (size, category, stream), its block named by "addr"
//   free_requested   the program's free of that block
//   empty_cache      the program's empty_cache()
//   oom              the request that failed, tried again (under other settings it may fit; it is
//                    never freed: the recorded run ended or went on without it)
//   free_completed, segment_alloc, segment_free, segment_map, segment_unmap
//                    nothing: they are the allocator's answers, which the replay makes anew
// A recorded run replayed under its own settings gives its own figures (peaks, segments).
#pragma once
#include <cstddef>
#include <cstdint>
#include <istream>
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
  std::int64_t id = 0;            // the block: "id", or the recorder's "addr"; below 0 for a
                                  // recorded oom's request (never freed)
  std::size_t event = 0;          // its event's index in the trace's list (for messages)
  std::size_t size = 0;
  MemoryCategory category = MemoryCategory::other;
  StreamId stream = kDefaultStream;
};

// Checks the whole trace before anything runs (ids freed that are not live, ids allocated twice,
// missing fields), so a bad trace fails at once with the event it is about. `source` names the
// trace in messages (a file name). The file is read an event at a time: a long recording is
// never one document in memory, only its ops.
std::vector<TraceOp> parse_trace(const nlohmann::json& trace, const std::string& source = "trace");
std::vector<TraceOp> parse_trace_file(const std::string& path);
std::vector<TraceOp> parse_trace_stream(std::istream& in, const std::string& source);  // parse_trace_file's reader

struct ReplayResult {
  MemoryStats stats;
  FragmentationInfo fragmentation;
  std::vector<SegmentSnapshot> segments;
  std::optional<OomReport> oom;    // set if an allocation ran out of memory; the replay stops there
  std::size_t oom_event_index = 0;  // the event that failed, its index in the trace's list (only when oom is set)
  std::size_t events_replayed = 0;  // ops completed (== events_total without an OOM)
  std::size_t events_total = 0;     // ops in the trace: its events but those replay passes over
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
