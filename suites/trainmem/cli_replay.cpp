// trainmem replay FILE: runs what a program asked of the allocator through the caching allocator
// on a simulated device (no memory is touched) and says what it gives: peaks, segments, device
// allocations, where it runs out. FILE is one of
//   - a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle, or the same structure
//     as JSON): replayed as recorded, every decision compared with the real allocator's, or under
//     other settings and card sizes (--what-if: a table of them). suites/trainmem/replay_snapshot.h.
//   - a trace of trainmem's own: written by hand, or a recording (train --record-memory, replay
//     --record). common/allocator/trace_replay.h.
// Text by default; --json prints the replay's JSON (memory_stats with PyTorch's names).
#include <iostream>
#include <memory>
#include <optional>

#include "common/allocator/host_device_memory.h"
#include "common/allocator/trace_file.h"
#include "common/allocator/trace_replay.h"
#include "common/cli/output_flags.h"
#include "common/results/result_json.h"
#include "common/util/byte_size.h"
#include "common/util/output_file.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/replay_snapshot.h"

namespace trainmem::cli {

namespace {

struct ReplayFlags {
  std::string trace;
  DeviceFlags memory;  // only --device-memory and --allocator-config: the device is always simulated
  std::string gpu;     // --gpu NAME: a card of the GPU list instead of --device-memory
  std::optional<int> snapshot_device;  // --device N: which device of a snapshot
  std::string record;
  bool json = false;
  bool what_if = false;
};

void print_trace_text(const ReplayResult& r, const AllocatorConfig& config, std::size_t budget) {
  constexpr std::size_t all = stat_index(StatType::all);
  const MemoryStats& s = r.stats;
  std::cout << "Replayed " << r.events_replayed << " of " << r.events_total << " events under " << config.to_string()
            << " on a card of " << format_bytes(budget) << ":\n"
            << "  peak reserved     " << format_bytes(s.reserved_bytes[all].peak) << "\n"
            << "  peak allocated    " << format_bytes(s.allocated_bytes[all].peak) << "\n"
            << "  unallocated@peak  " << format_bytes(r.unallocated_at_peak_reserved) << "\n"
            << "  final reserved    " << format_bytes(s.reserved_bytes[all].current) << "\n"
            << "  final allocated   " << format_bytes(s.allocated_bytes[all].current) << "\n"
            << "  device allocs     " << s.num_device_alloc << " (frees " << s.num_device_free << ", retries "
            << s.num_alloc_retries << ")\n";
}

int run_trace_replay(const ReplayFlags& flags, std::size_t budget, const AllocatorConfig& config) {
  const std::vector<TraceOp> ops = parse_trace_file(flags.trace);  // every input error comes out here
  if (!flags.record.empty()) check_output_path(flags.record, "--record");
  if (flags.what_if || flags.snapshot_device)
    throw TraceError(flags.trace + ": " + (flags.what_if ? "--what-if" : "--device") +
                     " needs a PyTorch memory snapshot; this file is a trace of trainmem's own");

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
  if (flags.json) {
    DeviceInfo host = query_cpu_device_info();
    host.device_memory_bytes = budget;
    nlohmann::json json = replay_result_to_json(result, config, budget);
    json["device"] = host.to_json();
    json["device"]["name"] = "simulated: " + device.name();
    std::cout << json.dump(2) << '\n';
  } else {
    print_trace_text(result, config, budget);
  }
  if (record) record->finish();
  if (result.oom) {
    std::cerr << "trainmem replay: event " << result.oom_event_index << " ran out of memory\n"
              << result.oom->message() << '\n';
    return 1;
  }
  return 0;
}

int run_replay(const ReplayFlags& flags) {
  std::optional<std::size_t> capacity;
  std::string capacity_source;
  if (!flags.gpu.empty()) {
    const estimator::GpuSpec& gpu = estimator::find_gpu(flags.gpu);
    capacity = gpu.usable_bytes();
    capacity_source = "--gpu " + gpu.name;
  } else if (!flags.memory.device_memory.empty()) {
    capacity = flags.memory.device_memory_or(0);
    capacity_source = "--device-memory " + flags.memory.device_memory;
  }
  if (file_holds_snapshot(flags.trace)) {
    SnapshotReplayRequest request;
    request.device = flags.snapshot_device;
    if (!flags.memory.allocator_config.empty()) request.config = flags.memory.allocator();
    request.capacity = capacity;
    request.capacity_source = capacity_source;
    request.what_if = flags.what_if;
    request.json = flags.json;
    request.record = flags.record;
    return run_snapshot_replay(flags.trace, request);
  }
  return run_trace_replay(flags, capacity.value_or(kDefaultDeviceMemory), flags.memory.allocator());
}

}  // namespace

void add_replay_command(CLI::App& app, Command& run) {
  // The flags live as long as the callback below, which keeps this pointer.
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* replay = app.add_subcommand(
      "replay", "Replay a PyTorch memory snapshot or a trace through the allocator: peaks, segments, where it runs out");
  replay->footer(
      "FILE is a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot's pickle, read without running\n"
      "anything in it, or the same structure as JSON), or a trace of trainmem's own: a JSON list of\n"
      "{\"action\": \"alloc\"|\"free\"|\"empty_cache\", \"id\": N, \"size\": BYTES} (optional \"category\", \"stream\"),\n"
      "or {\"events\": [...]}, or a recording ('trainmem train --record-memory', 'replay --record').\n"
      "A snapshot with neither --allocator-config nor a card size is replayed as recorded: its own\n"
      "settings, the recorded device's answers, and every decision compared with the real allocator's.\n"
      "The device is simulated: no memory is touched. Exit 1 if the replay runs out of memory where the\n"
      "recorded run did not (the report goes to stderr).");
  replay->add_option("TRACE", flags->trace, "The snapshot or trace file")->type_name("FILE")->required();
  add_memory_flags(*replay, flags->memory);
  add_gpu_flag(*replay, flags->gpu, "Replay on this card of the GPU list instead of --device-memory");
  replay->add_option("--device", flags->snapshot_device,
                     "A snapshot's device to replay (default: the one whose trace has events)")
      ->type_name("N")
      ->check(CLI::NonNegativeNumber);
  replay->add_flag("--what-if", flags->what_if,
                   "A snapshot under other allocator settings (expandable segments, max_split_size_mb): a table, "
                   "the lowest peak reserved, and the smallest card that holds it");
  replay->add_flag("--json", flags->json, "Print JSON (the replay's memory_stats with PyTorch's names) instead of text");
  add_output_flag(*replay, "--record", flags->record, "Also write the allocator's event log (alloc, segment_alloc, ...) here");
  replay->callback([flags, replay, &run] {
    if (!flags->gpu.empty() && replay->count("--device-memory") > 0)
      throw CLI::ValidationError("--gpu", "give --gpu or --device-memory, not both");
    run = [flags] { return run_replay(*flags); };
  });
}

}  // namespace trainmem::cli
