// trainmem replay TRACE.json: runs a trace of allocations and frees through the caching allocator
// on a simulated device (a budget; no memory is touched) and prints the final and peak statistics
// as JSON on stdout. "How would this workload fragment under these settings?"
#include <iostream>
#include <memory>
#include <optional>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/allocator/trace_replay.h"
#include "common/cli/output_flags.h"
#include "common/results/result_json.h"
#include "common/util/output_file.h"
#include "suites/trainmem/cli_common.h"

namespace trainmem::cli {

namespace {

struct ReplayFlags {
  std::string trace;
  DeviceFlags memory;  // only --device-memory and --allocator-config: the device is always simulated
  std::string record;
};

int run_replay(const ReplayFlags& flags) {
  const std::size_t budget = flags.memory.device_memory_or(kDefaultDeviceMemory);
  const AllocatorConfig config = flags.memory.allocator();
  const std::vector<TraceOp> ops = parse_trace_file(flags.trace);  // every input error comes out here
  if (!flags.record.empty()) check_output_path(flags.record, "--record");

  BudgetDeviceMemory device(budget, /*backed=*/false);
  CachingAllocator allocator(device, config);
  // --record: the replay's own events, streamed to the file (none kept in memory).
  std::optional<TraceFileWriter> record;
  if (!flags.record.empty()) {
    allocator.recorder().set_max_entries(0);
    allocator.recorder().enable();
    record.emplace(allocator.recorder(), flags.record, "--record");
  }
  const ReplayResult result = replay_trace(ops, allocator);

  // An OOM is still a result: the JSON (with "oom") goes to stdout, the report to stderr, exit 1.
  // Like every result, it says what ran it: the host, and the simulated card's size.
  DeviceInfo host = query_cpu_device_info();
  host.device_memory_bytes = budget;
  nlohmann::json json = replay_result_to_json(result, config, budget);
  json["device"] = host.to_json();
  json["device"]["name"] = "simulated: " + device.name();
  std::cout << json.dump(2) << '\n';
  if (record) record->finish();
  if (result.oom) {
    std::cerr << "trainmem replay: event " << result.oom_event_index << " ran out of memory\n"
              << result.oom->message() << '\n';
    return 1;
  }
  return 0;
}

}  // namespace

void add_replay_command(CLI::App& app, Command& run) {
  // The flags live as long as the callback below, which keeps this pointer.
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* replay = app.add_subcommand(
      "replay", "Replay a trace of allocations and frees through the allocator; print its statistics as JSON");
  replay->footer(
      "TRACE is a JSON list of {\"action\": \"alloc\"|\"free\"|\"empty_cache\", \"id\": N, \"size\": BYTES}\n"
      "(optional \"category\": parameters|gradients|...|other, \"stream\": N), or {\"events\": [...]};\n"
      "or a recording: 'trainmem train --record-memory' or 'replay --record' output, replayed as the\n"
      "program asked (alloc, free_requested, empty_cache, and an oom's request tried again).\n"
      "The device is simulated: no memory is touched. Exit 1 if the trace runs out of memory\n"
      "(the JSON on stdout then has \"oom\", and the report goes to stderr).");
  replay->add_option("TRACE", flags->trace, "The trace file (JSON)")->type_name("FILE")->required();
  add_memory_flags(*replay, flags->memory);
  add_output_flag(*replay, "--record", flags->record, "Also write the allocator's event log (alloc, segment_alloc, ...) here");
  replay->callback([flags, &run] { run = [flags] { return run_replay(*flags); }; });
}

}  // namespace trainmem::cli
