#include "suites/trainmem/replay_phases.h"

#include <iomanip>
#include <iostream>

#include "common/util/byte_size.h"

namespace trainmem::cli {

nlohmann::json place_json(const SnapshotPhases& phases, std::int64_t bytes, std::optional<std::size_t> event) {
  nlohmann::json j = {{"bytes", bytes}, {"event", nullptr}, {"phase", nullptr}, {"step", nullptr}};
  if (!event) return j;
  j["event"] = *event;
  if (phases.sources.empty()) return j;
  j["phase"] = phases.phase_of(*event);
  if (phases.step_of(*event)) j["step"] = phases.step_of(*event);
  return j;
}

namespace {

// At most this many spans in the JSON: more are narrower than a plot's point (the timeline has
// kSnapshotTimelinePoints), and a hostile file could make one per event.
constexpr std::size_t kMaxSpans = 4 * kSnapshotTimelinePoints;

}  // namespace

std::string place_text(const SnapshotPhases& phases, std::size_t event) {
  std::string text = "event " + std::to_string(event);
  if (phases.sources.empty()) return text;
  text += " (" + phases.phase_of(event);
  if (phases.step_of(event)) text += ", step " + std::to_string(phases.step_of(event));
  return text + ")";
}

void add_where_json(nlohmann::json& out, const PytorchSnapshot& snap, const SnapshotMemory& replayed,
                    const SnapshotMemory* lowest, const std::string& lowest_config) {
  const SnapshotPhases& phases = snap.phases;
  const PhasePeaks& recorded = snap.recorded.memory.peaks;
  nlohmann::json table = nlohmann::json::array();
  for (std::uint16_t p = 0; p < phases.names.size(); ++p) {
    const PhasePeaks::Peak& r = recorded.of(p);
    if (r.events == 0) continue;
    const PhasePeaks::Peak* q = p < replayed.peaks.phases() ? &replayed.peaks.of(p) : nullptr;
    table.push_back({{"phase", phases.names[p]},
                     {"events", r.events},
                     {"recorded_peak_requested_bytes", r.allocated},
                     {"recorded_peak_reserved_bytes", r.reserved},
                     {"replayed_peak_allocated_bytes", q && q->events ? nlohmann::json(q->allocated) : nlohmann::json(nullptr)},
                     {"replayed_peak_reserved_bytes", q && q->events ? nlohmann::json(q->reserved) : nlohmann::json(nullptr)}});
  }
  nlohmann::json spans = nlohmann::json::array();
  const std::vector<SnapshotPhases::Span> all_spans = phases.spans();
  for (std::size_t i = 0; i < all_spans.size() && i < kMaxSpans; ++i) {
    const SnapshotPhases::Span& s = all_spans[i];
    spans.push_back({{"phase", phases.names[s.phase]}, {"step", s.step}, {"first_event", s.first_event}, {"last_event", s.last_event}});
  }
  out["phases"] = {{"sources", phases.sources},
                   {"steps_counted", phases.steps_counted},
                   {"table", table},
                   {"spans", spans},
                   {"spans_total", all_spans.size()}};
  const PhasePeaks::Peak &r = recorded.overall(), &q = replayed.peaks.overall();
  out["peaks"] = {{"recorded_requested", place_json(phases, r.allocated, r.allocated_event)},
                  {"recorded_reserved", place_json(phases, r.reserved, r.reserved_event)},
                  {"replayed_allocated", place_json(phases, q.allocated, q.allocated_event)},
                  {"replayed_reserved", place_json(phases, q.reserved, q.reserved_event)}};
  out["timeline"] = {{"points", kSnapshotTimelinePoints},
                     {"recorded", snap.recorded.memory.timeline.to_json("requested_bytes")},
                     {"replayed", replayed.timeline.to_json("allocated_bytes")}};
  if (lowest) {
    nlohmann::json t = lowest->timeline.to_json("allocated_bytes");
    t["allocator_config"] = lowest_config;
    out["timeline"]["lowest_peak_setting"] = t;
  }
}

void print_where(const PytorchSnapshot& snap, const SnapshotMemory& replayed) {
  const SnapshotPhases& phases = snap.phases;
  const PhasePeaks& recorded = snap.recorded.memory.peaks;
  if (phases.sources.empty()) {
    std::cout << "\nWhere the memory went: the snapshot records no phases (no record_function ranges, no stack "
                 "frames: record with _record_memory_history(stacks=\"python\") or wrap the phases in "
                 "torch.profiler.record_function)\n";
  } else {
    std::string sources;
    for (const std::string& s : phases.sources) sources += (sources.empty() ? "" : ", ") + s;
    std::cout << "\nWhere the memory went (phases from " << sources
              << (phases.steps_counted ? "; steps counted, a new one after each optimizer step" : "") << "):\n"
              << "  " << std::left << std::setw(22) << "phase" << std::right << std::setw(8) << "events" << std::setw(16)
              << "peak requested" << std::setw(15) << "peak reserved" << std::setw(26) << "replayed: peak allocated"
              << std::setw(15) << "peak reserved" << '\n';
    for (std::uint16_t p = 0; p < phases.names.size(); ++p) {
      const PhasePeaks::Peak& r = recorded.of(p);
      if (r.events == 0) continue;
      const bool replayed_here = p < replayed.peaks.phases() && replayed.peaks.of(p).events > 0;
      const PhasePeaks::Peak& q = replayed_here ? replayed.peaks.of(p) : r;
      std::string name = phases.names[p];
      if (name.size() > 21) name = name.substr(0, 20) + "~";
      std::cout << "  " << std::left << std::setw(22) << name << std::right << std::setw(8) << r.events << std::setw(16)
                << format_bytes(static_cast<std::uint64_t>(r.allocated)) << std::setw(15)
                << format_bytes(static_cast<std::uint64_t>(r.reserved)) << std::setw(26)
                << (replayed_here ? format_bytes(static_cast<std::uint64_t>(q.allocated)) : std::string("-")) << std::setw(15)
                << (replayed_here ? format_bytes(static_cast<std::uint64_t>(q.reserved)) : std::string("-")) << '\n';
    }
  }
  const PhasePeaks::Peak &r = recorded.overall(), &q = replayed.peaks.overall();
  // (A recorded peak reserved is a segment_alloc's event; the replay's, the alloc's after it.)
  if (r.reserved_event) std::cout << "  recorded peak reserved at " << place_text(phases, *r.reserved_event) << '\n';
  if (r.allocated_event) std::cout << "  recorded peak requested at " << place_text(phases, *r.allocated_event) << '\n';
  if (q.reserved_event) std::cout << "  replayed peak reserved at " << place_text(phases, *q.reserved_event) << '\n';
  if (q.allocated_event) std::cout << "  replayed peak allocated at " << place_text(phases, *q.allocated_event) << '\n';
}

}  // namespace trainmem::cli
