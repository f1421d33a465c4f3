// Fuzz target: `trainmem replay TRACE` on arbitrary bytes. The input is written to a temporary
// file and read by parse_trace_file (JSON, then the checks every trace passes before it runs), as
// cli_replay.cpp does; a trace that passes is replayed through a CachingAllocator on a small
// simulated card under each allocator configuration, and its result turned into the JSON the
// command prints.
//
// Expected, not findings: TraceError (the command's "trainmem: error: ..." and exit 2), any other
// std::exception from reading the file (main catches it: exit 1), and an OOM (a result of the
// replay). Anything else — a crash, a sanitizer report, a hang, a non-std exception, an exception
// from a replay of a trace parse_trace accepted — is a finding.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_replay.h"
#include "common/fuzz/scratch_file.h"

namespace {

constexpr std::size_t kBudget = std::size_t{64} << 20;  // a small card: OOMs and retries happen often

const char* const kConfigs[] = {
    "",                          // caching, PyTorch's defaults (and the recorder on)
    "max_split_size_mb:20",      // oversize blocks, the OOM retry that releases them
    "expandable_segments:True",  // pages mapped into one range per stream and pool
    "backend:raw",               // one device allocation per request
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const trainmem::fuzz::ScratchFolder scratch("trainmem_fuzz_trace");
  std::vector<trainmem::TraceOp> ops;
  try {
    ops = trainmem::parse_trace_file(scratch.write("trace.json", data, size));
  } catch (const trainmem::TraceError&) {
    return 0;  // a one-line input error: exit 2
  } catch (const std::exception&) {
    return 0;  // main catches it too (exit 1)
  }
  for (const char* text : kConfigs) {
    const trainmem::AllocatorConfig config = trainmem::AllocatorConfig::parse(text);
    trainmem::BudgetDeviceMemory device(kBudget, /*backed=*/false);
    trainmem::CachingAllocator allocator(device, config);
    allocator.recorder().enable(text[0] == '\0');
    // Not in a try: parse_trace accepted these ops, so the replay must not throw (an OOM is
    // part of its result).
    const trainmem::ReplayResult result = trainmem::replay_trace(ops, allocator);
    (void)trainmem::replay_result_to_json(result, config, kBudget).dump(2);
    for (const trainmem::TraceEvent& e : allocator.recorder().events()) (void)allocator.recorder().event_json(e).dump();
  }
  return 0;
}
