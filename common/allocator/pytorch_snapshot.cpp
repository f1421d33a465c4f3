#include "common/allocator/pytorch_snapshot.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "common/util/checked_math.h"

namespace trainmem {

namespace {

// A field that must be a non-negative integer, or a TraceError naming it. PyTorch writes
// addresses, sizes and streams as Python ints (int64).
std::uint64_t count_field(const nlohmann::json& object, const char* field, const std::string& where) {
  if (!object.is_object() || !object.contains(field)) throw TraceError(where + ": missing \"" + field + "\"");
  const nlohmann::json& v = object.at(field);
  // (The pickle reader gives ints as signed, a JSON parser non-negative ones as unsigned.)
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    throw TraceError(where + ": \"" + field + "\" must be a non-negative integer, not " +
                     (v.is_structured() ? std::string(v.type_name()) : v.dump()));
  const std::uint64_t value = v.get<std::uint64_t>();
  if (value > kMaxBytes && std::string(field) != "addr" && std::string(field) != "address" &&
      std::string(field) != "stream")
    throw TraceError(where + ": \"" + field + "\" " + std::to_string(value) + " is more than any device holds");
  return value;
}

std::string event_where(const std::string& source, int device, std::size_t i) {
  return source + ": device_traces[" + std::to_string(device) + "][" + std::to_string(i) + "]";
}

// The device whose trace to read: the one asked for, or the only one with events.
int pick_device(const nlohmann::json& traces, const std::string& source, std::optional<int> asked) {
  if (asked) {
    if (*asked < 0 || static_cast<std::size_t>(*asked) >= traces.size())
      throw TraceError(source + ": --device " + std::to_string(*asked) + ": the snapshot has traces of devices 0 to " +
                       std::to_string(static_cast<long long>(traces.size()) - 1));
    return *asked;
  }
  std::vector<int> with_events;
  for (std::size_t d = 0; d < traces.size(); ++d)
    if (traces[d].is_array() && !traces[d].empty()) with_events.push_back(static_cast<int>(d));
  if (with_events.size() > 1) {
    std::string list;
    for (int d : with_events)
      list += (list.empty() ? "" : ", ") + std::to_string(d) + " (" + std::to_string(traces[d].size()) + " events)";
    throw TraceError(source + ": several devices have events: " + list + "; pick one with --device N");
  }
  return with_events.empty() ? 0 : with_events.front();
}

// allocator_settings, as recent PyTorch writes it: {"PYTORCH_CUDA_ALLOC_CONF": "...",
// "max_split_size": bytes (-1: unlimited), "expandable_segments": bool,
// "garbage_collection_threshold": float, "roundup_power2_divisions": {"1": n, ...}, ...}.
void read_settings(const nlohmann::json& snapshot, PytorchSnapshot& out) {
  if (!snapshot.contains("allocator_settings")) return;  // older PyTorch: the default (settings_recorded says so)
  const nlohmann::json& s = snapshot.at("allocator_settings");
  const std::string where = out.source + ": allocator_settings";
  if (!s.is_object()) throw TraceError(where + ": expected an object, found " + std::string(s.type_name()));
  out.settings_recorded = true;
  if (s.contains("PYTORCH_CUDA_ALLOC_CONF") && s.at("PYTORCH_CUDA_ALLOC_CONF").is_string()) {
    // The text as the user set it. Only the backend is taken from it (PyTorch's keys below say
    // the rest): trainmem's raw mode, which PyTorch does not have, is recorded nowhere else.
    out.recorded_settings_text = s.at("PYTORCH_CUDA_ALLOC_CONF").get<std::string>();
    try {
      out.recorded_config.backend = AllocatorConfig::parse(out.recorded_settings_text).backend;
    } catch (const AllocatorConfigError& e) {
      out.not_followed.push_back({std::nullopt, "PYTORCH_CUDA_ALLOC_CONF \"" + out.recorded_settings_text +
                                                    "\" not read (" + e.what() + "); its structured settings are"});
    }
  }
  if (s.contains("max_split_size")) {
    const nlohmann::json& v = s.at("max_split_size");
    // -1: unlimited (SIZE_MAX written as an int64); so is SIZE_MAX itself.
    const bool unlimited = (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() == -1) ||
                           (v.is_number_unsigned() && v.get<std::uint64_t>() >= std::uint64_t{1} << 62);
    // PyTorch keeps it at least 20 MiB, in whole MiB (max_split_size_mb).
    if (v.is_number_integer() && !unlimited && v.get<std::int64_t>() >= static_cast<std::int64_t>(kLargeBuffer) &&
        v.get<std::int64_t>() % static_cast<std::int64_t>(MiB) == 0)
      out.recorded_config.max_split_size = static_cast<std::size_t>(v.get<std::int64_t>());
    else if (!unlimited)
      throw TraceError(where + ": \"max_split_size\" must be -1 or a whole number of MiB from 20 MiB up, not " + v.dump());
  }
  if (s.contains("expandable_segments")) {
    if (!s.at("expandable_segments").is_boolean())
      throw TraceError(where + ": \"expandable_segments\" must be true or false");
    out.recorded_config.expandable_segments = s.at("expandable_segments").get<bool>();
  }
  if (s.contains("garbage_collection_threshold")) {
    const nlohmann::json& v = s.at("garbage_collection_threshold");
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1)
      throw TraceError(where + ": \"garbage_collection_threshold\" must be a number from 0 to 1, not " + v.dump());
    if (v.get<double>() > 0) {
      out.recorded_config.garbage_collection_threshold = v.get<double>();
      out.not_followed.push_back({std::nullopt, "garbage_collection_threshold " + v.dump() +
                                                    " recorded: it acts under a memory fraction of the card, which the "
                                                    "snapshot does not record; replayed as recorded, nothing is collected"});
    }
  }
  // {"1": N, "2": N, ..., "32768": N}: the divisions of each interval, keyed by its start in MiB.
  if (s.contains("roundup_power2_divisions")) {
    const nlohmann::json& d = s.at("roundup_power2_divisions");
    if (!d.is_object()) throw TraceError(where + ": \"roundup_power2_divisions\" must be an object {\"1\": N, ...}");
    for (const auto& [key, value] : d.items()) {
      std::size_t mb = 0;
      const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), mb);
      const bool key_ok = ec == std::errc() && ptr == key.data() + key.size() && mb != 0 && (mb & (mb - 1)) == 0;
      const bool value_ok = value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0);
      const std::uint64_t n = value_ok ? value.get<std::uint64_t>() : 0;
      if (!key_ok || !value_ok || (n > 1 && (n & (n - 1)) != 0) || n > (std::uint64_t{1} << 20))
        throw TraceError(where + ": roundup_power2_divisions: \"" + key + "\": " + value.dump() +
                         " is not an interval (MiB, a power of two) and its divisions (0 or a power of two)");
      const std::size_t index = std::min<std::size_t>(63 - static_cast<std::size_t>(__builtin_clzll(mb)), kRoundupIntervals - 1);
      out.recorded_config.roundup_power2_divisions[index] = n <= 1 ? 0 : static_cast<std::size_t>(n);
    }
  }
}

BlockSnapshot::State parse_block_state(const nlohmann::json& block, const std::string& where) {
  const std::string state = block.contains("state") && block.at("state").is_string() ? block.at("state").get<std::string>() : "";
  if (state == "active_allocated") return BlockSnapshot::State::active_allocated;
  if (state == "active_pending_free" || state == "active_awaiting_free") return BlockSnapshot::State::active_awaiting_free;
  if (state == "inactive") return BlockSnapshot::State::inactive;
  throw TraceError(where + ": \"state\" must be active_allocated, active_pending_free or inactive");
}

// The snapshot's segments of `device`, as the allocator's snapshot describes them.
std::vector<SegmentSnapshot> read_segments(const nlohmann::json& snapshot, const std::string& source, int device) {
  std::vector<SegmentSnapshot> segments;
  if (!snapshot.contains("segments")) return segments;
  const nlohmann::json& list = snapshot.at("segments");
  if (!list.is_array()) throw TraceError(source + ": \"segments\" must be a list");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& s = list[i];
    const std::string where = source + ": segments[" + std::to_string(i) + "]";
    if (!s.is_object()) throw TraceError(where + ": expected an object");
    if (s.contains("device") && s.at("device").is_number_integer() && s.at("device").get<std::int64_t>() != device) continue;
    SegmentSnapshot seg;
    seg.address = count_field(s, "address", where);
    seg.total_size = count_field(s, "total_size", where);
    seg.stream = s.contains("stream") ? count_field(s, "stream", where) : kDefaultStream;
    seg.is_small = s.contains("segment_type") && s.at("segment_type") == "small";
    seg.is_expandable = s.contains("is_expandable") && s.at("is_expandable").is_boolean() && s.at("is_expandable").get<bool>();
    if (!s.contains("blocks") || !s.at("blocks").is_array()) throw TraceError(where + ": missing \"blocks\" (a list)");
    std::uintptr_t next = seg.address;
    for (std::size_t j = 0; j < s.at("blocks").size(); ++j) {
      const nlohmann::json& b = s.at("blocks")[j];
      const std::string bwhere = where + ".blocks[" + std::to_string(j) + "]";
      BlockSnapshot block;
      block.size = count_field(b, "size", bwhere);
      // Older snapshots have no block addresses: the blocks tile the segment in order.
      block.address = b.contains("address") ? count_field(b, "address", bwhere) : next;
      block.state = parse_block_state(b, bwhere);
      block.requested_size = b.contains("requested_size") ? count_field(b, "requested_size", bwhere) : block.size;
      if (block.address != next) throw TraceError(bwhere + ": does not start where the block before it ends");
      if (block.size == 0 || block.size % kMinBlockSize != 0)
        throw TraceError(bwhere + ": \"size\" " + std::to_string(block.size) + " is not a positive multiple of 512");
      if (block.state != BlockSnapshot::State::inactive && (block.requested_size == 0 || block.requested_size > block.size))
        throw TraceError(bwhere + ": requested " + std::to_string(block.requested_size) + " bytes of a " +
                         std::to_string(block.size) + "-byte block");
      next += block.size;
      seg.blocks.push_back(block);
    }
    if (seg.total_size == 0 || seg.total_size % kMinBlockSize != 0)
      throw TraceError(where + ": \"total_size\" " + std::to_string(seg.total_size) + " is not a positive multiple of 512");
    if (seg.address > std::numeric_limits<std::uintptr_t>::max() - seg.total_size)
      throw TraceError(where + ": ends past the largest address");
    if (next - seg.address != seg.total_size)
      throw TraceError(where + ": its blocks cover " + std::to_string(next - seg.address) + " of its " +
                       std::to_string(seg.total_size) + " bytes");
    segments.push_back(std::move(seg));
  }
  return segments;
}

struct LiveBlock {
  std::size_t requested = 0;
  StreamId stream = kDefaultStream;
  std::size_t event = 0;
};

// A block live before the trace began, to be placed in its segment.
struct BlockBefore {
  std::uintptr_t address = 0;
  std::size_t requested = 0;
  std::size_t size = 0;  // 0: not known (a block the trace frees), inferred from its neighbours
  std::string where;     // for messages
};

// The running sum of a quantity the trace changes, and its highest value (relative to the start).
struct RunningPeak {
  std::int64_t value = 0, peak = 0;
  // `what` names the quantity for the error when it goes beyond what a device can hold.
  void add(std::int64_t amount, const char* what, const std::string& where) {
    value += amount;
    if (value > static_cast<std::int64_t>(kMaxTraceBytes) || value < -static_cast<std::int64_t>(kMaxTraceBytes))
      throw TraceError(where + ": the trace's " + what + " bytes go beyond " + std::to_string(kMaxTraceBytes) +
                       ", more than any device holds");
    peak = std::max(peak, value);
  }
  static constexpr std::size_t kMaxTraceBytes = kMaxBytes / 4;  // room to count them all in int64
};

// `before`'s segments: each held segment with its live blocks and the gaps between them free.
std::vector<SegmentSnapshot> lay_out_before(std::vector<SegmentSnapshot> segments, std::vector<BlockBefore> blocks,
                                            const AllocatorConfig& config) {
  std::sort(segments.begin(), segments.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
  std::sort(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
  std::size_t k = 0;
  for (SegmentSnapshot& seg : segments) {
    const std::uintptr_t end = seg.address + seg.total_size;
    std::vector<BlockSnapshot> laid;
    std::uintptr_t cursor = seg.address;
    for (; k < blocks.size() && blocks[k].address < end; ++k) {
      BlockBefore& b = blocks[k];
      if (b.address < cursor)
        throw TraceError(b.where + ": a block at " + std::to_string(b.address) +
                         (b.address < seg.address ? " lies in no segment held before the trace"
                                                  : " overlaps the block before it in its segment"));
      if ((b.address - seg.address) % kMinBlockSize != 0)
        throw TraceError(b.where + ": the block at " + std::to_string(b.address) +
                         " is not a multiple of 512 bytes into its segment");
      const std::uintptr_t next_start = k + 1 < blocks.size() ? std::min<std::uintptr_t>(blocks[k + 1].address, end) : end;
      std::size_t size = b.size;
      if (size == 0) {
        size = round_request(b.requested, config);
        // The large pool keeps a rest of at most 1 MiB inside the block (it is not split off).
        const std::uintptr_t rest_start = b.address + size;
        if (!seg.is_small && rest_start < next_start && next_start - rest_start <= kSmallSize)
          size = next_start - b.address;
      }
      if (size > end - b.address)
        throw TraceError(b.where + ": the block at " + std::to_string(b.address) + " (" + std::to_string(size) +
                         " bytes) runs past the end of its segment");
      if (b.address > cursor) laid.push_back({cursor, b.address - cursor, 0, BlockSnapshot::State::inactive, MemoryCategory::other});
      laid.push_back({b.address, size, b.requested, BlockSnapshot::State::active_allocated, MemoryCategory::other});
      cursor = b.address + size;
    }
    if (cursor < end) laid.push_back({cursor, end - cursor, 0, BlockSnapshot::State::inactive, MemoryCategory::other});
    seg.blocks = std::move(laid);
    seg.allocated_size = seg.active_size = seg.requested_size = 0;
    for (const BlockSnapshot& b : seg.blocks)
      if (b.state == BlockSnapshot::State::active_allocated) {
        seg.allocated_size += b.size;
        seg.active_size += b.size;
        seg.requested_size += b.requested_size;
      }
  }
  if (k < blocks.size() || (!blocks.empty() && segments.empty()))
    throw TraceError(blocks[std::min(k, blocks.size() - 1)].where + ": a block at " +
                     std::to_string(blocks[std::min(k, blocks.size() - 1)].address) +
                     " lies in no segment held before the trace");
  return segments;
}

}  // namespace

bool is_pytorch_snapshot(const nlohmann::json& document) {
  return document.is_object() && (document.contains("device_traces") || document.contains("segments"));
}

PytorchSnapshot read_pytorch_snapshot(const nlohmann::json& snapshot, const std::string& source,
                                      std::optional<int> device) {
  PytorchSnapshot out;
  out.source = source;
  if (!is_pytorch_snapshot(snapshot))
    throw TraceError(source + ": not a PyTorch memory snapshot (an object with \"device_traces\" and \"segments\")");
  static const nlohmann::json kNoTraces = nlohmann::json::array();
  const nlohmann::json& traces = snapshot.contains("device_traces") ? snapshot.at("device_traces") : kNoTraces;
  if (!traces.is_array()) throw TraceError(source + ": \"device_traces\" must be a list (one list of events per device)");
  out.device = pick_device(traces, source, device);
  read_settings(snapshot, out);
  if (out.recorded_config.expandable_segments)
    out.not_followed.push_back({std::nullopt, "recorded with expandable_segments:True: the replay follows its "
                                              "rules, but neither page maps nor block addresses are compared"});
  out.after = read_segments(snapshot, source, out.device);
  if (snapshot.contains("external_annotations") && snapshot.at("external_annotations").is_array())
    for (const auto& a : snapshot.at("external_annotations"))
      if (!a.is_object() || !a.contains("device") || a.at("device") == out.device) ++out.annotations;

  static const nlohmann::json kEmpty = nlohmann::json::array();
  const nlohmann::json& events = static_cast<std::size_t>(out.device) < traces.size() ? traces[out.device] : kEmpty;
  if (!events.is_array()) throw TraceError(source + ": device_traces[" + std::to_string(out.device) + "] must be a list");
  out.events = events.size();
  out.phases = snapshot_phases(snapshot, out.device);
  out.phases.phase.resize(events.size(), SnapshotPhases::kUnknown);
  out.recorded.memory = SnapshotMemory(out.phases.names.size(), events.size());

  std::unordered_map<std::uintptr_t, LiveBlock> live;        // blocks the trace allocated, still live
  std::unordered_set<std::uintptr_t> freed;                  // blocks the trace freed, not allocated again
  std::vector<BlockBefore> blocks_before;                    // freed without an alloc: live before
  std::unordered_map<std::uintptr_t, std::size_t> segments;  // segments the trace allocated, still held
  std::unordered_set<std::uintptr_t> segments_freed;         // segments the trace freed, not allocated again
  std::vector<SegmentSnapshot> segments_before;              // freed without a segment_alloc: held before
  RunningPeak reserved, requested;
  std::optional<std::size_t> free_run_start;  // segment_frees not yet followed by a segment_alloc
  bool awaiting_completion = false;  // the last free_requested, until its free_completed
  std::uintptr_t awaiting_address = 0;
  std::size_t awaiting_op = 0;
  // Frees another stream held up (record_stream): their free_completed comes later. Address -> op.
  std::unordered_map<std::uintptr_t, std::size_t> deferred;
  auto defer_awaiting = [&] {  // the last free_requested is not completed at once
    out.ops[awaiting_op].deferred = true;
    deferred[awaiting_address] = awaiting_op;
    awaiting_completion = false;
  };
  std::optional<std::int64_t> reserved_at_oom;
  std::uint64_t device_free_at_oom = 0;

  auto end_free_run = [&](std::size_t i) {  // a program event: a pending run of frees was empty_cache()
    if (!free_run_start) return;
    TraceOp op;
    op.action = TraceOp::Action::empty_cache;
    op.event = *free_run_start;
    op.device_window_end = i;
    out.ops.push_back(op);
    free_run_start.reset();
  };

  for (std::size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    const std::string where = event_where(source, out.device, i);
    if (!e.is_object() || !e.contains("action") || !e.at("action").is_string())
      throw TraceError(where + ": expected an object with an \"action\"");
    const std::string action = e.at("action").get<std::string>();
    if (action == "snapshot" || action == "annotate" || action == "user_defined") continue;  // markers
    // PyTorch writes an oom's device free bytes as "device_free"; trainmem's own snapshots as "addr".
    const char* addr_key = action == "oom" && (e.contains("device_free") || !e.contains("addr")) ? "device_free" : "addr";
    const std::uint64_t addr = count_field(e, addr_key, where);
    const std::size_t size = count_field(e, "size", where);
    const StreamId stream = e.contains("stream") ? count_field(e, "stream", where) : kDefaultStream;
    if (awaiting_completion && !(action == "free_completed" && addr == awaiting_address)) defer_awaiting();

    if ((action == "alloc" || action == "free_requested" || action == "segment_alloc" || action == "segment_free") &&
        size == 0)
      throw TraceError(where + ": " + action + " of 0 bytes (PyTorch records none)");
    if (action == "alloc" || action == "oom") {
      end_free_run(i);
      TraceOp op;
      op.event = i;
      op.size = size;
      op.stream = stream;
      op.device_window_end = i;
      // trainmem's own snapshots add each block's category (PyTorch's have none: "other").
      if (e.contains("category") && e.at("category").is_string())
        op.category = parse_memory_category(e.at("category").get<std::string>()).value_or(MemoryCategory::other);
      if (action == "oom") {
        op.id = -1 - static_cast<std::int64_t>(i);
        op.failed_in_trace = true;
        ++out.recorded.ooms;
        if (!reserved_at_oom) {
          reserved_at_oom = reserved.value;
          device_free_at_oom = addr;
        }
      } else {
        if (const auto it = live.find(addr); it != live.end())
          throw TraceError(where + ": alloc at " + std::to_string(addr) + ", which event " +
                           std::to_string(it->second.event) + " allocated and nothing freed");
        live[addr] = {size, stream, i};
        freed.erase(addr);
        requested.add(static_cast<std::int64_t>(size), "requested", where);
        op.id = static_cast<std::int64_t>(addr);
        op.address_recorded = !out.recorded_config.expandable_segments;  // (recorded_device_memory.h)
      }
      out.ops.push_back(op);
    } else if (action == "free_requested") {
      end_free_run(i);
      if (const auto it = live.find(addr); it != live.end()) {
        if (it->second.requested != size)
          throw TraceError(where + ": free of " + std::to_string(size) + " bytes at " + std::to_string(addr) +
                           ", which event " + std::to_string(it->second.event) + " allocated with " +
                           std::to_string(it->second.requested));
        live.erase(it);
      } else if (freed.count(addr)) {
        throw TraceError(where + ": free of the block at " + std::to_string(addr) + ", which the trace already freed");
      } else {
        blocks_before.push_back({addr, size, 0, where});  // allocated before recording began
      }
      freed.insert(addr);
      requested.add(-static_cast<std::int64_t>(size), "requested", where);
      TraceOp op;
      op.action = TraceOp::Action::free;
      op.id = static_cast<std::int64_t>(addr);
      op.event = i;
      op.device_window_end = i;
      out.ops.push_back(op);
      awaiting_completion = true;
      awaiting_address = addr;
      awaiting_op = out.ops.size() - 1;
    } else if (action == "free_completed") {
      if (awaiting_completion) {
        awaiting_completion = false;  // (defer_awaiting above took any other block's)
      } else if (const auto it = deferred.find(addr); it != deferred.end()) {
        out.ops[it->second].completes_at = i;
        deferred.erase(it);
      } else {
        out.not_followed.push_back({i, "free_completed of the block at " + std::to_string(addr) +
                                           ", which has no free_requested waiting: not followed"});
      }
    } else if (action == "segment_alloc" || action == "segment_free") {
      const bool is_alloc = action == "segment_alloc";
      if (is_alloc) {
        if (segments.count(addr)) throw TraceError(where + ": segment_alloc at " + std::to_string(addr) + ", which is already held");
        segments[addr] = size;
        segments_freed.erase(addr);
        ++out.recorded.segment_allocs;
        reserved.add(static_cast<std::int64_t>(size), "reserved", where);
        free_run_start.reset();  // the frees before it were this request's out-of-memory retry
      } else {
        if (const auto it = segments.find(addr); it != segments.end()) {
          if (it->second != size)
            throw TraceError(where + ": segment_free of " + std::to_string(size) + " bytes at " + std::to_string(addr) +
                             ", a segment of " + std::to_string(it->second));
          segments.erase(it);
        } else if (segments_freed.count(addr)) {
          throw TraceError(where + ": segment_free at " + std::to_string(addr) + ", which the trace already freed");
        } else {
          if (size % kMinBlockSize != 0)
            throw TraceError(where + ": a segment of " + std::to_string(size) + " bytes (not a multiple of 512)");
          if (addr > std::numeric_limits<std::uintptr_t>::max() - size)
            throw TraceError(where + ": a segment at " + std::to_string(addr) + " ends past the largest address");
          SegmentSnapshot held;  // allocated before recording began
          held.address = addr;
          held.total_size = size;
          held.stream = stream;
          held.is_small = size == kSmallBuffer;  // small segments are 2 MiB, large ones never are
          segments_before.push_back(held);
        }
        segments_freed.insert(addr);
        ++out.recorded.segment_frees;
        reserved.add(-static_cast<std::int64_t>(size), "reserved", where);
        // Right after the free of a block at its address: the raw backend giving the block back
        // with the free (that op's release); otherwise empty_cache's or a retry's.
        TraceOp* last = out.ops.empty() ? nullptr : &out.ops.back();
        if (out.recorded_config.backend == AllocatorConfig::Backend::raw && last && last->action == TraceOp::Action::free && static_cast<std::uint64_t>(last->id) == addr &&
            last->device_window_end + 2 >= i && !free_run_start)
          last->device_window_end = i + 1;
        else if (!free_run_start)
          free_run_start = i;
      }
      out.segment_events.push_back({is_alloc ? TraceAction::segment_alloc : TraceAction::segment_free, addr, size, stream, i});
    } else if (action == "segment_map" || action == "segment_unmap") {
      // Expandable segments: an unmap is a release (of empty_cache, or of the out-of-memory
      // retry when a map follows), as a segment_free is. The maps are not compared.
      const bool map = action == "segment_map";
      reserved.add(map ? static_cast<std::int64_t>(size) : -static_cast<std::int64_t>(size), "reserved", where);
      if (map) free_run_start.reset();
      else if (!free_run_start) free_run_start = i;
      ++(map ? out.recorded.segment_maps : out.recorded.segment_unmaps);
    } else {
      out.not_followed.push_back({i, "unknown action \"" + action + "\": not followed"});
    }
    out.recorded.memory.add(out.phases.phase[i], i, requested.value, reserved.value);
  }
  if (awaiting_completion) defer_awaiting();  // the last free: not completed in the trace
  end_free_run(events.size());

  // What the end says about before: segments and live blocks the trace never allocated.
  for (const SegmentSnapshot& seg : out.after) {
    if (const auto it = segments.find(seg.address); it != segments.end()) {
      segments.erase(it);
    } else if (segments_freed.count(seg.address)) {
      throw TraceError(source + ": the segment at " + std::to_string(seg.address) +
                       " is held at the end, but the trace freed it and never allocated it again");
    } else if (seg.is_expandable) {
      out.not_followed.push_back({std::nullopt, "an expandable segment's range at " + std::to_string(seg.address) +
                                                    " held before recording: not restored"});
      continue;
    } else {
      SegmentSnapshot held = seg;
      held.blocks.clear();
      segments_before.push_back(held);
    }
    for (const BlockSnapshot& b : seg.blocks) {
      if (b.state == BlockSnapshot::State::inactive) continue;
      if (live.erase(b.address)) continue;
      if (b.state == BlockSnapshot::State::active_awaiting_free && deferred.count(b.address)) continue;  // its free waits
      if (freed.count(b.address))
        throw TraceError(source + ": the block at " + std::to_string(b.address) +
                         " is live at the end, but the trace freed it and never allocated it again");
      blocks_before.push_back({b.address, b.requested_size, b.size, source + ": segments (block at " + std::to_string(b.address) + ")"});
    }
  }
  for (const auto& [address, size] : segments)
    out.not_followed.push_back({std::nullopt, "the segment the trace allocated at " + std::to_string(address) +
                                                  " is not among the snapshot's segments"});
  for (const auto& [address, block] : live)
    out.not_followed.push_back({block.event, "the block allocated at " + std::to_string(address) +
                                                 " is neither freed in the trace nor live in the snapshot's segments"});

  for (const SegmentSnapshot& s : segments_before) out.recorded.reserved_before += s.total_size;
  for (const BlockBefore& b : blocks_before) out.recorded.requested_before += b.requested;
  if (out.recorded.reserved_before > RunningPeak::kMaxTraceBytes || out.recorded.requested_before > RunningPeak::kMaxTraceBytes)
    throw TraceError(source + ": the segments held before the trace add up to more than any device holds");
  out.recorded.segments_before = segments_before.size();
  out.recorded.blocks_before = blocks_before.size();
  out.before = lay_out_before(std::move(segments_before), std::move(blocks_before), out.recorded_config);

  // The events' values were counted from where recording began.
  out.recorded.memory.shift(static_cast<std::int64_t>(out.recorded.requested_before),
                            static_cast<std::int64_t>(out.recorded.reserved_before));
  out.recorded.peak_reserved_bytes = out.recorded.reserved_before + static_cast<std::size_t>(reserved.peak);
  out.recorded.final_reserved_bytes = out.recorded.reserved_before + static_cast<std::size_t>(reserved.value);
  out.recorded.peak_requested_bytes = out.recorded.requested_before + static_cast<std::size_t>(requested.peak);
  if (reserved_at_oom)
    out.recorded.capacity_from_oom =
        out.recorded.reserved_before + static_cast<std::size_t>(*reserved_at_oom) + device_free_at_oom;
  return out;
}

ReplayObserver observe_into(SnapshotMemory& memory, const SnapshotPhases& phases) {
  return [&memory, &phases](const ReplayPoint& p) {
    memory.add(p.event < phases.phase.size() ? phases.phase[p.event] : SnapshotPhases::kUnknown, p.event, p.allocated,
               p.reserved);
  };
}

nlohmann::json allocator_settings_json(const AllocatorConfig& config) {
  nlohmann::json divisions = nlohmann::json::object();
  for (std::size_t i = 0; i < kRoundupIntervals; ++i)
    divisions[std::to_string(std::size_t{1} << i)] = config.roundup_power2_divisions[i];
  return {{"PYTORCH_CUDA_ALLOC_CONF", config.to_string()},
          {"max_split_size", config.max_split_size == kNoMaxSplit ? nlohmann::json(-1) : nlohmann::json(config.max_split_size)},
          {"expandable_segments", config.expandable_segments},
          {"garbage_collection_threshold", config.garbage_collection_threshold},
          {"roundup_power2_divisions", divisions}};
}

std::vector<std::string> snapshot_event_frames(const nlohmann::json& snapshot, int device, std::size_t event) {
  std::vector<std::string> frames;
  if (!snapshot.is_object() || !snapshot.contains("device_traces")) return frames;
  const nlohmann::json& traces = snapshot.at("device_traces");
  if (!traces.is_array() || device < 0 || static_cast<std::size_t>(device) >= traces.size()) return frames;
  const nlohmann::json& events = traces[device];
  if (!events.is_array() || event >= events.size() || !events[event].is_object() || !events[event].contains("frames"))
    return frames;
  for (const nlohmann::json& f : events[event].at("frames")) {
    if (!f.is_object()) continue;
    const std::string name = f.contains("name") && f.at("name").is_string() ? f.at("name").get<std::string>() : "?";
    const std::string file = f.contains("filename") && f.at("filename").is_string() ? f.at("filename").get<std::string>() : "";
    const std::string line = f.contains("line") && f.at("line").is_number_integer() ? std::to_string(f.at("line").get<std::int64_t>()) : "";
    frames.push_back(name + (file.empty() || file == "??" ? "" : " (" + file + (line.empty() || line == "0" ? "" : ":" + line) + ")"));
  }
  return frames;
}

}  // namespace trainmem
