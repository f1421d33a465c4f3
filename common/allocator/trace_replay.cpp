#include "common/allocator/trace_replay.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "common/results/result_json.h"
#include "common/util/checked_math.h"

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

}  // namespace

std::vector<TraceOp> parse_trace(const nlohmann::json& trace, const std::string& source) {
  const nlohmann::json* events = &trace;
  if (trace.is_object()) {
    if (!trace.contains("events"))
      throw TraceError(source + ": expected a list of events, or an object with \"events\": [...]; found an object without \"events\"");
    events = &trace.at("events");
  }
  if (!events->is_array())
    throw TraceError(source + ": expected a list of events (or {\"events\": [...]}), found " +
                     std::string(events->type_name()));

  std::vector<TraceOp> ops;
  ops.reserve(events->size());
  std::unordered_set<std::int64_t> live;  // ids allocated and not yet freed, to check frees now
  for (std::size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    const std::string where = source + ": event " + std::to_string(i);
    if (!e.is_object()) throw TraceError(where + ": expected an object, found " + std::string(e.type_name()));
    if (!e.contains("action")) throw TraceError(where + ": missing \"action\" (alloc, free or empty_cache)");
    if (!e.at("action").is_string())
      throw TraceError(where + ": \"action\" must be a string (alloc, free or empty_cache), not " + shown(e.at("action")));
    const std::string action = e.at("action").get<std::string>();

    TraceOp op;
    if (action == "empty_cache") {
      op.action = TraceOp::Action::empty_cache;
      ops.push_back(op);
      continue;
    }
    if (action != "alloc" && action != "free")
      throw TraceError(where + ": unknown action \"" + action + "\" (alloc, free or empty_cache)");

    const std::uint64_t id = read_count(e, "id", where);
    if (id > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw TraceError(where + ": \"id\" " + std::to_string(id) + " is too large");
    op.id = static_cast<std::int64_t>(id);

    if (action == "alloc") {
      op.action = TraceOp::Action::alloc;
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
      if (!live.insert(op.id).second)
        throw TraceError(where + ": alloc of id " + std::to_string(op.id) + " which is already allocated");
    } else {
      op.action = TraceOp::Action::free;
      if (live.erase(op.id) == 0)
        throw TraceError(where + ": free of id " + std::to_string(op.id) + " which is not allocated");
    }
    ops.push_back(op);
  }
  return ops;
}

std::vector<TraceOp> parse_trace_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw TraceError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) throw TraceError(path + ": is a directory, not a trace file");
  std::ifstream in(path);
  if (!in) throw TraceError(path + ": cannot open the file for reading");

  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann says "[json.exception.parse_error.101] parse error at line 3, column 5: ..." (or
    // "[json.exception.out_of_range.406] number overflow parsing '1e400'"): keep the part after
    // the bracketed tag, which names the position or the value.
    const std::string what = e.what();
    const auto tag_end = what.find("] ");
    throw TraceError(path + ": not valid JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
  return parse_trace(trace, path);
}

ReplayResult replay_trace(const std::vector<TraceOp>& ops, CachingAllocator& allocator) {
  ReplayResult result;
  result.events_total = ops.size();
  std::unordered_map<std::int64_t, void*> live;  // trace id -> the block it got
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const TraceOp& op = ops[i];
    switch (op.action) {
      case TraceOp::Action::alloc:
        try {
          live[op.id] = allocator.allocate(op.size, op.category, op.stream);  // nullptr for size 0
        } catch (const OutOfMemoryError& oom) {
          // Running out of memory is an answer of the replay, not an error in the trace: keep
          // the report, stop, and return the state at that point.
          result.oom = oom.report();
          result.oom_event_index = i;
        }
        break;
      case TraceOp::Action::free: {
        // parse_trace checked that the id is live, but ops may come from elsewhere.
        const auto it = live.find(op.id);
        if (it == live.end())
          throw TraceError("event " + std::to_string(i) + ": free of id " + std::to_string(op.id) +
                           " which is not allocated");
        allocator.free(it->second);
        live.erase(it);
        break;
      }
      case TraceOp::Action::empty_cache:
        allocator.empty_cache();
        break;
    }
    if (result.oom) break;
    result.events_replayed = i + 1;
  }
  result.stats = allocator.stats();
  result.fragmentation = allocator.fragmentation();
  result.segments = allocator.snapshot();
  return result;
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
           {{"peak_allocated_bytes", s.allocated_bytes[all].peak},
            {"peak_reserved_bytes", s.reserved_bytes[all].peak},
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
