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
#include <functional>
#include <istream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/allocator/recorded_device_memory.h"

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
  bool failed_in_trace = false;   // a recorded oom's request: its failing again is the recorded
                                  // run's own out-of-memory, which the run went on after
  bool address_recorded = false;  // alloc: `id` is the address the recorded allocator gave the block
  // free: another stream still used the block (record_stream), so the free completed later: at
  // the trace's event `completes_at` (nullopt: not within the trace). The replay frees it with
  // CachingAllocator::free_after, reused once the replay has passed that event.
  bool deferred = false;
  std::optional<std::size_t> completes_at;
  std::size_t device_window_end = 0;  // a followed replay (recorded_device_memory.h): the segment
                                      // events recorded before this index are this op's
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
  bool oom_before_trace = false;    // the segments held before the trace did not fit (oom set)
  std::size_t events_replayed = 0;  // ops completed (== events_total without an OOM)
  std::size_t events_total = 0;     // ops in the trace: its events but those replay passes over
  // Where reserved memory peaked: the first op after which reserved_bytes reached its peak
  // (nullopt: before the first event, from the restored segments), and what of it was not
  // allocated then (cached free blocks and rounding: the fragmentation at the peak).
  std::optional<std::size_t> peak_reserved_event;
  std::size_t unallocated_at_peak_reserved = 0;
  std::size_t recorded_ooms_again = 0;   // requests the trace shows failing that failed again
  std::size_t recorded_ooms_served = 0;  // requests the trace shows failing that this replay served
  // A followed replay (recorded_device_memory.h): the first decision that differed, if any, and
  // how many of the trace's segment events the replay made the same.
  bool followed = false;
  std::optional<ReplayDivergence> divergence;
  std::size_t segment_events_matched = 0;
  std::size_t segment_events_recorded = 0;
};

// Runs the ops in order through `allocator` (usually on a BudgetDeviceMemory(budget, false), so no
// memory is touched). An OutOfMemoryError does not escape: the replay stops at that event and the
// result carries the report (unless the trace shows that request failing too: the recorded run
// went on, and so does the replay). Throws TraceError only for ops parse_trace would have rejected
// (a free of an id that is not live).
//
// `before`: segments held before the first event (CachingAllocator::restore_segment), their live
// blocks named in the ops by their recorded address. `follow`: the allocator's device, when it is
// the recorded one; the replay then tells it each op and compares each block's address with the
// recorded one.
//
// `observe`, where given, is told after each op completes: its event and the allocator's bytes then
// (a timeline, the peaks of each phase).
struct ReplayPoint {
  std::size_t event = 0;
  std::int64_t allocated = 0, reserved = 0, requested = 0;
};
using ReplayObserver = std::function<void(const ReplayPoint&)>;
ReplayResult replay_trace(const std::vector<TraceOp>& ops, CachingAllocator& allocator,
                          const std::vector<SegmentSnapshot>& before = {}, RecordedDeviceMemory* follow = nullptr,
                          const ReplayObserver& observe = {});

// {"allocator_config", "device_memory_bytes", "events", "events_replayed", "summary": {...},
//  "memory_stats": {flat PyTorch names}, "fragmentation", "segments", "oom": null | {...}}
nlohmann::json replay_result_to_json(const ReplayResult& result, const AllocatorConfig& config,
                                     std::size_t device_memory_bytes);

}  // namespace trainmem
