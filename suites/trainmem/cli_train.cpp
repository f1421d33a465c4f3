// trainmem train: trains a GPT on the chosen device and shows its memory as it goes.
//
//   trainmem train --model tiny --steps 300 --json run.json
//   step   10/300 | fp32 accum=1 ... | loss 4.2210 | 21.4 ms | 11963 tok/s | mem 2.91 MiB/24.00 MiB | peak 8.09 MiB/24.00 MiB | ETA 0:06
//   done: 300 steps in 6.42 s | mean step 21.4 ms | 11963 tok/s | peak allocated 8.09 MiB | peak reserved 24.00 MiB
//
// (progress_line.h: on a terminal the line fits its width.) mem=ALLOCATED/RESERVED is what the program holds / what the allocator holds from the device,
// the familiar "GPU=1.3GB/6.8GB" readout; the gap between them is cached free memory.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <vector>

#include "common/allocator/memory_snapshot.h"
#include "common/allocator/trace_file.h"
#include "common/comm/communicator.h"
#include "common/comm/rank_agreement.h"
#include "common/data/dataset_check.h"
#include "common/data/token_file.h"
#include "common/results/result_json.h"
#include "common/train/trainer.h"
#include "common/util/byte_size.h"
#include "common/util/checked_math.h"
#include "common/util/host_memory.h"
#include "common/util/output_file.h"
#include "common/data/host_tokens.h"
#include "common/train/training_run.h"
#include "generated/result_schema.h"
#include "suites/trainmem/cli_common.h"
#include "common/cli/flag_ranges.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/command_settings.h"
#include "suites/trainmem/estimator/meta_run.h"
#include "suites/trainmem/estimator/oom_advice.h"
#include "suites/trainmem/progress_line.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

// The files the run will write (common/util/output_file.h): each path can be written.
void check_output_flags(const TrainFlags& flags) {
  if (!flags.json.empty()) check_output_path(flags.json, "--json");
  if (!flags.record_memory.empty()) check_output_path(flags.record_memory, "--record-memory");
  if (!flags.memory_snapshot.empty()) check_output_path(flags.memory_snapshot, "--memory-snapshot");
}

// A communicator when launched by mpirun or when a technique shards (then a world of one rank);
// none for a plain run.
std::unique_ptr<Communicator> make_world(const TrainingSetup& setup, Device& device) {
  if (!registered_techniques().sharding(setup) && !launched_by_mpirun()) return nullptr;
  return make_communicator(device);
}

// --- the memory of every rank (mpirun): the peaks, gathered to rank 0 for --json

struct RankPeaks {
  std::int64_t allocated = 0, reserved = 0;
  std::array<std::int64_t, kNumMemoryCategories> by_category{};
};

// Each figure of each rank, to every rank: rank r contributes its figure in slot r, zeros
// elsewhere, and a sum over the ranks fills every slot (exact: the figures are below 2^53).
std::vector<RankPeaks> gather_rank_peaks(const MemoryStats& stats, Communicator& world) {
  const auto N = static_cast<std::size_t>(world.world_size()), me = static_cast<std::size_t>(world.rank());
  std::vector<RankPeaks> all(N);
  auto gather = [&](std::int64_t mine, auto field) {
    for (std::size_t r = 0; r < N; ++r)
      field(all[r]) = static_cast<std::int64_t>(world.all_reduce_sum(r == me ? static_cast<double>(mine) : 0.0));
  };
  gather(stats.allocated_bytes[0].peak, [](RankPeaks& p) -> std::int64_t& { return p.allocated; });
  gather(stats.reserved_bytes[0].peak, [](RankPeaks& p) -> std::int64_t& { return p.reserved; });
  for (std::size_t c = 0; c < kNumMemoryCategories; ++c)
    gather(stats.by_category[c].peak, [c](RankPeaks& p) -> std::int64_t& { return p.by_category[c]; });
  return all;
}

// --json under mpirun: "per_rank" lists every rank's peaks, and the top-level peaks (peak
// allocated, peak reserved, each category's peak) are those of the rank with the largest peak
// reserved, the one a device must fit; the rest of "memory" (current bytes, statistics,
// fragmentation) is rank 0's.
void add_rank_peaks(nlohmann::json& memory, const std::vector<RankPeaks>& ranks) {
  nlohmann::json per_rank = nlohmann::json::array();
  std::size_t largest = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    nlohmann::json by_category = nlohmann::json::object();
    for (MemoryCategory c : kAllMemoryCategories) by_category[std::string(to_string(c))] = ranks[r].by_category[index_of(c)];
    per_rank.push_back({{"rank", r},
                        {result_schema::memory_peak_allocated, ranks[r].allocated},
                        {result_schema::memory_peak_reserved, ranks[r].reserved},
                        {"by_category_peak_bytes", by_category}});
    if (ranks[r].reserved > ranks[largest].reserved) largest = r;
  }
  const RankPeaks& top = ranks[largest];
  namespace key = result_schema;  // the keys, declared once (common/results/result_schema.json)
  memory[key::memory_peak_allocated] = top.allocated;
  memory[key::memory_peak_reserved] = top.reserved;
  for (MemoryCategory c : kAllMemoryCategories)
    memory[key::memory_by_category][to_string(c)][key::memory_category_peak] = top.by_category[index_of(c)];
  memory["peaks_of_rank"] = largest;
  memory["per_rank"] = std::move(per_rank);
}

// Before anything is allocated, on the CPU backend: a run that cannot fit is stopped now, not after
// it has touched gigabytes of host memory (the CPU backend's "device" memory is host memory,
// committed as it is touched).
//  - The budget: the run is first made on the meta device of the budget's size
//    (estimator/meta_run.h: the same code, no kernels, no memory; sharded runs as this rank over
//    a meta communicator). If it runs out of memory there, so would the run, at the same
//    allocation: the same report, now.
//  - The host: the run's peak reserved, times the ranks on this machine, must fit the host memory
//    available; else the budget is larger than what this machine can back.
void check_run_fits(const TrainingSetup& setup, Device& device, int rank) {
  const estimator::MetaRun on_budget =
      estimator::run_on_meta(setup, device.memory().free_bytes(), rank, estimator::PeakMoment::skip);
  if (on_budget.oom) {
    OomReport report = *on_budget.oom;
    report.device = device.memory().name();
    report.advice = estimator::make_oom_advisor(setup)(report);
    std::cerr << "trainmem: stopped before the first step: this run, made first on the meta device, runs out of memory "
                 "in " << on_budget.oom_phase << ", allocating " << report.tensor << '\n';
    throw OutOfMemoryError(report);
  }
  const std::size_t local_ranks = launched_local_size();
  // The recorder's events in memory and the event log's buffer count too (both bounded).
  const MemoryRecorder& recorder = device.allocator().recorder();
  const std::size_t recording = recorder.enabled() ? recorder.max_event_bytes() + TraceFileWriter::kMaxBufferBytes : 0;
  const std::uint64_t needed =
      checked_add(checked_mul(on_budget.peak_reserved, local_ranks, "the run's host memory (peak reserved x ranks)"),
                  recording, "the run's host memory (with the memory recorder)");
  const HostMemory host = host_memory();
  if (needed > host.available_bytes)
    throw std::runtime_error("this run needs about " + format_bytes(needed) + " of host memory (its peak reserved" +
                             (local_ranks > 1 ? " x " + std::to_string(local_ranks) + " ranks on this machine" : std::string()) +
                             (recording > 0 ? ", and the memory recorder's " + format_bytes(recording) : std::string()) +
                             "), more than the " + format_bytes(host.available_bytes) + " available (" + host.source +
                             "): the CPU backend's device memory is host memory; use a smaller --batch or model, or "
                             "see 'trainmem estimate' with the same flags");
}

// --- the steps of a run (run_train below calls them in order)

// The data, checked before any memory is touched: a bad file is an input error. Under mpirun every
// rank checks (and loads) the corpus of the global batch (N*B rows), as one process would.
//  - meta: no token is read (the loaders read none there): the data is checked as `estimate`
//    checks it, without keeping it; the run gets its size only (host memory bounded), and tokens
//    without values once the run's size is known (TrainingRun's caller makes them).
//  - a token file is memory-mapped, never read into the heap, where the loader reads it so
//    (DatasetHome::mapped_file: the lazy loader).
//  - everything else is loaded (and checked) into host memory here.
struct RunData {
  HostTokens tokens;
  std::size_t dataset_tokens = 0;  // a file's size in tokens (synthetic: 0, the corpus is made for the batch)
};
RunData load_run_data(const TrainFlags& flags, const TrainingSetup& setup) {
  RunData data;
  const std::size_t ranks = launched_world_size();
  if (flags.device.device == "meta") {
    data.dataset_tokens = checked_dataset_tokens(flags, ranks, setup.batch);
    return data;
  }
  const std::size_t min_tokens = tokens_for_batches(ranks, setup.batch, setup.seq());
  const bool map_token_file = registered_techniques().dataset_home(setup) == DatasetHome::mapped_file &&
                              flags.data != "synthetic" && data_format(flags.data) == DataFormat::token_file;
  if (map_token_file) {
    data.tokens = HostTokens::map_file(flags.data);
    check_dataset({data.tokens.size(), data.tokens.max_token()}, flags.data, min_tokens, setup.model.vocab);
  } else {
    data.tokens = HostTokens(load_dataset(flags.data, min_tokens, setup.model.vocab, setup.seed));
  }
  if (flags.data != "synthetic") data.dataset_tokens = data.tokens.size();
  return data;
}

// What only the device, the world and the data say, filled in and checked again.
void complete_for_device(TrainingSetup& setup, const Device& device, const Communicator* world, std::size_t dataset_tokens) {
  setup.backend = device.cuda_pattern() ? DeviceKind::cuda : DeviceKind::cpu;
  setup.dataset_tokens = dataset_tokens;
  setup.world_size = world ? static_cast<std::size_t>(world->world_size()) : 1;
  registered_techniques().complete(setup);
  registered_techniques().validate(setup);
}

// The recorder (rank 0 writes the files, so only rank 0 records): --record-memory streams every
// event to its file and keeps none; --memory-snapshot keeps the last kSnapshotMaxEntries.
void set_up_recorder(MemoryRecorder& recorder, const TrainFlags& flags, bool reporting_rank) {
  recorder.enable(reporting_rank && (!flags.record_memory.empty() || !flags.memory_snapshot.empty()));
  recorder.set_max_entries(flags.memory_snapshot.empty() ? 0 : kSnapshotMaxEntries);
}

// Rank 0's lines before the first step: the world (under mpirun or when sharding), the model.
void print_run_header(const TrainingSetup& setup, const Communicator* world, long steps) {
  const ModelConfig& config = setup.model;
  if (world) {
    // The sharding technique's scheme, as its formula names it: "ZeRO-2 (P_os+g) over 2 ranks"
    const std::optional<ShardedFormulas> sharded = registered_techniques().formulas(setup).sharded;
    const std::size_t ranks = setup.world_size;
    std::cerr << "world: " << ranks << " rank" << (ranks > 1 ? "s" : "") << " (" << world->backend() << "), "
              << (sharded ? sharded->scheme : std::string("no sharding")) << ", global batch " << ranks * setup.batch
              << " = " << ranks << " x " << setup.batch << " rows\n";
  }
  std::cerr << "model: " << config.label() << ", " << config.num_parameters()
            << " parameters (" << config.shape_summary() << "), batch " << setup.batch << " x " << setup.accum
            << " accumulation steps, " << steps << " steps\n";
}

// The steps, each shown as it ends (rank 0; progress_line.h), then the summary line; returns every
// step's figures for --json.
nlohmann::json run_steps(TrainingRun& run, const MemoryRecorder& recorder, long steps, bool reporting_rank) {
  const std::string techniques = run.techniques();
  // (mpirun forwards output through a pseudo-terminal: one line per step there, not a redrawn one)
  const bool terminal = isatty(STDOUT_FILENO) && !launched_by_mpirun();
  RunSummary summary;
  std::size_t drawn = 0;  // the length of the line on the terminal, which the next one overwrites
  nlohmann::json figures = nlohmann::json::array();
  for (long i = 0; i < steps; ++i) {
    const StepResult r = run.step();
    recorder.throw_if_failed();  // a recording that failed (a full disk) stops the run here, not inside the allocator
    namespace key = result_schema;  // the step's fields, declared once (common/results/result_schema.json)
    figures.push_back({{key::step_step, r.step},
                       {key::step_loss, r.loss},
                       {key::step_grad_norm, r.grad_norm},
                       {key::step_loss_scale, r.loss_scale},
                       {key::step_skipped, r.skipped},
                       {key::step_ms, r.ms},
                       {key::step_tokens_per_s, r.tokens_per_s},
                       {key::step_allocated_bytes, r.allocated_bytes},
                       {key::step_reserved_bytes, r.reserved_bytes}});
    summary.add(r);
    if (!reporting_rank) continue;
    // On a terminal, one line redrawn in place, narrower than the terminal (the last column left
    // free: some terminals wrap as soon as it is written), padded over the longer line before it;
    // in a log, one line per step with every field.
    if (terminal) {
      std::string line = progress_line(r, steps, techniques, summary.eta_seconds(steps),
                                       std::max<std::size_t>(terminal_width(STDOUT_FILENO), 2) - 1);
      const std::size_t length = line.size();
      line.resize(std::max(length, drawn), ' ');
      drawn = length;
      std::cout << '\r' << line << (i + 1 < steps ? "" : "\n") << std::flush;
    } else {
      std::cout << progress_line(r, steps, techniques, summary.eta_seconds(steps), kAnyWidth) << '\n' << std::flush;
    }
  }
  if (reporting_rank) std::cout << summary.line() << '\n' << std::flush;
  return figures;
}

// The result file (--json): the run's context and configuration, each technique's sections, every
// step's figures and the memory (with every rank's peaks under mpirun).
nlohmann::json train_result_json(const TrainFlags& flags, const TrainingSetup& setup, const TrainingRun& run,
                                 Device& device, const DeviceOptions& options, const Communicator* world,
                                 nlohmann::json steps, const std::vector<RankPeaks>& ranks_peaks) {
  const std::size_t ranks = setup.world_size;
  nlohmann::json result = run_context_json(device.info(), options.allocator);
  result["config"] = {{"command", "train"},
                      {"model", setup.model.to_json()},
                      {"batch", setup.batch},
                      {"seq", setup.seq()},
                      {"steps", flags.steps},
                      {"lr", setup.adam.lr},
                      {"weight_decay", setup.adam.weight_decay},
                      {"grad_clip", setup.max_grad_norm},
                      {"seed", setup.seed},
                      {"data", flags.data},
                      {"device", flags.device.device},
                      {"device_memory_bytes", device.info().device_memory_bytes},
                      {"allocator_config", options.allocator.to_string()},
                      {"world_size", ranks},
                      {"tokens_per_step", ranks * setup.batch * setup.seq() * setup.accum}};
  if (world)
    result["world"] = {{"world_size", ranks},
                       {"ranks", ranks},
                       {"backend", world->backend()},
                       {"reporting_rank", world->rank()},
                       {"global_batch", ranks * setup.batch}};
  run.add_json(result, device.allocator().stats(), flags.steps);  // each technique's config and sections
  result["steps"] = std::move(steps);
  result["memory"] = memory_json(device.allocator());
  if (ranks_peaks.size() > 1) add_rank_peaks(result["memory"], ranks_peaks);
  return result;
}

int run_train(const TrainFlags& flags, const Settings& settings) {
  require_same_settings_on_every_rank(settings);  // under mpirun: before any collective, data or device
  // The run the flags describe, every rule of them checked (the registrations, techniques.h) before
  // any data or device; what only the device and the data say is filled in and checked below.
  TrainingSetup setup = training_setup(flags, flags.device.backend(), 0, launched_world_size());
  check_output_flags(flags);  // a path that cannot be written is found now, not after the run
  RunData data = load_run_data(flags, setup);

  // The device and the world of ranks (mpirun): each rank takes its rows of a global batch of
  // N*B rows. Only rank 0 prints and writes files.
  const DeviceOptions options = flags.device.to_options();
  auto device = Device::open(options, launched_by_mpirun() ? nullptr : &std::cerr);
  std::unique_ptr<Communicator> world = make_world(setup, *device);
  const int rank = world ? world->rank() : 0;
  complete_for_device(setup, *device, world.get(), data.dataset_tokens);
  set_up_recorder(device->allocator().recorder(), flags, rank == 0);
  // Out of memory, the report names the cheapest technique that would make this run fit (the estimator).
  device->allocator().set_oom_advisor(estimator::make_oom_advisor(setup));
  if (device->kind() == DeviceKind::cpu) check_run_fits(setup, *device, rank);
  if (rank == 0) print_run_header(setup, world.get(), flags.steps);
  std::optional<TraceFileWriter> record_memory;  // outlives the run, whose tensors are freed when it ends
  if (device->allocator().recorder().enabled() && !flags.record_memory.empty())
    record_memory.emplace(device->allocator().recorder(), flags.record_memory, "--record-memory");

  // Model, data loader, strategies and trainer, built as every command builds them.
  if (flags.device.device == "meta") data.tokens = HostTokens::without_values(setup.dataset_size());
  TrainingRun run(setup, registered_techniques(), *device, world.get(), std::move(data.tokens));
  nlohmann::json steps = run_steps(run, device->allocator().recorder(), flags.steps, rank == 0);

  // Every rank's peaks, gathered before rank 0 writes the files (every rank takes part).
  const std::vector<RankPeaks> ranks_peaks =
      world ? gather_rank_peaks(device->allocator().stats(), *world) : std::vector<RankPeaks>{};
  if (rank != 0) return 0;
  // The event log first: it is written while the run goes, and one result file is written at a time.
  if (record_memory) record_memory->finish();
  if (!flags.json.empty()) {
    const nlohmann::json result =
        train_result_json(flags, setup, run, *device, options, world.get(), std::move(steps), ranks_peaks);
    write_output_file(flags.json, result.dump(2) + '\n', "--json");
  }
  if (!flags.memory_snapshot.empty()) write_memory_snapshot(device->allocator(), flags.memory_snapshot, "--memory-snapshot");
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* train = app.add_subcommand("train", "Train a model (GPT or Llama) and watch its memory");
  add_train_flags(*train, *flags);
  // --gpu NAME is estimate's, plan's and max-batch's: a card this machine does not have. train runs
  // on the device it has; asked for a card, it says how to give a run that card's memory here.
  // (Hidden: train's --help lists no flag it refuses.)
  train->add_option_function<std::string>("--gpu", [](const std::string&) {})
      ->group("")
      ->check(parses_with([](const std::string& name) {
        const estimator::GpuSpec& g = [&]() -> const estimator::GpuSpec& {
          try {
            return estimator::find_gpu(name);
          } catch (const std::invalid_argument& e) {  // (a hidden flag's check is not named by CLI11)
            throw std::invalid_argument(std::string("--gpu: ") + e.what());
          }
        }();
        throw std::invalid_argument(
            "--gpu is for estimate, plan and max-batch: train runs on this machine's device. To train within " + g.name +
            "'s memory here, give --device-memory " + std::to_string(g.usable_bytes()) + "B (its usable " +
            format_bytes(g.usable_bytes()) + "); to ask whether a run fits " + g.name +
            " without training, trainmem estimate --gpu " + g.name + " (same flags)");
      }));
  train->callback([flags, train, &run] {
    // What the ranks of mpirun compare first: every flag but the output paths, which may differ.
    Settings settings = command_settings(*train);
    run = [flags, settings] { return run_train(*flags, settings); };
  });
}

}  // namespace trainmem::cli
