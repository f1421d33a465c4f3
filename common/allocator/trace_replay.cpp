#include "common/allocator/trace_replay.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/results/result_json.h"
#include "common/util/checked_math.h"
#include "generated/result_schema.h"

namespace trainmem {

namespace {

// A value as an error message shows it: a number or string as written, an array or object by its
// kind only. (dump() of a value nested 60,000 deep recurses until the stack overflows.)
std::string shown(const nlohmann::json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  const std::string text = v.dump();
  return text.size() <= 80 ? text : text.substr(0, 77) + "...";
}

// Reads a field that must be a non-negative integer (an id, a size, a stream), or says what is
// wrong with it. `where` is "trace.json: event 3".
std::uint64_t read_count(const nlohmann::json& event, const char* field, const std::string& where) {
  if (!event.contains(field)) throw TraceError(where + ": missing \"" + field + "\"");
  const nlohmann::json& v = event.at(field);
  // nlohmann stores non-negative integers as unsigned and negative ones as signed.
  if (!v.is_number_unsigned())
    throw TraceError(where + ": \"" + field + "\" must be a non-negative integer, not " + shown(v));
  return v.get<std::uint64_t>();
}

// The actions a trace may name, for messages.
std::string known_actions() {
  std::string text = "alloc, free or empty_cache; or one the recorder writes:";
  for (const TraceActionName& a : kTraceActions) text += " " + std::string(a.name);
  return text;
}

// What the replay does with a recorded event (trace_replay.h says why): every action of
// trace_event.h is decided here, and the compiler checks that none is left out.
std::optional<TraceOp::Action> replay_action(TraceAction recorded) {
  switch (recorded) {
    case TraceAction::alloc: return TraceOp::Action::alloc;
    case TraceAction::free_requested: return TraceOp::Action::free;
    case TraceAction::empty_cache: return TraceOp::Action::empty_cache;
    case TraceAction::oom: return TraceOp::Action::alloc;  // tried again
    case TraceAction::free_completed:
    case TraceAction::segment_alloc:
    case TraceAction::segment_free:
    case TraceAction::segment_map:
    case TraceAction::segment_unmap: return std::nullopt;  // the allocator's answers: made anew
  }
  return std::nullopt;
}

// The ops of a trace, an event at a time, each checked as it comes.
class TraceReader {
 public:
  explicit TraceReader(const std::string& source) : source_(source) {}
  void add(const nlohmann::json& e);  // the next event of the list
  std::size_t events() const { return next_event_; }
  std::vector<TraceOp> take() { return std::move(ops_); }

 private:
  std::string source_;
  std::size_t next_event_ = 0;
  std::vector<TraceOp> ops_;
  std::unordered_set<std::int64_t> live_;  // ids allocated and not yet freed, to check frees now
};

void TraceReader::add(const nlohmann::json& e) {
  TraceOp op;
  op.event = next_event_++;
  const std::string where = source_ + ": event " + std::to_string(op.event);
  if (!e.is_object()) throw TraceError(where + ": expected an object, found " + std::string(e.type_name()));
  if (!e.contains("action")) throw TraceError(where + ": missing \"action\" (" + known_actions() + ")");
  if (!e.at("action").is_string())
    throw TraceError(where + ": \"action\" must be a string (" + known_actions() + "), not " + shown(e.at("action")));
  const std::string action = e.at("action").get<std::string>();

  // "free" is the hand-written form's; "alloc" with an "id" too. Everything else is the
  // recorder's (its alloc names the block by "addr"), or unknown.
  const bool hand_written = action == "free" || (action == "alloc" && e.contains("id"));
  bool recorded_oom = false;
  if (hand_written) {
    op.action = action == "free" ? TraceOp::Action::free : TraceOp::Action::alloc;
  } else {
    const std::optional<TraceAction> recorded = parse_trace_action(action);
    if (!recorded) throw TraceError(where + ": unknown action \"" + action + "\" (" + known_actions() + ")");
    const std::optional<TraceOp::Action> replayed = replay_action(*recorded);
    if (!replayed) return;  // passed over
    op.action = *replayed;
    recorded_oom = *recorded == TraceAction::oom;
  }
  if (op.action == TraceOp::Action::empty_cache) {
    ops_.push_back(op);
    return;
  }

  if (recorded_oom) {
    op.id = -1 - static_cast<std::int64_t>(op.event);  // its own id: nothing frees it
  } else {
    const char* field = hand_written ? "id" : "addr";
    if (!hand_written && action == "alloc" && !e.contains("addr"))
      throw TraceError(where + ": missing \"id\" (or \"addr\", as the recorder writes it)");
    const std::uint64_t id = read_count(e, field, where);
    if (id > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw TraceError(where + ": \"" + field + "\" " + std::to_string(id) + " is too large");
    op.id = static_cast<std::int64_t>(id);
  }

  if (op.action == TraceOp::Action::alloc) {
    static_assert(sizeof(std::size_t) >= sizeof(std::uint64_t), "sizes are read as 64-bit integers");
    op.size = static_cast<std::size_t>(read_count(e, "size", where));
    if (op.size > kMaxBytes)
      throw TraceError(where + ": \"size\" " + std::to_string(op.size) +
                       " is more than the largest request the allocator counts, " + describe_limit(kMaxBytes) + " bytes");
    if (e.contains("category")) {
      const nlohmann::json& name = e.at("category");
      const auto category = name.is_string() ? parse_memory_category(name.get<std::string>()) : std::nullopt;
      if (!category)
        throw TraceError(where + ": unknown category " + shown(name) +
                         " (parameters, gradients, optimizer_state, activations, workspace, data, communication, other)");
      op.category = *category;
    }
    if (e.contains("stream")) op.stream = static_cast<StreamId>(read_count(e, "stream", where));
    if (!live_.insert(op.id).second)
      throw TraceError(where + ": alloc of id " + std::to_string(op.id) + " which is already allocated");
  } else {
    if (live_.erase(op.id) == 0)
      throw TraceError(where + ": free of id " + std::to_string(op.id) + " which is not allocated");
  }
  ops_.push_back(op);
}

// The list of events in a trace's top level: the list itself, or {"events": [...]}.
const nlohmann::json& event_list(const nlohmann::json& trace, const std::string& source) {
  const nlohmann::json* events = &trace;
  if (trace.is_object()) {
    if (!trace.contains("events"))
      throw TraceError(source + ": expected a list of events, or an object with \"events\": [...]; found an object without \"events\"");
    events = &trace.at("events");
  }
  if (!events->is_array())
    throw TraceError(source + ": expected a list of events (or {\"events\": [...]}), found " +
                     std::string(events->type_name()));
  return *events;
}

}  // namespace

std::vector<TraceOp> parse_trace(const nlohmann::json& trace, const std::string& source) {
  TraceReader reader(source);
  for (const nlohmann::json& e : event_list(trace, source)) reader.add(e);
  return reader.take();
}

std::vector<TraceOp> parse_trace_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw TraceError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw TraceError(path + ": is a directory, not a trace file");
  std::ifstream in(path);
  if (!in) throw TraceError(path + ": cannot open the file for reading");
  return parse_trace_stream(in, path);
}

std::vector<TraceOp> parse_trace_stream(std::istream& in, const std::string& source) {
  // Each event is read as the parser completes it, then dropped from the document (the callback
  // returns false): what stays is the trace's outline, which event_list checks at the end.
  // nlohmann's depths: a container at depth d has its keys and elements at depth d + 1.
  TraceReader reader(source);
  int events_depth = -1;  // the depth of the events while inside their list; -1 outside it
  bool key_is_events = false;  // the top-level object's last key was "events"
  using Event = nlohmann::json::parse_event_t;
  auto read_event = [&](int depth, Event event, nlohmann::json& parsed) {
    if (events_depth < 0) {  // outside the list: find where it starts
      if (depth == 1 && event == Event::key) key_is_events = parsed == "events";
      if (event == Event::array_start && (depth == 0 || (depth == 1 && key_is_events))) events_depth = depth + 1;
      return true;
    }
    if (depth == events_depth - 1 && event == Event::array_end) events_depth = -1;  // the list ends
    if (depth != events_depth) return true;
    switch (event) {
      case Event::object_end:
        reader.add(parsed);
        return false;  // read: dropped from the document
      case Event::value:
        reader.add(parsed);  // not an object: the reader says so
        return false;
      case Event::array_start:
        reader.add(nlohmann::json::array());  // not an object: the reader says so
        return false;
      default:
        return true;
    }
  };
  nlohmann::json outline;
  try {
    outline = nlohmann::json::parse(in, read_event);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann says "[json.exception.parse_error.101] parse error at line 3, column 5: ..." (or
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'"): keep the part after
    // the bracketed tag, which names the position or the value.
    const std::string what = e.what();
    const auto tag_end = what.find("] ");
    throw TraceError(source + ": not valid JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
  (void)event_list(outline, source);  // the outline's checks: a list, or {"events": [...]}
  return reader.take();
}

ReplayResult replay_trace(const std::vector<TraceOp>& ops, CachingAllocator& allocator,
                          const std::vector<SegmentSnapshot>& before, RecordedDeviceMemory* follow,
                          const ReplayObserver& observe) {
  ReplayResult result;
  result.events_total = ops.size();
  result.followed = follow != nullptr;
  std::unordered_map<std::int64_t, void*> live;  // trace id -> the block it got
  std::int64_t peak_reserved = -1;
  auto note_peak = [&](std::optional<std::size_t> event) {
    const MemoryStats s = allocator.stats();
    constexpr std::size_t all = stat_index(StatType::all);
    if (event && observe)
      observe({*event, s.allocated_bytes[all].current, s.reserved_bytes[all].current, s.requested_bytes[all].current});
    if (s.reserved_bytes[all].current > peak_reserved) {
      peak_reserved = s.reserved_bytes[all].current;
      result.peak_reserved_event = event;
      result.unallocated_at_peak_reserved =
          static_cast<std::size_t>(s.reserved_bytes[all].current - s.allocated_bytes[all].current);
    }
  };
  auto finish = [&] {
    result.stats = allocator.stats();
    result.fragmentation = allocator.fragmentation();
    result.segments = allocator.snapshot();
    if (follow) {
      result.divergence = follow->divergence();
      result.segment_events_matched = follow->matched_events();
      result.segment_events_recorded = follow->recorded_events();
    }
    return result;
  };

  // Where the allocator stood when the trace began.
  for (const SegmentSnapshot& segment : before) {
    if (follow) follow->restore_next(segment.address);
    try {
      const std::vector<void*> blocks = allocator.restore_segment(segment);
      std::size_t k = 0;
      for (const BlockSnapshot& b : segment.blocks)
        if (b.state == BlockSnapshot::State::active_allocated) live[static_cast<std::int64_t>(b.address)] = blocks[k++];
    } catch (const OutOfMemoryError& oom) {
      result.oom = oom.report();
      result.oom_before_trace = true;
      return finish();
    }
  }
  note_peak(std::nullopt);

  // The trace's event the replay is at, for the frees another stream held up: shared, as the
  // allocator keeps their completion tests past this call.
  const auto now = std::make_shared<std::size_t>(0);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TraceOp& op = ops[i];
    *now = op.event;
    if (follow) follow->begin_op(op);
    void* block = nullptr;  // an alloc's
    switch (op.action) {
      case TraceOp::Action::alloc:
        try {
          block = allocator.allocate(op.size, op.category, op.stream);  // nullptr for size 0
          live[op.id] = block;
          if (op.failed_in_trace) ++result.recorded_ooms_served;
        } catch (const OutOfMemoryError& oom) {
          if (op.failed_in_trace) {
            ++result.recorded_ooms_again;  // as recorded: the run went on without it
          } else {
            // Running out of memory is an answer of the replay, not an error in the trace: keep
            // the report, stop, and return the state at that point.
            result.oom = oom.report();
            result.oom_event_index = op.event;
          }
        }
        break;
      case TraceOp::Action::free: {
        // parse_trace checked that the id is live, but ops may come from elsewhere.
        const auto it = live.find(op.id);
        if (it == live.end())
          throw TraceError("event " + std::to_string(op.event) + ": free of id " + std::to_string(op.id) +
                           " which is not allocated");
        if (op.deferred)
          allocator.free_after(it->second, [now, at = op.completes_at] { return at && *now > *at; });
        else
          allocator.free(it->second);
        live.erase(it);
        break;
      }
      case TraceOp::Action::empty_cache:
        allocator.empty_cache();
        break;
    }
    if (follow) {
      follow->end_op();  // first: a segment event missed says more than the address that follows from it
      const auto address = reinterpret_cast<std::uintptr_t>(block);
      if (op.address_recorded && block && address != static_cast<std::uintptr_t>(op.id))
        follow->diverge(op.event,
                        "the real allocator placed this " + std::to_string(op.size) + "-byte block at " +
                            std::to_string(op.id) + ", the replay at " + std::to_string(address),
                        "cache search (best fit on the stream; ties by address) and the split rule");
    }
    if (result.oom) break;
    note_peak(op.event);
    result.events_replayed = i + 1;
  }
  return finish();
}

nlohmann::json replay_result_to_json(const ReplayResult& r, const AllocatorConfig& config,
                                     std::size_t device_memory_bytes) {
  const MemoryStats& s = r.stats;
  constexpr std::size_t all = stat_index(StatType::all);
  nlohmann::json oom = nullptr;
  if (r.oom) {
    oom = {{"event_index", r.oom_event_index},
           {"requested_bytes", r.oom->requested_bytes},
           {"rounded_bytes", r.oom->rounded_bytes},
           {"device_request_bytes", r.oom->device_request_bytes},
           {"capacity_bytes", r.oom->capacity_bytes},
           {"message", r.oom->message()}};
  }
  return {{"allocator_config", config.to_string()},
          {"device_memory_bytes", device_memory_bytes},
          {"events", r.events_total},
          {"events_replayed", r.events_replayed},
          {"summary",
           {{result_schema::memory_peak_allocated, s.allocated_bytes[all].peak},
            {result_schema::memory_peak_reserved, s.reserved_bytes[all].peak},
            {"final_allocated_bytes", s.allocated_bytes[all].current},
            {"final_reserved_bytes", s.reserved_bytes[all].current},
            {"num_device_alloc", s.num_device_alloc},
            {"num_device_free", s.num_device_free},
            {"num_alloc_retries", s.num_alloc_retries},
            {"num_ooms", s.num_ooms}}},
          {"memory_stats", s.to_json()},
          {"fragmentation", fragmentation_json(r.fragmentation)},
          {"segments", segments_json(r.segments)},
          {"oom", oom}};
}

}  // namespace trainmem
