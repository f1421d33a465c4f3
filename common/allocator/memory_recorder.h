// The memory recorder: when enabled, the allocator logs every event that changes device memory,
// with the training step and phase it happened in. Off by default. The events and their action
// names are in trace_event.h; the names are PyTorch's (torch.cuda.memory._record_memory_history),
// so the log converts directly to PyTorch's snapshot format.
//
// Memory: the recorder keeps the last max_entries() events (PyTorch's max_entries; all by default)
// and passes every event to a sink if one is set: trace_file.h streams them to a file, so a run of
// any length holds at most max_entries() events (--record-memory keeps none, --memory-snapshot
// kSnapshotMaxEntries).
//
// The allocator records from inside allocate() and free(); a free must never throw (a tensor
// frees in its destructor). So record() is noexcept: if keeping or writing an event fails (a full
// disk, no host memory), the recorder stops, keeps the reason, and the program learns of it at a
// safe point through throw_if_failed() (the trainer's caller: after every step).
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/allocator/trace_event.h"

namespace trainmem {

// Recording stopped: the message says at which event and why (exit 1).
struct RecordingError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class MemoryRecorder;

// Where events go as they happen, besides the recorder's memory (trace_file.h: to a file).
class TraceSink {
 public:
  virtual ~TraceSink() = default;
  // Called inside the allocator, with its lock held. May throw: the recorder catches it and stops.
  virtual void write(const TraceEvent& event, const MemoryRecorder& recorder) = 0;
};

class MemoryRecorder {
 public:
  static constexpr std::size_t kAllEvents = std::numeric_limits<std::size_t>::max();

  MemoryRecorder();

  void enable(bool on = true) { enabled_ = on && !failed_; }
  bool enabled() const { return enabled_; }

  // How many events are kept in memory: the last n (older ones are dropped as new ones come);
  // 0 keeps none (a sink still sees each). Default kAllEvents.
  void set_max_entries(std::size_t n);
  std::size_t max_entries() const { return max_entries_; }
  // The host memory the kept events take at most (kAllEvents: no bound).
  std::size_t max_event_bytes() const;
  // Every event also goes to `sink` (nullptr: none); the sink must outlive its use here.
  void set_sink(TraceSink* sink) { sink_ = sink; }
  const TraceSink* sink() const { return sink_; }

  // Markers set by whoever drives the work (the trainer): "step 3, backward".
  void set_step(std::int64_t step) { step_ = step; }
  void set_phase(std::string_view phase);
  std::int64_t step() const { return step_; }
  std::string_view phase() const { return phases_[phase_]; }

  // The index of a tensor's name in names(), for record(); 0 when recording is off or the name
  // is empty. Each name is kept once: a run allocates the same names every step.
  std::uint32_t name_index(std::string_view name) noexcept;
  void record(TraceAction action, std::uintptr_t address, std::size_t size, std::size_t block_size,
              MemoryCategory category, StreamId stream, std::uint32_t name = 0) noexcept;

  // The kept events, oldest first (their seq numbers run on across dropped ones).
  const std::deque<TraceEvent>& events() const { return events_; }
  std::uint64_t events_recorded() const { return next_seq_; }  // kept, dropped or only streamed
  const std::vector<std::string>& phases() const { return phases_; }
  const std::vector<std::string>& names() const { return names_; }
  void clear() { events_.clear(); }

  // One event as the recorder's files write it: {"seq", "action", "addr", "size", "block_size",
  // "category", "stream", "step", "phase"[, "name": the tensor's, when the caller named it]}.
  nlohmann::json event_json(const TraceEvent& e) const;

  // Whether recording stopped on a failure, and why; throw_if_failed() throws RecordingError.
  bool failed() const { return failed_; }
  std::string failure() const;
  void throw_if_failed() const;

 private:
  void stop(std::string_view reason) noexcept;

  bool enabled_ = false;
  bool failed_ = false;
  std::string failure_;
  std::size_t max_entries_ = kAllEvents;
  TraceSink* sink_ = nullptr;
  std::uint64_t next_seq_ = 0;
  std::int64_t step_ = -1;
  std::uint16_t phase_ = 0;
  std::vector<std::string> phases_;
  std::vector<std::string> names_{""};
  std::unordered_map<std::string, std::uint32_t> name_indices_;
  std::deque<TraceEvent> events_;
};

}  // namespace trainmem
