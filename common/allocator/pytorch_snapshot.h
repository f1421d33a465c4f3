// A PyTorch memory snapshot read as a replay: what the program asked of the allocator, what the
// real allocator did with the device, and where it stood before recording began.
//
// `torch.cuda.memory._record_memory_history()` then `_dump_snapshot("run.pickle")` writes
//   {"segments": [{"device", "address", "total_size", "stream", "segment_type", "is_expandable",
//                  "blocks": [{"address", "size", "requested_size", "state", "frames"}]}],
//    "device_traces": [[{"action", "addr", "size", "stream", "time_us", "frames"}, ...], ...],
//    "allocator_settings": {...}, "external_annotations": [...]}       (the last two: recent versions)
// (common/util/restricted_pickle.h reads the pickle into this JSON; a JSON file of the same
// structure is read as is). One list of events per device; this reads one device's.
//
// What each event becomes:
//   alloc           an op: the request (its "size" is what the caller asked), named by its address
//   free_requested  an op: the free of that block
//   free_completed  right after its free_requested: nothing more. Later (another stream used the
//                   block: record_stream): the free op is `deferred` and `completes_at` this event,
//                   the block not reused before it (CachingAllocator::free_after)
//   segment_alloc, segment_free
//                   the real allocator's decisions: the recorded device (recorded_device_memory.h)
//                   answers from them and checks the replay's against them
//   oom             an op: the request again ("size" is its rounded size), marked as failed in the
//                   trace; its "device_free" (trainmem's own snapshots: "addr") is the device's free
//                   bytes then, so reserved + that is the memory the process could have had
//                   (`capacity_from_oom`)
//   snapshot        nothing (PyTorch marks where memory_snapshot() was called)
//   annotate, user_defined
//                   nothing for the allocator (markers; snapshot_phases.h reads the ranges)
//   segment_map/unmap  expandable segments' pages: counted, not compared one by one
//   segment_free (or segment_unmap) with no segment_alloc (or segment_map) after it before the
//                   next request: the program's empty_cache() (PyTorch does not record the call
//                   itself), an empty_cache op
//   any other action: named in `not_followed` with its event index
//
// Before recording began: blocks the trace frees without allocating them, blocks live at the end
// that it never allocated, segments it frees without allocating them and segments present at the
// end without a segment_alloc all existed before the first event. `before` holds those segments
// with their live blocks at their addresses and the gaps between them free, the state the replay
// starts from (CachingAllocator::restore_segment). A block's size inside its segment is known for
// blocks still live at the end (the snapshot's own); for one the trace frees, it is its request
// rounded as the recorded settings round it, or up to the next block when the rest (at most 1 MiB, in the large pool) is too
// small for the allocator to have split it off.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/allocator_config.h"
#include "common/allocator/caching_allocator.h"
#include "common/allocator/memory_timeline.h"
#include "common/allocator/recorded_device_memory.h"
#include "common/allocator/snapshot_phases.h"
#include "common/allocator/trace_replay.h"

namespace trainmem {

// Something in the snapshot the replay does not follow, named with its event (nullopt: the
// snapshot as a whole, e.g. a setting).
struct SnapshotNote {
  std::optional<std::size_t> event;
  std::string text;
};

constexpr std::size_t kSnapshotTimelinePoints = 1000;  // a plot's width in points, whatever the trace's length

// A run's memory over a snapshot's trace, where it went: each phase's peaks and the timeline (at
// most kSnapshotTimelinePoints points). The recorded run's is the reader's (allocated: the
// requested bytes the trace gives); a replay's is filled by observe_into.
struct SnapshotMemory {
  PhasePeaks peaks;
  MemoryTimeline timeline{0, 1};
  SnapshotMemory() = default;
  SnapshotMemory(std::size_t phases, std::size_t events) : peaks(phases), timeline(events, kSnapshotTimelinePoints) {}
  void add(std::uint16_t phase, std::size_t event, std::int64_t allocated, std::int64_t reserved) {
    peaks.add(phase, event, allocated, reserved);
    timeline.add(event, allocated, reserved);
  }
  void shift(std::int64_t allocated, std::int64_t reserved) {
    peaks.shift(allocated, reserved);
    timeline.shift(allocated, reserved);
  }
};

// The figures the trace itself gives, before any replay: what the replay must reproduce.
struct RecordedFigures {
  std::size_t segments_before = 0, reserved_before = 0;  // held when recording began
  std::size_t blocks_before = 0, requested_before = 0;
  std::size_t peak_reserved_bytes = 0;    // over the trace: before + segment_alloc - segment_free
  std::size_t peak_requested_bytes = 0;   // the live blocks' requested sizes
  std::size_t final_reserved_bytes = 0;
  std::size_t segment_allocs = 0, segment_frees = 0, ooms = 0;
  std::size_t segment_maps = 0, segment_unmaps = 0;  // expandable segments (not compared one by one)
  std::optional<std::size_t> capacity_from_oom;  // reserved + device free at the first oom event
  SnapshotMemory memory;  // where the memory went: requested and reserved bytes, by phase and over the trace
};

struct PytorchSnapshot {
  std::string source;
  int device = 0;
  std::size_t events = 0;                           // the device's trace events
  std::vector<SegmentSnapshot> before;              // held before the first event
  std::vector<TraceOp> ops;                         // what the program asked, in order
  std::vector<RecordedSegmentEvent> segment_events;  // what the real allocator did with the device
  std::vector<SegmentSnapshot> after;               // the snapshot's segments of this device (the end)
  AllocatorConfig recorded_config;                  // from allocator_settings (default when absent)
  bool settings_recorded = false;                   // allocator_settings was in the snapshot
  std::string recorded_settings_text;               // its PYTORCH_CUDA_ALLOC_CONF, as written
  std::size_t annotations = 0;                      // external_annotations of this device
  SnapshotPhases phases;                            // each event's phase and step (snapshot_phases.h)
  std::vector<SnapshotNote> not_followed;
  RecordedFigures recorded;
};

// Whether a JSON document is a snapshot (an object with "device_traces" or "segments"), rather
// than a trace of trainmem's own (trace_replay.h).
bool is_pytorch_snapshot(const nlohmann::json& document);

// Reads one device's trace (`device`; nullopt: the one device whose trace has events). Throws
// TraceError, one line naming the field and the event, for what cannot be read or does not add
// up (a block freed twice, a block live at the end outside every segment, ...).
PytorchSnapshot read_pytorch_snapshot(const nlohmann::json& snapshot, const std::string& source,
                                      std::optional<int> device = std::nullopt);

// `config` as PyTorch's snapshot records it in "allocator_settings" ({"PYTORCH_CUDA_ALLOC_CONF",
// "max_split_size" (-1: unlimited), "expandable_segments", "garbage_collection_threshold",
// "roundup_power2_divisions": {"1": N, ..., "32768": N}}): what trainmem's own snapshots write,
// and what read_pytorch_snapshot reads back (recorded_config) to the same config.
nlohmann::json allocator_settings_json(const AllocatorConfig& config);

// A replay's observer (replay_trace) that fills `memory`, each point in its event's phase.
// `memory` and `phases` must outlive the replay.
ReplayObserver observe_into(SnapshotMemory& memory, const SnapshotPhases& phases);

// The trace's frames for an event ("name (file:line)" each, innermost first), empty when not
// recorded or out of range: what an out-of-memory report shows of where the request came from.
std::vector<std::string> snapshot_event_frames(const nlohmann::json& snapshot, int device, std::size_t event);

}  // namespace trainmem
