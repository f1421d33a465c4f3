#include "common/allocator/memory_snapshot.h"

#include <nlohmann/json.hpp>

#include "common/results/result_json.h"
#include "common/util/output_file.h"

namespace trainmem {

namespace {

// One recorded event as a PyTorch trace entry, plus trainmem's own fields.
nlohmann::json trace_entry(const TraceEvent& e, const MemoryRecorder& recorder) {
  return {{"action", to_string(e.action)},
          {"addr", e.address},
          {"size", e.size},
          {"stream", e.stream},
          {"frames", nlohmann::json::array()},
          {"seq", e.seq},
          {"block_size", e.block_size},
          {"category", to_string(e.category)},
          {"step", e.step},
          {"phase", recorder.phases()[e.phase]}};
}

}  // namespace

nlohmann::json memory_snapshot_json(const CachingAllocator& allocator) {
  // The segments in torch.cuda.memory_snapshot()'s shape (result_json.h), completed with the keys
  // PyTorch's _snapshot() also has: the device, whether the segment is expandable, and frames.
  nlohmann::json segments = segments_json(allocator.snapshot());
  for (nlohmann::json& segment : segments) {
    segment["device"] = 0;
    segment["is_expandable"] = allocator.config().expandable_segments;
    segment["frames"] = nlohmann::json::array();
    for (nlohmann::json& block : segment["blocks"]) block["frames"] = nlohmann::json::array();
  }

  const MemoryRecorder& recorder = allocator.recorder();
  nlohmann::json trace = nlohmann::json::array();
  for (const TraceEvent& e : recorder.events()) trace.push_back(trace_entry(e, recorder));

  nlohmann::json device_traces = nlohmann::json::array();
  device_traces.push_back(std::move(trace));  // one device
  return {{"segments", std::move(segments)}, {"device_traces", std::move(device_traces)}};
}

void write_memory_snapshot(const CachingAllocator& allocator, const std::string& path, const std::string& flag) {
  write_output_file(path, memory_snapshot_json(allocator).dump() + '\n', flag);
}

}  // namespace trainmem
