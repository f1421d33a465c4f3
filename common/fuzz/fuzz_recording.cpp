// Fuzz target: `trainmem replay` reading the recorder's own format (--record-memory, replay
// --record: common/allocator/trace_file.h), and the round trip through it.
//
// The input is a recording's text (the seeds are real ones: corpus/fuzz_recording). It is read as
// `trainmem replay` reads a file (parse_trace_stream). A trace the reader accepts is replayed on a
// small simulated card with the recorder on, its events written in the recorder's format as the
// writer writes them (trace_text_*); that recording is read back and replayed again, and must give
// the same figures: a recording replays to what was recorded.
//
// Expected, not findings: TraceError (the command's "trainmem: error: ..." and exit 2) and an
// OOM (a result of the replay). Anything else — a crash, a sanitizer report, a hang, another
// exception, the reader refusing the recorder's own output, or a round trip that changes a
// figure — is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/allocator/trace_replay.h"

namespace {

constexpr std::size_t kBudget = std::size_t{64} << 20;  // a small card: OOMs and retries happen often

const char* const kConfigs[] = {
    "",                          // caching, PyTorch's defaults
    "expandable_segments:True",  // segment_map / segment_unmap in the recording
    "backend:raw",               // a segment per request
};

// Collects the recorder's events as the file's text.
class TextSink final : public trainmem::TraceSink {
 public:
  void write(const trainmem::TraceEvent& event, const trainmem::MemoryRecorder& recorder) override {
    text += trainmem::trace_text_event(recorder, event, first_);
    first_ = false;
  }
  std::string text{trainmem::trace_text_begin()};

 private:
  bool first_ = true;
};

struct Replayed {
  trainmem::ReplayResult result;
  std::string recording;  // the replay's own events, in the recorder's format
};

Replayed replay(const std::vector<trainmem::TraceOp>& ops, const trainmem::AllocatorConfig& config) {
  trainmem::BudgetDeviceMemory device(kBudget, /*backed=*/false);
  trainmem::CachingAllocator allocator(device, config);
  TextSink sink;
  allocator.recorder().set_max_entries(0);
  allocator.recorder().set_sink(&sink);
  allocator.recorder().enable();
  Replayed r{trainmem::replay_trace(ops, allocator), {}};
  allocator.recorder().set_sink(nullptr);
  if (allocator.recorder().failed()) std::abort();  // recording never fails here
  r.recording = sink.text + trainmem::trace_text_end(allocator.recorder());
  return r;
}

bool same_figures(const trainmem::MemoryStats& a, const trainmem::MemoryStats& b) {
  return a.to_json() == b.to_json();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<trainmem::TraceOp> ops;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    ops = trainmem::parse_trace_stream(in, "recording.json");
  } catch (const trainmem::TraceError&) {
    return 0;  // a one-line input error: exit 2
  }
  for (const char* text : kConfigs) {
    const trainmem::AllocatorConfig config = trainmem::AllocatorConfig::parse(text);
    const Replayed first = replay(ops, config);
    // Not in a try: the recorder's own output must be read back.
    std::istringstream in(first.recording);
    const Replayed second = replay(trainmem::parse_trace_stream(in, "round-trip.json"), config);
    if (!same_figures(first.result.stats, second.result.stats)) std::abort();
    if (first.result.oom.has_value() != second.result.oom.has_value()) std::abort();
  }
  return 0;
}
