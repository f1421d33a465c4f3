#include "common/allocator/memory_snapshot.h"

#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/allocator/pytorch_snapshot.h"
#include "common/allocator/trace_file.h"
#include "common/results/result_json.h"

namespace trainmem {

namespace {

// The snapshot's JSON, in pieces to `out`: the segments, then the trace an entry at a time (a
// long trace is never one document in memory).
void write_snapshot(const CachingAllocator& allocator, const std::function<void(std::string_view)>& out) {
  // The segments in torch.cuda.memory_snapshot()'s shape (result_json.h), completed with the keys
  // PyTorch's _snapshot() also has: the device, whether the segment is expandable, and frames.
  nlohmann::json segments = segments_json(allocator.snapshot());
  for (nlohmann::json& segment : segments) {
    segment["device"] = 0;
    segment["is_expandable"] = allocator.config().expandable_segments;
    segment["frames"] = nlohmann::json::array();
    for (nlohmann::json& block : segment["blocks"]) block["frames"] = nlohmann::json::array();
  }
  out("{\"segments\": ");
  out(segments.dump());
  out(", \"allocator_settings\": ");  // as recent PyTorch records them (pytorch_snapshot.h)
  out(allocator_settings_json(allocator.config()).dump());
  out(", \"device_traces\": [[");  // one device
  const MemoryRecorder& recorder = allocator.recorder();
  bool first = true;
  for (const TraceEvent& e : recorder.events()) {
    if (!describe(e.action).in_pytorch_trace) continue;
    // A recorder event as a PyTorch trace entry, plus trainmem's own fields.
    nlohmann::json entry = recorder.event_json(e);
    entry["frames"] = nlohmann::json::array();
    out(first ? "\n" : ",\n");
    out(entry.dump());
    first = false;
  }
  out("]]}\n");
}

}  // namespace

nlohmann::json memory_snapshot_json(const CachingAllocator& allocator) {
  std::string text;
  write_snapshot(allocator, [&text](std::string_view piece) { text += piece; });
  return nlohmann::json::parse(text);
}

void write_memory_snapshot(const CachingAllocator& allocator, const std::string& path, const std::string& flag) {
  allocator.recorder().throw_if_failed();  // a trace that misses events is not written
  BufferedOutputFile file(path, flag);
  write_snapshot(allocator, [&file](std::string_view piece) { file.append(piece); });
  file.commit();
}

}  // namespace trainmem
