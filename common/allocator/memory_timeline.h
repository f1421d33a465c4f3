// A run's memory against its trace's events, at a bounded number of points, for a plot: the
// events are cut into at most `points` runs of equal length, and each run keeps the largest value
// of each series in it, so a line through the points reaches every peak (only dips shorter than a
// run are lost). A trace of millions of events costs `points` entries, as a short one does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainmem {

class MemoryTimeline {
 public:
  // `events`: how many the trace has (the runs' length follows from it); `points` > 0.
  MemoryTimeline(std::size_t events, std::size_t points);
  // The values after event `event` (events in increasing order).
  void add(std::size_t event, std::int64_t allocated, std::int64_t reserved);
  // Every value so far as if `allocated` and `reserved` more had been held throughout.
  void shift(std::int64_t allocated, std::int64_t reserved);
  std::size_t size() const { return points_.size(); }

  // {"event": [each run's first event], <allocated_name>: [...], "reserved_bytes": [...]}
  nlohmann::json to_json(const std::string& allocated_name) const;

 private:
  struct Point {
    std::size_t event;  // the first event of its run that was added
    std::int64_t allocated, reserved;
  };
  std::size_t run_length_;
  std::vector<Point> points_;
};

}  // namespace trainmem
