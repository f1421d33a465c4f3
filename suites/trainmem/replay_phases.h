// Where the memory of a replayed snapshot went: each phase's peaks (recorded and replayed), the
// events where the peaks were reached placed in their phase and step, and the timelines the
// report plots (recorded beside replayed). Phases as snapshot_phases.h reads them.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/allocator/pytorch_snapshot.h"

namespace trainmem::cli {

// Where `bytes` were reached: {"bytes", "event", "phase", "step"} (null: no event, no recorded phases, step unknown).
nlohmann::json place_json(const SnapshotPhases& phases, std::int64_t bytes, std::optional<std::size_t> event);

// "event 1234 (backward, step 2)"; "event 1234" when the snapshot records no phases.
std::string place_text(const SnapshotPhases& phases, std::size_t event);

// {"phases": {"sources", "steps_counted", "table": [...], "spans": [...]}, "peaks": {...},
//  "timeline": {"recorded", "replayed"[, "lowest_peak_setting"]}}, added to the replay's JSON.
void add_where_json(nlohmann::json& out, const PytorchSnapshot& snapshot, const SnapshotMemory& replayed,
                    const SnapshotMemory* lowest, const std::string& lowest_config);

// The table of the phases and the peaks' places, for the text output.
void print_where(const PytorchSnapshot& snapshot, const SnapshotMemory& replayed);

}  // namespace trainmem::cli
