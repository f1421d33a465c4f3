// Fuzz target: a PyTorch memory snapshot (common/allocator/pytorch_snapshot.h) on arbitrary bytes,
// as `trainmem replay SNAPSHOT` reads one: JSON (or a pickle, by the restricted reader with small
// limits) into read_pytorch_snapshot, then the replay as recorded (RecordedDeviceMemory, every
// decision compared) and on a small simulated card under four allocator configs; the phases
// (snapshot_phases.h) are read with it, and the replays' points placed in them as the CLI does.
//
// Expected, not findings: TraceError and PickleError (one-line input errors), nlohmann's parse
// errors, and an OOM (a result of the replay). Anything else — a crash, a sanitizer report, a
// hang, any other exception, an exception from a replay of a snapshot the reader accepted — is a
// finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/pytorch_snapshot.h"
#include "common/util/restricted_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  trainmem::PytorchSnapshot snapshot;
  try {
    nlohmann::json document;
    if (trainmem::looks_like_pickle(bytes)) {
      trainmem::PickleLimits limits;
      limits.max_depth = 64;
      limits.max_values = 1u << 16;
      document = trainmem::read_restricted_pickle(bytes, "fuzz.pickle", limits);
    } else {
      document = nlohmann::json::parse(bytes);
    }
    snapshot = trainmem::read_pytorch_snapshot(document, "fuzz.json");
  } catch (const trainmem::TraceError&) {
    return 0;
  } catch (const trainmem::PickleError&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  // Not in a try: the reader accepted the snapshot, so its replays must not throw.
  {
    trainmem::RecordedDeviceMemory recorded(snapshot.segment_events);
    trainmem::CachingAllocator allocator(recorded, snapshot.recorded_config.expandable_segments
                                                       ? trainmem::AllocatorConfig{}
                                                       : snapshot.recorded_config);
    trainmem::SnapshotMemory memory(snapshot.phases.names.size(), snapshot.events);
    (void)trainmem::replay_trace(snapshot.ops, allocator, snapshot.before, &recorded,
                                 trainmem::observe_into(memory, snapshot.phases));
    if (memory.timeline.size() > trainmem::kSnapshotTimelinePoints) __builtin_trap();  // the bound is the point
    (void)snapshot.phases.spans();
  }
  for (const char* text : {"", "max_split_size_mb:20,expandable_segments:False", "expandable_segments:True",
                           "garbage_collection_threshold:0.5,roundup_power2_divisions:4"}) {
    trainmem::BudgetDeviceMemory card(std::size_t{64} << 20, /*backed=*/false);
    trainmem::CachingAllocator allocator(card, trainmem::AllocatorConfig::parse(text));
    (void)trainmem::replay_trace(snapshot.ops, allocator, snapshot.before);
  }
  return 0;
}
