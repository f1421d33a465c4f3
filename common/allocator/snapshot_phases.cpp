#include "common/allocator/snapshot_phases.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_map>

namespace trainmem {

namespace {

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The phases trainmem's recorder writes (common/train/trainer.cpp) and those the snapshot's other
// sources are read as: one vocabulary.
constexpr const char* kForward = "forward";
constexpr const char* kBackward = "backward";
constexpr const char* kOptimizer = "optimizer";
constexpr const char* kZeroGrad = "zero_grad";

const nlohmann::json* field(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

std::string string_field(const nlohmann::json& object, const char* key) {
  const nlohmann::json* v = field(object, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<std::int64_t> int_field(const nlohmann::json& object, const char* key) {
  const nlohmann::json* v = field(object, key);
  if (!v || !v->is_number_integer()) return std::nullopt;
  return v->is_number_unsigned() ? static_cast<std::int64_t>(std::min<std::uint64_t>(v->get<std::uint64_t>(), INT64_MAX))
                                 : v->get<std::int64_t>();
}

// "ProfilerStep#12" -> 12.
std::optional<std::uint32_t> profiler_step(const std::string& name) {
  constexpr std::string_view prefix = "ProfilerStep#";
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 9) return std::nullopt;
  std::uint32_t n = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
    n = n * 10 + static_cast<std::uint32_t>(name[i] - '0');
  }
  return n;
}

// A record_function range: its name and whether it opens or closes, at a time.
struct Range {
  std::int64_t time_us = 0;
  bool start = true;
  std::string name;
};

// The open ranges, innermost last.
class OpenRanges {
 public:
  void apply(const Range& r) {
    if (r.start) {
      open_.push_back(r.name);
      return;
    }
    // The innermost open range of that name closes (an END without its START, one opened before
    // recording began, closes nothing).
    for (std::size_t i = open_.size(); i-- > 0;)
      if (open_[i] == r.name) {
        open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
  // The innermost range that is a phase of the step, else the innermost of the program's own.
  std::optional<std::string> standard_phase() const {
    for (std::size_t i = open_.size(); i-- > 0;)
      if (auto p = phase_of_range_name(open_[i])) return p;
    return std::nullopt;
  }
  std::optional<std::string> own_phase() const {
    for (std::size_t i = open_.size(); i-- > 0;)
      if (!profiler_step(open_[i])) return open_[i];
    return std::nullopt;
  }
  std::optional<std::uint32_t> step() const {
    for (std::size_t i = open_.size(); i-- > 0;)
      if (auto s = profiler_step(open_[i])) return s;
    return std::nullopt;
  }

 private:
  std::vector<std::string> open_;
};

// The ranges of `device` in external_annotations, in time order.
std::vector<Range> external_ranges(const nlohmann::json& snapshot, int device) {
  std::vector<Range> ranges;
  const nlohmann::json* list = field(snapshot, "external_annotations");
  if (!list || !list->is_array()) return ranges;
  for (const nlohmann::json& a : *list) {
    const std::optional<std::int64_t> d = int_field(a, "device"), t = int_field(a, "time_us");
    const std::string stage = string_field(a, "stage"), name = string_field(a, "name");
    if ((d && *d != device) || !t || name.empty() || (stage != "START" && stage != "END")) continue;
    ranges.push_back({*t, stage == "START", name});
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.time_us < b.time_us; });
  return ranges;
}

// PyTorch 2.4's form: a "user_defined" event in the trace, frames[0] = {"name": START|END, "filename": the name}.
std::optional<Range> range_event(const nlohmann::json& e) {
  if (string_field(e, "action") != "user_defined") return std::nullopt;
  const nlohmann::json* frames = field(e, "frames");
  if (!frames || !frames->is_array() || frames->empty()) return std::nullopt;
  const std::string stage = string_field((*frames)[0], "name"), name = string_field((*frames)[0], "filename");
  if (name.empty() || (stage != "START" && stage != "END")) return std::nullopt;
  return Range{0, stage == "START", name};
}

}  // namespace

std::optional<std::string> phase_of_range_name(const std::string& name) {
  if (name.rfind("Optimizer.zero_grad", 0) == 0) return std::string(kZeroGrad);
  if (name.rfind("Optimizer.step", 0) == 0) return std::string(kOptimizer);
  const std::string l = lower(name);
  if (contains(l, "backward")) return std::string(kBackward);
  if (contains(l, "forward")) return std::string(kForward);
  if (contains(l, "zero_grad")) return std::string(kZeroGrad);
  return std::nullopt;
}

std::optional<std::string> phase_of_frames(const nlohmann::json& frames) {
  if (!frames.is_array()) return std::nullopt;
  bool zero_grad = false, optimizer = false, forward = false;
  for (const nlohmann::json& f : frames) {
    const std::string name = string_field(f, "name");
    std::string file = string_field(f, "filename");
    std::replace(file.begin(), file.end(), '\\', '/');  // a Windows path
    // Backward first: its frames may sit under a forward's (a backward called inside a module).
    if (contains(name, "autograd::Engine") || name == "_engine_run_backward" || contains(file, "torch/autograd/") ||
        (name == "backward" && contains(file, "torch/_tensor.py")))
      return std::string(kBackward);
    zero_grad = zero_grad || name == "zero_grad";
    optimizer = optimizer || contains(file, "torch/optim/");
    forward = forward || ((name == "forward" || name == "_call_impl") && !file.empty()) || contains(file, "torch/nn/modules/");
  }
  if (zero_grad) return std::string(kZeroGrad);
  if (optimizer) return std::string(kOptimizer);
  if (forward) return std::string(kForward);
  return std::nullopt;
}

std::vector<SnapshotPhases::Span> SnapshotPhases::spans() const {
  std::vector<Span> out;
  for (std::size_t i = 0; i < phase.size(); ++i) {
    const std::uint32_t s = step_of(i);
    if (!out.empty() && out.back().phase == phase[i] && out.back().step == s) out.back().last_event = i;
    else out.push_back({i, i, phase[i], s});
  }
  return out;
}

SnapshotPhases snapshot_phases(const nlohmann::json& snapshot, int device) {
  SnapshotPhases out;
  const nlohmann::json* traces = field(snapshot, "device_traces");
  if (!traces || !traces->is_array() || device < 0 || static_cast<std::size_t>(device) >= traces->size() ||
      !(*traces)[static_cast<std::size_t>(device)].is_array())
    return out;
  const nlohmann::json& events = (*traces)[static_cast<std::size_t>(device)];
  out.phase.assign(events.size(), SnapshotPhases::kUnknown);
  out.step.assign(events.size(), 0);

  std::unordered_map<std::string, std::uint16_t> index;
  auto phase_index = [&](const std::string& name) -> std::uint16_t {
    if (const auto it = index.find(name); it != index.end()) return it->second;
    if (out.names.size() >= 0xFFFF) return SnapshotPhases::kUnknown;  // a bound for a hostile file
    out.names.push_back(name);
    return index[name] = static_cast<std::uint16_t>(out.names.size() - 1);
  };

  const std::vector<Range> external = external_ranges(snapshot, device);
  std::size_t next_range = 0;
  OpenRanges open;
  bool from_own = false, from_ranges = !external.empty(), from_frames = false, steps_recorded = false;
  std::uint16_t current = SnapshotPhases::kUnknown;
  std::uint32_t current_step = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    // The ranges opened by now: a START at the event's own microsecond counts as before it, an END not.
    if (const std::optional<std::int64_t> t = int_field(e, "time_us"))
      while (next_range < external.size() &&
             (external[next_range].time_us < *t || (external[next_range].time_us == *t && external[next_range].start)))
        open.apply(external[next_range++]);
    if (const std::optional<Range> r = range_event(e)) {
      open.apply(*r);
      from_ranges = true;
    }

    std::optional<std::string> phase;
    const std::string own = string_field(e, "phase");
    if (!own.empty() && own != "none") {
      phase = own;
      from_own = true;
    }
    if (!phase) phase = open.standard_phase();
    if (!phase) {
      if (const nlohmann::json* frames = field(e, "frames"); frames && (phase = phase_of_frames(*frames))) from_frames = true;
    }
    if (!phase) phase = open.own_phase();
    if (phase) current = phase_index(*phase);

    std::optional<std::int64_t> step = int_field(e, "step");
    if (step && *step < 0) step.reset();  // trainmem's -1: before the first step
    if (!step)
      if (const auto s = open.step()) step = *s;
    if (step) {
      current_step = static_cast<std::uint32_t>(std::min<std::int64_t>(*step, UINT32_MAX));
      steps_recorded = true;
    }
    out.phase[i] = current;
    out.step[i] = current_step;
  }

  // No recorded steps: counted from the phases (a step ends with its optimizer's phases).
  if (!steps_recorded && out.names.size() > 1) {
    out.steps_counted = true;
    std::uint32_t s = 1;
    bool after_optimizer = false;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const std::string& name = out.names[out.phase[i]];
      const bool optimizer = name == kOptimizer || name == kZeroGrad;
      if (optimizer) after_optimizer = true;
      else if (after_optimizer) {
        ++s;
        after_optimizer = false;
      }
      out.step[i] = s;
    }
  }
  if (from_own) out.sources.push_back("trainmem's phases");
  if (from_ranges) out.sources.push_back("record_function ranges");
  if (from_frames) out.sources.push_back("stack frames");
  return out;
}

void PhasePeaks::raise(Peak& p, std::size_t event, std::int64_t allocated, std::int64_t reserved) {
  ++p.events;
  if (!p.allocated_event || allocated > p.allocated) {
    p.allocated = allocated;
    p.allocated_event = event;
  }
  if (!p.reserved_event || reserved > p.reserved) {
    p.reserved = reserved;
    p.reserved_event = event;
  }
}

void PhasePeaks::add(std::uint16_t phase, std::size_t event, std::int64_t allocated, std::int64_t reserved) {
  if (phase >= per_phase_.size()) per_phase_.resize(phase + std::size_t{1});
  raise(per_phase_[phase], event, allocated, reserved);
  raise(overall_, event, allocated, reserved);
}

void PhasePeaks::shift(std::int64_t allocated, std::int64_t reserved) {
  auto move = [&](Peak& p) {
    if (p.events == 0) return;
    p.allocated += allocated;
    p.reserved += reserved;
  };
  for (Peak& p : per_phase_) move(p);
  move(overall_);
}

}  // namespace trainmem
