// The memory recorder: when enabled, the allocator logs every event that changes device memory,
// with the training step and phase it happened in. Off by default (it costs a vector push per
// event). The action names are PyTorch's (torch.cuda.memory._record_memory_history), so the log
// converts directly to PyTorch's snapshot format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/device_memory.h"
#include "common/allocator/memory_category.h"

namespace trainmem {

enum class TraceAction {
  alloc,           // a block was handed to a caller
  free_requested,  // the caller freed it (it may still be in use by another stream)
  free_completed,  // the block is back in the cache (or returned to the device in raw mode)
  segment_alloc,   // a new segment was taken from the device (cudaMalloc)
  segment_free,    // a segment was given back to the device (cudaFree)
  oom,             // an allocation failed for good
  segment_map,     // expandable segments: pages were mapped at addr (size bytes: cuMemCreate + cuMemMap)
  segment_unmap,   // expandable segments: pages were unmapped and given back (cuMemUnmap + cuMemRelease)
};

std::string_view to_string(TraceAction a);

struct TraceEvent {
  std::uint64_t seq = 0;          // 0, 1, 2, ... in the order events happened
  TraceAction action = TraceAction::alloc;
  std::uintptr_t address = 0;     // block or segment address (0 for oom)
  std::size_t size = 0;           // alloc/free: the size the caller asked for; segment: its size;
                                  // segment_map/unmap: the bytes mapped/unmapped at addr;
                                  // oom: the rounded size that could not be served
  std::size_t block_size = 0;     // alloc/free: the block's size (rounded or whole); else == size
  MemoryCategory category = MemoryCategory::other;
  StreamId stream = kDefaultStream;
  std::int64_t step = -1;         // training step set by the trainer; -1 before the first
  std::uint16_t phase = 0;        // index into MemoryRecorder::phases()
  std::uint32_t name = 0;         // alloc/free/oom: index into MemoryRecorder::names() (0: not named)
};

class MemoryRecorder {
 public:
  MemoryRecorder();

  void enable(bool on = true) { enabled_ = on; }
  bool enabled() const { return enabled_; }

  // Markers set by whoever drives the work (the trainer): "step 3, backward".
  void set_step(std::int64_t step) { step_ = step; }
  void set_phase(std::string_view phase);
  std::int64_t step() const { return step_; }
  std::string_view phase() const { return phases_[phase_]; }

  // The index of a tensor's name in names(), for record(); 0 when recording is off or the name
  // is empty. Each name is kept once: a run allocates the same names every step.
  std::uint32_t name_index(std::string_view name);
  void record(TraceAction action, std::uintptr_t address, std::size_t size, std::size_t block_size,
              MemoryCategory category, StreamId stream, std::uint32_t name = 0);

  const std::vector<TraceEvent>& events() const { return events_; }
  const std::vector<std::string>& phases() const { return phases_; }
  const std::vector<std::string>& names() const { return names_; }
  void clear() { events_.clear(); }

  // {"phases": [...], "events": [{"seq", "action", "addr", "size", "block_size", "category",
  //   "stream", "step", "phase"[, "name": the tensor's, when the caller named it]}, ...]}
  nlohmann::json to_json() const;
  // Whole or not at all (common/util/output_file.h); `flag` names the path in an error message.
  void write_json(const std::string& path, const std::string& flag = "") const;  // throws OutputFileError

 private:
  bool enabled_ = false;
  std::int64_t step_ = -1;
  std::uint16_t phase_ = 0;
  std::vector<std::string> phases_;
  std::vector<std::string> names_{""};
  std::unordered_map<std::string, std::uint32_t> name_indices_;
  std::vector<TraceEvent> events_;
};

}  // namespace trainmem
