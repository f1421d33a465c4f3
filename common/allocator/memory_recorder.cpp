#include "common/allocator/memory_recorder.h"

#include <nlohmann/json.hpp>

#include "common/util/output_file.h"

namespace trainmem {

std::string_view to_string(TraceAction a) {
  switch (a) {
    case TraceAction::alloc: return "alloc";
    case TraceAction::free_requested: return "free_requested";
    case TraceAction::free_completed: return "free_completed";
    case TraceAction::segment_alloc: return "segment_alloc";
    case TraceAction::segment_free: return "segment_free";
    case TraceAction::oom: return "oom";
    case TraceAction::segment_map: return "segment_map";
    case TraceAction::segment_unmap: return "segment_unmap";
  }
  return "unknown";
}

MemoryRecorder::MemoryRecorder() : phases_{"none"} {}

void MemoryRecorder::set_phase(std::string_view phase) {
  for (std::size_t i = 0; i < phases_.size(); ++i) {
    if (phases_[i] == phase) {
      phase_ = static_cast<std::uint16_t>(i);
      return;
    }
  }
  phases_.emplace_back(phase);
  phase_ = static_cast<std::uint16_t>(phases_.size() - 1);
}

std::uint32_t MemoryRecorder::name_index(std::string_view name) {
  if (!enabled_ || name.empty()) return 0;
  const auto [it, added] = name_indices_.try_emplace(std::string(name), static_cast<std::uint32_t>(names_.size()));
  if (added) names_.push_back(it->first);
  return it->second;
}

void MemoryRecorder::record(TraceAction action, std::uintptr_t address, std::size_t size,
                            std::size_t block_size, MemoryCategory category, StreamId stream, std::uint32_t name) {
  if (!enabled_) return;
  events_.push_back(
      TraceEvent{events_.size(), action, address, size, block_size, category, stream, step_, phase_, name});
}

nlohmann::json MemoryRecorder::to_json() const {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : events_) {
    events.push_back({{"seq", e.seq},
                      {"action", to_string(e.action)},
                      {"addr", e.address},
                      {"size", e.size},
                      {"block_size", e.block_size},
                      {"category", to_string(e.category)},
                      {"stream", e.stream},
                      {"step", e.step},
                      {"phase", phases_[e.phase]}});
    if (e.name != 0) events.back()["name"] = names_[e.name];
  }
  return {{"phases", phases_}, {"events", std::move(events)}};
}

void MemoryRecorder::write_json(const std::string& path, const std::string& flag) const {
  write_output_file(path, to_json().dump() + '\n', flag);
}

}  // namespace trainmem
