#include "suites/trainmem/replay_snapshot.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/recorded_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/device/device.h"
#include "common/util/byte_size.h"
#include "common/util/output_file.h"
#include "common/util/restricted_pickle.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/replay_phases.h"

namespace trainmem::cli {

namespace {

constexpr std::size_t kUnlimited = kMaxDeviceMemory;  // a card that never refuses

// "128.00 MiB (134217728 B)"
std::string bytes_text(std::size_t bytes) { return format_bytes(bytes) + " (" + std::to_string(bytes) + " B)"; }

// The frames an out-of-memory report shows, at most 6: the program's own (Python files); else (a
// request of autograd's own thread, in the backward) the autograd node and the operators, their
// C++ argument lists cut; else those outside PyTorch's and Python's machinery; else the first.
std::vector<std::string> oom_frames(const nlohmann::json& doc, int device, std::size_t event) {
  const std::vector<std::string> all = snapshot_event_frames(doc, device, event);
  auto pick = [&](auto&& keep) {
    std::vector<std::string> shown;
    for (const std::string& f : all)
      if (keep(f) && shown.size() < 6) shown.push_back(f);
    return shown;
  };
  std::vector<std::string> shown = pick([](const std::string& f) { return f.find(".py:") != std::string::npos; });
  if (shown.empty()) {
    shown = pick([](const std::string& f) {
      return f.find("autograd::generated::") != std::string::npos ||
             (f.rfind("at::_ops::", 0) == 0 && f.find("::call(") != std::string::npos);
    });
    for (std::string& f : shown) f = f.substr(0, f.find('('));
  }
  if (shown.empty())
    shown = pick([](const std::string& f) {
      for (const char* machinery : {"torch::", "c10::", "at::", "_Py", "Py", "??", "__libc", "_start", "start_thread",
                                    "__clone", "execute_native_thread_routine", "std::"})
        if (f.rfind(machinery, 0) == 0) return false;
      return true;
    });
  if (shown.empty()) shown = pick([](const std::string&) { return true; });
  return shown;
}

nlohmann::json oom_json(const ReplayResult& r, const nlohmann::json& doc, const PytorchSnapshot& snap) {
  if (!r.oom) return nullptr;
  const nlohmann::json place =
      place_json(snap.phases, 0, r.oom_before_trace ? std::nullopt : std::optional<std::size_t>(r.oom_event_index));
  nlohmann::json j = {{"event_index", r.oom_before_trace ? nlohmann::json(nullptr) : nlohmann::json(r.oom_event_index)},
                      {"before_trace", r.oom_before_trace},
                      {"phase", place["phase"]},
                      {"step", place["step"]},
                      {"requested_bytes", r.oom->requested_bytes},
                      {"device_request_bytes", r.oom->device_request_bytes},
                      {"frames", r.oom_before_trace ? std::vector<std::string>{} : oom_frames(doc, snap.device, r.oom_event_index)}};
  return j;
}

// A what-if row: {"allocator_config", "peak_reserved_bytes", ...}.
nlohmann::json row_json(const AllocatorConfig& config, const ReplayResult& r, const nlohmann::json& doc, const PytorchSnapshot& snap) {
  constexpr std::size_t all = stat_index(StatType::all);
  return {{"allocator_config", config.to_string()},
          {"label", config.label()},
          {"peak_reserved_bytes", r.stats.reserved_bytes[all].peak},
          {"peak_allocated_bytes", r.stats.allocated_bytes[all].peak},
          {"unallocated_at_peak_reserved_bytes", r.unallocated_at_peak_reserved},
          {"num_device_alloc", r.stats.num_device_alloc},
          {"oom", oom_json(r, doc, snap)}};
}

nlohmann::json snapshot_json(const PytorchSnapshot& s) {
  nlohmann::json notes = nlohmann::json::array();
  for (const SnapshotNote& n : s.not_followed)
    notes.push_back({{"event", n.event ? nlohmann::json(*n.event) : nlohmann::json(nullptr)}, {"text", n.text}});
  const RecordedFigures& f = s.recorded;
  return {{"source", s.source},
          {"device", s.device},
          {"trace_events", s.events},
          {"settings_recorded", s.settings_recorded},
          {"recorded_allocator_config", s.recorded_config.to_string()},
          {"recorded_pytorch_cuda_alloc_conf", s.recorded_settings_text},
          {"external_annotations", s.annotations},
          {"before_trace",
           {{"segments", f.segments_before}, {"reserved_bytes", f.reserved_before},
            {"blocks", f.blocks_before}, {"requested_bytes", f.requested_before}}},
          {"recorded",
           {{"peak_reserved_bytes", f.peak_reserved_bytes}, {"peak_requested_bytes", f.peak_requested_bytes},
            {"final_reserved_bytes", f.final_reserved_bytes}, {"segment_allocs", f.segment_allocs},
            {"segment_frees", f.segment_frees}, {"ooms", f.ooms},
            {"capacity_from_oom_bytes", f.capacity_from_oom ? nlohmann::json(*f.capacity_from_oom) : nlohmann::json(nullptr)}}},
          {"not_followed", notes}};
}

// Whether the replay's end has the snapshot's segments, block for block: addresses too, but for
// an expandable recording (its ranges are the replay's own: recorded_device_memory.h), whose
// segments are compared in order by their sizes and blocks.
bool same_layout(const std::vector<SegmentSnapshot>& a, const std::vector<SegmentSnapshot>& b, bool compare_addresses) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((compare_addresses && a[i].address != b[i].address) || a[i].total_size != b[i].total_size ||
        a[i].blocks.size() != b[i].blocks.size())
      return false;
    for (std::size_t k = 0; k < a[i].blocks.size(); ++k) {
      const BlockSnapshot &x = a[i].blocks[k], &y = b[i].blocks[k];
      if ((compare_addresses && x.address != y.address) || x.size != y.size || x.state != y.state) return false;
    }
  }
  return true;
}

// The smallest card of the GPU list on which the trace runs under `config` without running out.
const estimator::GpuSpec* smallest_card(const PytorchSnapshot& snap, const AllocatorConfig& config) {
  std::vector<const estimator::GpuSpec*> cards;
  for (const estimator::GpuSpec& g : estimator::gpu_catalog()) cards.push_back(&g);
  std::sort(cards.begin(), cards.end(), [](const auto* a, const auto* b) { return a->usable_bytes() < b->usable_bytes(); });
  for (const estimator::GpuSpec* g : cards)
    if (!replay_on_card(snap, config, g->usable_bytes()).oom) return g;
  return nullptr;
}

void print_notes(const PytorchSnapshot& s) {
  if (s.not_followed.empty()) return;
  std::cout << "  not followed:\n";
  for (const SnapshotNote& n : s.not_followed)
    std::cout << "    " << (n.event ? "event " + std::to_string(*n.event) + ": " : "") << n.text << '\n';
}

void print_oom(const ReplayResult& r, const nlohmann::json& doc, const PytorchSnapshot& snap, const std::string& indent) {
  if (!r.oom) return;
  if (r.oom_before_trace) {
    std::cout << indent << "out of memory before the first event: the segments held before recording do not fit\n";
    return;
  }
  std::cout << indent << "out of memory at " << place_text(snap.phases, r.oom_event_index) << ": " << format_bytes(r.oom->requested_bytes)
            << " requested, " << format_bytes(r.oom->device_request_bytes) << " asked of the device\n";
  for (const std::string& f : oom_frames(doc, snap.device, r.oom_event_index)) std::cout << indent << "  at " << f << '\n';
}

void print_what_if(const std::vector<std::pair<AllocatorConfig, ReplayResult>>& rows, std::size_t capacity,
                   const std::string& capacity_source, const std::string& first_row, const PytorchSnapshot& snap,
                   const nlohmann::json& doc) {
  constexpr std::size_t all = stat_index(StatType::all);
  std::cout << "\nWhat if (each row the same trace on a card of "
            << (capacity == kUnlimited ? std::string("unlimited size") : format_bytes(capacity)) << ", " << capacity_source << "):\n";
  std::cout << "  " << std::left << std::setw(40) << "allocator config" << std::right << std::setw(13) << "peak reserved"
            << std::setw(15) << "peak allocated" << std::setw(17) << "unallocated@peak" << std::setw(11) << "cudaMalloc"
            << "  out of memory\n";
  for (const auto& [config, r] : rows) {
    std::string label = config.label();
    if (&config == &rows.front().first) label += " " + first_row;
    std::cout << "  " << std::left << std::setw(40) << label << std::right << std::setw(13)
              << format_bytes(r.stats.reserved_bytes[all].peak) << std::setw(15) << format_bytes(r.stats.allocated_bytes[all].peak)
              << std::setw(17) << format_bytes(r.unallocated_at_peak_reserved) << std::setw(11) << r.stats.num_device_alloc
              << "  " << (r.oom ? (r.oom_before_trace ? std::string("before the trace") : "at event " + std::to_string(r.oom_event_index)) : "no")
              << '\n';
  }
  // Each out-of-memory point once, with the settings that ran out there.
  std::vector<std::pair<std::vector<std::string>, const ReplayResult*>> points;  // the settings, a result
  for (const auto& row : rows) {
    const AllocatorConfig& config = row.first;
    const ReplayResult& r = row.second;  // (not a structured binding: clang does not capture those)
    if (!r.oom) continue;
    auto same = std::find_if(points.begin(), points.end(), [&](const auto& p) {
      return p.second->oom_before_trace == r.oom_before_trace && p.second->oom_event_index == r.oom_event_index;
    });
    if (same == points.end()) points.push_back({{config.label()}, &r});
    else same->first.push_back(config.label());
  }
  auto joined = [](const std::vector<std::string>& labels) {
    std::string text;
    for (const std::string& l : labels) text += (text.empty() ? "" : ", ") + l;
    return text;
  };
  for (const auto& [labels, r] : points) {
    std::vector<std::string> others;  // the settings that did not run out here
    for (const auto& [config, row] : rows)
      if (std::find(labels.begin(), labels.end(), config.label()) == labels.end()) others.push_back(config.label());
    std::cout << "  " << (labels.size() > 2 ? std::to_string(labels.size()) + " settings" +
                                                  (others.empty() ? std::string(" (all)") : " (all but " + joined(others) + ")")
                                            : joined(labels))
              << ":\n";
    print_oom(*r, doc, snap, "    ");
  }
}

}  // namespace

namespace {

// The first bytes of a file.
std::string file_head(const std::string& path, std::size_t bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string head(bytes, '\0');
  if (in) in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(in ? bytes : static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head;
}

// Where JSON text starts (after a UTF-8 byte order mark and white space), or npos when the bytes
// cannot start a JSON object or list: a pickle then (protocol 0 and 1 have no PROTO opcode), which
// the pickle reader names or refuses.
std::size_t json_start(const std::string& head) {
  std::size_t i = head.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  return i < head.size() && (head[i] == '{' || head[i] == '[') ? i : std::string::npos;
}

}  // namespace

bool file_holds_snapshot(const std::string& path) {
  const std::string head = file_head(path, 4096);
  if (head.empty()) return false;  // the trace reader says what is wrong with it
  if (looks_like_pickle(head)) return true;
  std::size_t i = json_start(head);
  if (i == std::string::npos) return true;
  auto skip_space = [&] {
    while (i < head.size() && std::isspace(static_cast<unsigned char>(head[i]))) ++i;
  };
  if (head[i] != '{') return false;
  ++i;
  skip_space();
  if (i >= head.size() || head[i] != '"') return false;
  const std::size_t end = head.find('"', i + 1);
  if (end == std::string::npos) return false;
  const std::string key = head.substr(i + 1, end - i - 1);
  return key == "segments" || key == "device_traces" || key == "allocator_settings" || key == "external_annotations";
}

nlohmann::json read_snapshot_document(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open the file for reading");
  const std::string head = file_head(path, 4096);
  if (looks_like_pickle(head) || json_start(head) == std::string::npos) {
    try {
      return read_restricted_pickle_file(path);
    } catch (const PickleError& e) {
      throw TraceError(e.what());
    }
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    const std::string what = e.what();
    const auto tag_end = what.find("] ");
    throw TraceError(path + ": not valid JSON: " + (tag_end == std::string::npos ? what : what.substr(tag_end + 2)));
  }
}

ReplayResult replay_on_card(const PytorchSnapshot& snapshot, const AllocatorConfig& config, std::size_t capacity,
                            const ReplayObserver& observe) {
  BudgetDeviceMemory card(capacity, /*backed=*/false);
  CachingAllocator allocator(card, config);
  return replay_trace(snapshot.ops, allocator, snapshot.before, nullptr, observe);
}

std::vector<AllocatorConfig> what_if_settings(const AllocatorConfig& recorded) {
  std::vector<AllocatorConfig> settings{recorded};
  auto add = [&](AllocatorConfig c) {
    if (std::find(settings.begin(), settings.end(), c) == settings.end()) settings.push_back(c);
  };
  AllocatorConfig expandable = recorded;
  expandable.expandable_segments = !recorded.expandable_segments;
  add(expandable);
  for (std::size_t mb : {32, 128, 512}) {
    AllocatorConfig split = recorded;
    split.expandable_segments = false;
    split.max_split_size = mb * MiB;
    add(split);
  }
  for (std::size_t divisions : {4, 8}) {
    AllocatorConfig roundup = recorded;
    roundup.roundup_power2_divisions.fill(divisions);
    add(roundup);
  }
  for (double threshold : {0.6, 0.8}) {  // acts only against a card's size
    AllocatorConfig gc = recorded;
    gc.garbage_collection_threshold = threshold;
    add(gc);
  }
  return settings;
}

int run_snapshot_replay(const std::string& path, const SnapshotReplayRequest& request) {
  const nlohmann::json doc = read_snapshot_document(path);
  const PytorchSnapshot snap = read_pytorch_snapshot(doc, path, request.device);
  if (!request.record.empty()) check_output_path(request.record, "--record");
  const bool as_recorded = !request.config && !request.capacity;
  const AllocatorConfig config = request.config.value_or(snap.recorded_config);
  // The card of a replay that is not the recorded device: the size given, else the memory the
  // recorded process could have had (from an oom event), else unlimited.
  const std::size_t capacity = request.capacity.value_or(snap.recorded.capacity_from_oom.value_or(kUnlimited));
  const std::string capacity_source = request.capacity                     ? request.capacity_source
                                      : snap.recorded.capacity_from_oom ? "the recorded process's, from its oom event"
                                                                           : "the snapshot does not record the card's size";

  // The replay asked for: as recorded (the recorded device's answers, compared), or on a card.
  std::optional<RecordedDeviceMemory> recorded_device;
  std::optional<BudgetDeviceMemory> card;
  DeviceMemory* device = nullptr;
  if (as_recorded) device = &recorded_device.emplace(snap.segment_events);
  else device = &card.emplace(capacity, /*backed=*/false);
  CachingAllocator allocator(*device, config);
  std::optional<TraceFileWriter> record;
  if (!request.record.empty()) {
    allocator.recorder().set_max_entries(0);
    allocator.recorder().enable();
    record.emplace(allocator.recorder(), request.record, "--record");
  }
  SnapshotMemory replayed(snap.phases.names.size(), snap.events);
  const ReplayResult result = replay_trace(snap.ops, allocator, snap.before, recorded_device ? &*recorded_device : nullptr,
                                           observe_into(replayed, snap.phases));
  if (record) record->finish();
  const bool same_end = same_layout(result.segments, snap.after, !config.expandable_segments);

  std::vector<std::pair<AllocatorConfig, ReplayResult>> rows;
  const std::size_t what_if_capacity = capacity;
  if (request.what_if)
    for (const AllocatorConfig& c : what_if_settings(config)) rows.emplace_back(c, replay_on_card(snap, c, what_if_capacity));
  // The lowest peak reserved over the whole trace: each setting on a card that never refuses
  // (a row that ran out on the card above stopped early, so its peak is not the run's).
  std::optional<AllocatorConfig> best;
  std::int64_t best_peak = 0;
  for (const auto& [c, r] : rows) {
    const std::int64_t peak = (r.oom || what_if_capacity != kUnlimited ? replay_on_card(snap, c, kUnlimited) : r)
                                  .stats.reserved_bytes[0].peak;
    if (!best || peak < best_peak) {
      best = c;
      best_peak = peak;
    }
  }
  const estimator::GpuSpec* card_for_best = best ? smallest_card(snap, *best) : nullptr;

  if (request.json) {
    nlohmann::json j = replay_result_to_json(result, config, as_recorded ? 0 : capacity);
    if (as_recorded) j["device_memory_bytes"] = nullptr;
    j["replayed_as_recorded"] = as_recorded;
    j["snapshot"] = snapshot_json(snap);
    j["oom"] = result.oom ? j["oom"] : nlohmann::json(nullptr);
    if (result.oom) {
      const nlohmann::json placed = oom_json(result, doc, snap);
      for (const char* key : {"frames", "phase", "step"}) j["oom"][key] = placed[key];
    }
    j["peak_reserved_event"] = result.peak_reserved_event ? nlohmann::json(*result.peak_reserved_event) : nlohmann::json(nullptr);
    j["unallocated_at_peak_reserved_bytes"] = result.unallocated_at_peak_reserved;
    j["recorded_ooms_again"] = result.recorded_ooms_again;
    j["recorded_ooms_served"] = result.recorded_ooms_served;
    j["segments_as_snapshot"] = same_end;
    if (as_recorded)
      j["comparison"] = {
          {"divergence", result.divergence ? nlohmann::json{{"event", result.divergence->event},
                                                            {"what", result.divergence->what},
                                                            {"rule", result.divergence->rule}}
                                           : nlohmann::json(nullptr)},
          {"segment_events_matched", result.segment_events_matched},
          {"segment_events_recorded", result.segment_events_recorded}};
    if (request.what_if) {
      j["what_if"] = nlohmann::json::array();
      for (const auto& [c, r] : rows) j["what_if"].push_back(row_json(c, r, doc, snap));
      // (null: a card that never refuses, the snapshot not saying how large the real one was)
      j["what_if_device_memory_bytes"] = what_if_capacity == kUnlimited ? nlohmann::json(nullptr) : nlohmann::json(what_if_capacity);
      j["lowest_peak_reserved"] = {{"allocator_config", best->to_string()},
                                   {"label", best->label()},
                                   {"peak_reserved_bytes", best_peak},
                                   {"smallest_gpu", card_for_best ? nlohmann::json(card_for_best->name) : nlohmann::json(nullptr)}};
    }
    // The lowest setting's timeline, beside the replayed one (over the whole trace, as its peak).
    std::optional<SnapshotMemory> lowest;
    if (best) replay_on_card(snap, *best, kUnlimited, observe_into(lowest.emplace(snap.phases.names.size(), snap.events), snap.phases));
    add_where_json(j, snap, replayed, lowest ? &*lowest : nullptr, best ? best->to_string() : std::string());
    std::cout << j.dump(2) << '\n';
  } else {
    constexpr std::size_t all = stat_index(StatType::all);
    const RecordedFigures& f = snap.recorded;
    std::cout << "trainmem replay: " << path << " (PyTorch memory snapshot, device " << snap.device << ", "
              << snap.events << " events)\n"
              << "  before recording: " << f.segments_before << " segments (" << format_bytes(f.reserved_before) << "), "
              << f.blocks_before << " live blocks (" << format_bytes(f.requested_before) << " requested)\n"
              << "  settings: "
              << (snap.settings_recorded ? snap.recorded_config.label() + " (recorded)"
                                         : std::string("not recorded (PyTorch before 2.5): the default assumed"))
              << '\n';
    print_notes(snap);
    std::cout << '\n'
              << (as_recorded ? "Replayed as recorded (" + config.label() + ", the recorded device's own answers):\n"
                              : "Replayed under " + config.label() + " on a card of " +
                                    (capacity == kUnlimited ? std::string("unlimited size") : format_bytes(capacity)) +
                                    " (" + capacity_source + "):\n");
    auto compare = [&](const char* name, std::size_t replayed, std::size_t recorded) {
      std::cout << "  " << std::left << std::setw(18) << name << bytes_text(replayed);
      if (as_recorded) std::cout << (replayed == recorded ? "  = recorded" : "  recorded: " + bytes_text(recorded));
      std::cout << '\n';
    };
    compare("peak reserved", static_cast<std::size_t>(result.stats.reserved_bytes[all].peak), f.peak_reserved_bytes);
    compare("peak requested", static_cast<std::size_t>(result.stats.requested_bytes[all].peak), f.peak_requested_bytes);
    std::cout << "  " << std::left << std::setw(18) << "peak allocated" << bytes_text(result.stats.allocated_bytes[all].peak)
              << "\n  " << std::setw(18) << "unallocated@peak" << bytes_text(result.unallocated_at_peak_reserved)
              << " (reserved but not allocated when reserved peaked, "
              << (result.peak_reserved_event ? "at event " + std::to_string(*result.peak_reserved_event)
                                             : std::string("before the first event"))
              << ")\n  " << std::setw(18) << "cudaMalloc calls" << result.stats.num_device_alloc
              << (as_recorded ? " (recorded: " + std::to_string(f.segment_allocs) + ")" : std::string()) << '\n';
    if (as_recorded) {
      if (result.divergence)
        std::cout << "  decisions         differ first at event " << result.divergence->event << ": "
                  << result.divergence->what << "\n                    (rule: " << result.divergence->rule << ")\n";
      else
        std::cout << "  decisions         the real allocator's: " << result.segment_events_matched << " of "
                  << result.segment_events_recorded << " segment events, every block at its recorded address\n";
      std::cout << "  segments at end   " << (same_end ? "the snapshot's, block for block" : "differ from the snapshot's")
                << '\n';
    }
    print_oom(result, doc, snap, "  ");
    print_where(snap, replayed);
    if (request.what_if) {
      print_what_if(rows, what_if_capacity, capacity_source, request.config ? "(as given)" : "(as recorded)", snap, doc);
      std::cout << "\nLowest peak reserved over the whole trace: " << best->label() << " ("
                << format_bytes(best_peak) << ")"
                << (card_for_best ? "; the smallest card that holds the run with it: " + card_for_best->name + " (" +
                                        format_bytes(card_for_best->usable_bytes()) + " usable)"
                                  : std::string("; no card of the GPU list holds the run"))
                << '\n';
    }
  }
  if (result.oom) {
    if (request.what_if && !request.json) return 1;  // the table says where and why
    std::cerr << "trainmem replay: " << (result.oom_before_trace ? std::string("before the first event")
                                                                  : "event " + std::to_string(result.oom_event_index))
              << " ran out of memory\n"
              << result.oom->message() << '\n';
    return 1;
  }
  return 0;
}

}  // namespace trainmem::cli
