// trainmem max-batch: the largest micro-batch that fits, found by trying — real allocations, real
// training steps — next to the estimator's answer.
//
//   trainmem max-batch --model tiny --device-memory 24MiB
//   B=1      fits  peak allocated     2.60 MiB  reserved     4.00 MiB      10.5 ms/step
//   ...
//   B=17     OOM   peak allocated     6.81 MiB  reserved    24.00 MiB
//   ...
//   largest micro-batch that fits: 16
//     every batch from 1 to 31 was tried (trials); from 31 up none can fit: ...
//
// Each trial builds the run as `trainmem train` does and trains two steps: Adam's moments are
// allocated at the end of the first step, so only the second has everything in place (a batch
// that survives one step can still fail in the next). The search is the estimator's
// (estimator/batch_search.h): every batch from 1, since fitting is not monotone in the batch, up
// to the first whose live tensors alone exceed the device; the batches below the answer that do
// not fit (the holes) are named. When not even one row fits, the OOM advisor's lines follow.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/data/token_file.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimate_flags.h"
#include "suites/trainmem/estimator/batch_search.h"
#include "suites/trainmem/estimator/estimate_report.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/estimator/oom_advice.h"
#include "suites/trainmem/estimator/trial_run.h"
#include "common/cli/flag_ranges.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

struct MaxBatchFlags {
  TrainFlags train;
  std::string gpu;  // --gpu NAME: the trials' device memory is that card's usable memory
  std::size_t limit = estimator::kMaxBatchLimit;
  bool json = false;
};

int run_max_batch(const MaxBatchFlags& f) {
  DeviceOptions options = f.train.device.to_options();
  if (!f.gpu.empty()) {
    if (!f.train.device.device_memory.empty())
      throw std::invalid_argument("give --gpu NAME or --device-memory SIZE, not both");
    options.device_memory = estimator::find_gpu(f.gpu).usable_bytes();
  }
  const GPTConfig config = model_config(f.train);
  // Data first: --data checked as train checks it, for the smallest batch tried (B = 1). The
  // trials are real runs: a file's tokens are read once for all of them; synthetic data is made
  // per trial.
  const std::size_t dataset_tokens = checked_dataset_tokens(f.train, 1, 1);
  std::vector<std::uint16_t> file_tokens;
  if (f.train.data != "synthetic") file_tokens = load_dataset(f.train.data, config.seq + 1, config.vocab, f.train.seed);

  // The device the trials run on (opened once here to name it and learn its size).
  std::size_t capacity = 0;
  DeviceKind backend = DeviceKind::cpu;
  std::string device_name;
  {
    auto device = Device::open(options, &std::cerr);
    capacity = device->memory().free_bytes();  // the budget on the CPU; on a GPU, less the CUDA context
    backend = device->kind();
    device_name = device->memory().name();
    if (!f.gpu.empty()) device_name += " sized as " + estimator::find_gpu(f.gpu).description;
  }
  const TrainingSetup setup = training_setup(f.train, backend, dataset_tokens);
  // (A sharding technique runs at world size 1, as `trainmem train` runs it without mpirun: ZeRO-Offload
  // on one device; `trainmem estimate --world-size N` gives a sharded run's largest micro-batch over N.)
  // The search goes no further than the data holds (train would refuse a larger batch).
  const std::size_t data_limit = estimator::data_batch_limit(setup);  // 0: synthetic, no limit
  const std::size_t limit = data_limit ? std::min(f.limit, data_limit) : f.limit;

  // The estimator's answer, on the capacity the allocator has (meta runs).
  const estimator::BatchSearch predicted = estimator::search_batches_on_meta(setup, capacity, limit);

  estimator::TrialOptions trial_options;
  trial_options.device = f.train.device.device;
  trial_options.capacity = options.device_memory.value_or(0);
  if (!file_tokens.empty()) trial_options.tokens = &file_tokens;
  nlohmann::json trials = nlohmann::json::array();
  std::optional<OomReport> first_oom;  // of batch 1, for the advice when nothing fits
  // The same search as the estimator's (batch_search.h), each try a real run; whether a batch that
  // failed is the end is asked of its meta run (the same allocations: peak allocated alone).
  const estimator::BatchSearch tried = estimator::search_batches(limit, [&](std::size_t b) {
    TrainingSetup s = setup;
    s.batch = b;
    const estimator::TrialResult r = estimator::run_trial(s, trial_options);
    const bool ok = !r.oom.has_value();
    if (b == 1 && !ok) first_oom = r.oom;
    char line[256];
    std::snprintf(line, sizeof line, "B=%-6zu %-5s peak allocated %12s  reserved %12s", b, ok ? "fits" : "OOM",
                  format_bytes(static_cast<std::uint64_t>(r.stats.allocated_bytes[0].peak)).c_str(),
                  format_bytes(static_cast<std::uint64_t>(r.stats.reserved_bytes[0].peak)).c_str());
    std::string text = line;
    if (ok) {
      std::snprintf(line, sizeof line, "  %8.1f ms/step", r.ms_per_step);
      text += line;
    }
    (f.json ? std::cerr : std::cout) << text << '\n' << std::flush;
    trials.push_back({{"batch", b},
                      {"fits", ok},
                      {"peak_allocated_bytes", r.stats.allocated_bytes[0].peak},
                      {"peak_reserved_bytes", r.stats.reserved_bytes[0].peak},
                      {"ms_per_step", ok ? nlohmann::json(r.ms_per_step) : nlohmann::json()}});
    return estimator::BatchTry{ok, !ok && estimator::no_larger_batch_fits(s, capacity)};
  });

  // What stopped the search: memory (no larger batch can fit), the data (it holds no larger
  // batch), or --limit (no larger batch was tried).
  const bool data_limits = limit < f.limit;
  const std::size_t data_max_batch = data_limits ? data_limit : 0;
  // Not even one row fits: the advice trainmem train and estimate give (one advisor, oom_advice.h).
  std::vector<std::string> advice;
  if (tried.largest == 0 && first_oom) {
    TrainingSetup one_row = setup;
    one_row.batch = 1;
    advice = estimator::estimator_oom_advice(one_row, capacity, *first_oom);
  }
  if (f.json) {
    const bool at_limit = tried.at_limit();
    nlohmann::json j = {{"command", "max-batch"},
                        {"device", device_name},
                        {"capacity_bytes", capacity},
                        {"config", {{"model", config.to_json()}, {"setup", describe_setup(setup)}}},
                        {"steps_per_trial", trial_options.steps},
                        {"limit", f.limit},
                        {"data_limit", data_limit ? nlohmann::json(data_limit) : nlohmann::json()},
                        {"max_batch", tried.largest},
                        {"max_batch_holes", tried.holes},
                        {"max_batch_search_end", tried.end ? nlohmann::json(tried.end) : nlohmann::json()},
                        {"max_batch_is_limit", at_limit && !data_limits},
                        {"max_batch_is_data_limit", at_limit && data_limits},
                        {"predicted_max_batch", predicted.largest},
                        {"predicted_holes", predicted.holes},
                        {"predicted_is_limit", predicted.at_limit()},
                        {"trials", trials},
                        {"advice", advice}};
    std::cout << j.dump(2) << '\n';
    return 0;
  }
  std::cout << "on " << device_name << ", by trying (" << trials.size() << " trials of " << trial_options.steps
            << " steps):\n"
            << estimator::batch_search_lines(tried, data_max_batch, "trials");
  std::cout << "the estimator (meta runs) says:\n" << estimator::batch_search_lines(predicted, data_max_batch, "meta runs")
            << estimator::advice_lines(advice);
  if (tried.at_limit() && data_limits)
    std::cout << "the data, not memory, limits the batch: --data " << f.train.data << " holds " << dataset_tokens
              << " tokens, one batch of at most " << data_limit << " rows of " << config.seq
              << " (B x T + 1 tokens); a larger batch might fit in memory, with more data\n";
  return 0;
}

}  // namespace

void add_max_batch_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<MaxBatchFlags>();
  CLI::App* cmd = app.add_subcommand("max-batch",
                                     "Find the largest micro-batch that fits by trying (two real steps per trial)");
  add_device_flags(*cmd, flags->train.device);
  add_model_flags(*cmd, flags->train);
  add_technique_flags(*cmd, flags->train);
  add_optimizer_flags(*cmd, flags->train);
  add_data_flags(*cmd, flags->train);
  cmd->add_option("--limit", flags->limit, "Search no further than this micro-batch")
      ->capture_default_str()
      ->check(whole_number(1, FlagLimits::max_batch));
  add_gpu_flag(*cmd, flags->gpu,
               "Try the runs with this card's memory: the device budget on cpu, a cap on a larger card on cuda");
  cmd->add_flag("--json", flags->json, "Print JSON (the trials go to stderr)");
  cmd->callback([flags, &run] { run = [flags] { return run_max_batch(*flags); }; });
}

}  // namespace trainmem::cli
