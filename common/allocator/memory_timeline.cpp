#include "common/allocator/memory_timeline.h"

#include <algorithm>

namespace trainmem {

// ceil(events / points) events a run, at least 1.
MemoryTimeline::MemoryTimeline(std::size_t events, std::size_t points)
    : run_length_(std::max<std::size_t>(1, (events + std::max<std::size_t>(points, 1) - 1) / std::max<std::size_t>(points, 1))) {}

void MemoryTimeline::add(std::size_t event, std::int64_t allocated, std::int64_t reserved) {
  if (!points_.empty() && points_.back().event / run_length_ == event / run_length_) {
    Point& p = points_.back();
    p.allocated = std::max(p.allocated, allocated);
    p.reserved = std::max(p.reserved, reserved);
    return;
  }
  points_.push_back({event, allocated, reserved});  // the first event of its run
}

void MemoryTimeline::shift(std::int64_t allocated, std::int64_t reserved) {
  for (Point& p : points_) {
    p.allocated += allocated;
    p.reserved += reserved;
  }
}

nlohmann::json MemoryTimeline::to_json(const std::string& allocated_name) const {
  std::vector<std::size_t> events;
  std::vector<std::int64_t> allocated, reserved;
  for (const Point& p : points_) {
    events.push_back(p.event);
    allocated.push_back(p.allocated);
    reserved.push_back(p.reserved);
  }
  nlohmann::json j = nlohmann::json::object();
  j["event"] = events;
  j[allocated_name] = allocated;
  j["reserved_bytes"] = reserved;
  return j;
}

}  // namespace trainmem
