#include "common/allocator/memory_recorder.h"

#include <new>

#include <nlohmann/json.hpp>

namespace trainmem {

std::optional<TraceAction> parse_trace_action(std::string_view name) {
  for (const TraceActionName& a : kTraceActions)
    if (a.name == name) return a.action;
  return std::nullopt;
}

MemoryRecorder::MemoryRecorder() : phases_{"none"} {}

void MemoryRecorder::set_max_entries(std::size_t n) {
  max_entries_ = n;
  while (events_.size() > max_entries_) events_.pop_front();
}

std::size_t MemoryRecorder::max_event_bytes() const {
  if (max_entries_ == kAllEvents) return kAllEvents;
  // std::deque holds its elements in blocks: at most one partly used block at each end.
  constexpr std::size_t kDequeSlack = 2 * 512;
  return max_entries_ * sizeof(TraceEvent) + (max_entries_ > 0 ? kDequeSlack : 0);
}

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

std::uint32_t MemoryRecorder::name_index(std::string_view name) noexcept {
  if (!enabled_ || name.empty()) return 0;
  try {
    const auto [it, added] = name_indices_.try_emplace(std::string(name), static_cast<std::uint32_t>(names_.size()));
    if (added) names_.push_back(it->first);
    return it->second;
  } catch (const std::bad_alloc&) {
    stop("the host ran out of memory while recording");
  } catch (const std::exception& e) {
    stop(e.what());
  }
  return 0;
}

void MemoryRecorder::record(TraceAction action, std::uintptr_t address, std::size_t size, std::size_t block_size,
                            MemoryCategory category, StreamId stream, std::uint32_t name) noexcept {
  if (!enabled_) return;
  const TraceEvent event{next_seq_, action, address, size, block_size, category, stream, step_, phase_, name};
  try {
    if (max_entries_ > 0) {
      if (events_.size() >= max_entries_) events_.pop_front();
      events_.push_back(event);
    }
    if (sink_ != nullptr) sink_->write(event, *this);
    ++next_seq_;
  } catch (const std::bad_alloc&) {
    stop("the host ran out of memory while recording");
  } catch (const std::exception& e) {
    stop(e.what());
  } catch (...) {
    stop("an unknown error");
  }
}

void MemoryRecorder::stop(std::string_view reason) noexcept {
  enabled_ = false;
  failed_ = true;
  try {
    failure_ = "the memory recorder stopped at event " + std::to_string(next_seq_) + ": " + std::string(reason);
  } catch (...) {
    failure_.clear();  // failure() says what it can
  }
}

std::string MemoryRecorder::failure() const {
  if (!failed_) return "";
  return failure_.empty() ? "the memory recorder stopped: the host ran out of memory" : failure_;
}

void MemoryRecorder::throw_if_failed() const {
  if (failed_) throw RecordingError(failure());
}

nlohmann::json MemoryRecorder::event_json(const TraceEvent& e) const {
  nlohmann::json j = {{"seq", e.seq},
                      {"action", to_string(e.action)},
                      {"addr", e.address},
                      {"size", e.size},
                      {"block_size", e.block_size},
                      {"category", to_string(e.category)},
                      {"stream", e.stream},
                      {"step", e.step},
                      {"phase", phases_[e.phase]}};
  if (e.name != 0) j["name"] = names_[e.name];
  return j;
}

}  // namespace trainmem
