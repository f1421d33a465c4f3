// Where in the training step each event of a memory snapshot's trace happened: the forward, the
// backward, the optimizer's step, zero_grad, or a range the program named itself.
//
// A snapshot says it in one of three ways, each read where present (for each event, the first
// that says something decides):
//   1. trainmem's own snapshots: each event's "phase" ("forward", "backward", "optimizer";
//      "none" says nothing) and "step".
//   2. Ranges of torch.profiler.record_function / torch.autograd.profiler.record_function, which
//      PyTorch records beside the trace: "external_annotations" (2.5 and later), each
//      {"name", "stage": "START" | "END", "device", "time_us"}, placed among the events by their
//      "time_us"; in 2.4, "user_defined" events inside the trace, frames[0] = {"name": "START" |
//      "END", "filename": the range's name}. The optimizers name theirs "Optimizer.step#AdamW.step"
//      and "Optimizer.zero_grad#AdamW.zero_grad"; `torch.profiler.profile().step()` opens
//      "ProfilerStep#N" (the step, not a phase). A range whose name holds "backward" or "forward" is
//      that phase; any other is a phase of its own name, used where nothing else says more.
//   3. The event's stack frames (`_record_memory_history(stacks=...)`): autograd's engine
//      (torch::autograd::Engine, a C++ frame of the thread the backward runs on) or
//      torch/autograd's backward: backward; a function named zero_grad: zero_grad; a file under
//      torch/optim/: optimizer; a Module's forward or _call_impl: forward.
// An event nothing says anything about (a free_completed, a free in the program's own loop, an
// event without frames) is in the phase of the event before it.
//
// Steps: recorded ones ("step", ProfilerStep#N) where there are; otherwise counted: the recording's
// step 1 begins at its first event and a new one at the first event after an optimizer phase that
// is not itself the optimizer's or zero_grad's (`steps_counted`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace trainmem {

struct SnapshotPhases {
  static constexpr std::uint16_t kUnknown = 0;  // names[0]: nothing in the snapshot says
  std::vector<std::string> names{"unknown"};
  std::vector<std::uint16_t> phase;             // per trace event: an index into names
  std::vector<std::uint32_t> step;              // per trace event: 0 where unknown
  bool steps_counted = false;                   // counted from the phases, not recorded
  std::vector<std::string> sources;             // what they were read from, for the output

  const std::string& phase_of(std::size_t event) const { return names[event < phase.size() ? phase[event] : kUnknown]; }
  std::uint32_t step_of(std::size_t event) const { return event < step.size() ? step[event] : 0; }

  // The runs of events in one phase and step, in order.
  struct Span {
    std::size_t first_event = 0, last_event = 0;
    std::uint16_t phase = kUnknown;
    std::uint32_t step = 0;
  };
  std::vector<Span> spans() const;
};

// The phase a record_function range's name stands for ("optimizer" for "Optimizer.step#AdamW.step"),
// or nullopt for a name of the program's own.
std::optional<std::string> phase_of_range_name(const std::string& name);

// The phase an event's stack frames ([{"name", "filename", "line"}], innermost first) show, or
// nullopt when they show none.
std::optional<std::string> phase_of_frames(const nlohmann::json& frames);

// The phases of one device's trace (`snapshot["device_traces"][device]`). Never throws for what
// it cannot read: a malformed annotation or frame says nothing (read_pytorch_snapshot checks the
// trace itself).
SnapshotPhases snapshot_phases(const nlohmann::json& snapshot, int device);

// The largest values a series reaches in each phase (and over all), with the event where each
// was first reached: "where the memory went".
class PhasePeaks {
 public:
  struct Peak {
    std::int64_t allocated = 0, reserved = 0;
    std::optional<std::size_t> allocated_event, reserved_event;  // where first reached (nullopt: no event)
    std::size_t events = 0;                                     // events counted in this phase
  };
  explicit PhasePeaks(std::size_t phases = 1) : per_phase_(phases) {}
  // The values after `event`, which is in phase `phase` (an index into SnapshotPhases::names).
  void add(std::uint16_t phase, std::size_t event, std::int64_t allocated, std::int64_t reserved);
  // Every value so far as if `allocated` and `reserved` more had been held throughout (the
  // reader's values are relative to where the recording began, known only at its end).
  void shift(std::int64_t allocated, std::int64_t reserved);
  std::size_t phases() const { return per_phase_.size(); }
  const Peak& of(std::uint16_t phase) const { return per_phase_[phase]; }
  const Peak& overall() const { return overall_; }

 private:
  static void raise(Peak& p, std::size_t event, std::int64_t allocated, std::int64_t reserved);
  std::vector<Peak> per_phase_;
  Peak overall_;
};

}  // namespace trainmem
