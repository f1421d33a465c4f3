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

// The trials' device: --device and --device-memory, or --gpu's size.
DeviceOptions trial_device_options(const MaxBatchFlags& f) {
  DeviceOptions options = f.train.device.to_options();
  if (!f.gpu.empty()) {
    if (!f.train.device.device_memory.empty())
      throw std::invalid_argument("give --gpu NAME or --device-memory SIZE, not both");
    options.device_memory = estimator::find_gpu(f.gpu).usable_bytes();
  }
  return options;
}

// The device the trials run on, opened once here to name it and learn its size.
struct TrialDevice {
  DeviceOptions options;
  std::size_t capacity = 0;  // the budget on the CPU; on a GPU, its free memory less the CUDA context
  DeviceKind backend = DeviceKind::cpu;
  std::string name;
};
TrialDevice open_trial_device(const MaxBatchFlags& f, const DeviceOptions& options) {
  TrialDevice d;
  d.options = options;
  auto device = Device::open(options, &std::cerr);
  d.capacity = device->memory().free_bytes();
  d.backend = device->kind();
  d.name = device->memory().name();
  if (!f.gpu.empty()) d.name += " sized as " + estimator::find_gpu(f.gpu).description;
  return d;
}

// A trial's line ("B=17     OOM   peak allocated ...") and its entry in --json's "trials".
std::string trial_line(std::size_t b, const estimator::TrialResult& r) {
  char line[256];
  std::snprintf(line, sizeof line, "B=%-6zu %-5s peak allocated %12s  reserved %12s", b, r.oom ? "OOM" : "fits",
                format_bytes(static_cast<std::uint64_t>(r.stats.allocated_bytes[0].peak)).c_str(),
                format_bytes(static_cast<std::uint64_t>(r.stats.reserved_bytes[0].peak)).c_str());
  std::string text = line;
  if (!r.oom) {
    std::snprintf(line, sizeof line, "  %8.1f ms/step", r.ms_per_step);
    text += line;
  }
  return text;
}
nlohmann::json trial_json(std::size_t b, const estimator::TrialResult& r) {
  return {{"batch", b},
          {"fits", !r.oom},
          {"peak_allocated_bytes", r.stats.allocated_bytes[0].peak},
          {"peak_reserved_bytes", r.stats.reserved_bytes[0].peak},
          {"ms_per_step", r.oom ? nlohmann::json() : nlohmann::json(r.ms_per_step)}};
}

// The two answers and what bounds them.
struct MaxBatchAnswer {
  estimator::BatchSearch tried, predicted;  // by real trials, by meta runs
  nlohmann::json trials = nlohmann::json::array();
  int steps_per_trial = 0;
  std::size_t data_limit = 0;  // the largest batch the data holds (0: synthetic, no limit)
  bool data_limits = false;    // the data's limit is below --limit: it, not --limit, ends the search
  std::vector<std::string> advice;  // when not even one row fits: the OOM advisor's lines
};

nlohmann::json max_batch_json(const MaxBatchFlags& f, const TrainingSetup& setup, const TrialDevice& device,
                              const MaxBatchAnswer& a) {
  const bool at_limit = a.tried.at_limit();
  return {{"command", "max-batch"},
          {"device", device.name},
          {"capacity_bytes", device.capacity},
          {"config", {{"model", setup.model.to_json()}, {"setup", describe_setup(setup)}}},
          {"steps_per_trial", a.steps_per_trial},
          {"limit", f.limit},
          {"data_limit", a.data_limit ? nlohmann::json(a.data_limit) : nlohmann::json()},
          {"max_batch", a.tried.largest},
          {"max_batch_holes", a.tried.holes},
          {"max_batch_search_end", a.tried.end ? nlohmann::json(a.tried.end) : nlohmann::json()},
          {"max_batch_is_limit", at_limit && !a.data_limits},
          {"max_batch_is_data_limit", at_limit && a.data_limits},
          {"predicted_max_batch", a.predicted.largest},
          {"predicted_holes", a.predicted.holes},
          {"predicted_is_limit", a.predicted.at_limit()},
          {"trials", a.trials},
          {"advice", a.advice}};
}

void print_max_batch(const MaxBatchFlags& f, const TrainingSetup& setup, const TrialDevice& device,
                     const MaxBatchAnswer& a) {
  const std::size_t data_max_batch = a.data_limits ? a.data_limit : 0;
  std::cout << "on " << device.name << ", by trying (" << a.trials.size() << " trials of " << a.steps_per_trial
            << " steps):\n"
            << estimator::batch_search_lines(a.tried, data_max_batch, "trials");
  std::cout << "the estimator (meta runs) says:\n" << estimator::batch_search_lines(a.predicted, data_max_batch, "meta runs")
            << estimator::advice_lines(a.advice);
  if (a.tried.at_limit() && a.data_limits)
    std::cout << "the data, not memory, limits the batch: --data " << f.train.data << " holds " << setup.dataset_tokens
              << " tokens, one batch of at most " << a.data_limit << " rows of " << setup.seq()
              << " (B x T + 1 tokens); a larger batch might fit in memory, with more data\n";
}

// The same search as the estimator's (batch_search.h), each try a real run (two steps); whether
// a batch that failed is the end is asked of its meta run (the same allocations: peak allocated
// alone). Fills answer.tried, .trials, .steps_per_trial and, when not even one row fits, .advice.
void search_by_trials(const MaxBatchFlags& f, const TrainingSetup& setup, const TrialDevice& device,
                      const std::vector<std::uint16_t>& file_tokens, std::size_t limit, MaxBatchAnswer& answer) {
  estimator::TrialOptions trial_options;
  trial_options.device = f.train.device.device;
  trial_options.capacity = device.options.device_memory.value_or(0);
  if (!file_tokens.empty()) trial_options.tokens = &file_tokens;
  answer.steps_per_trial = trial_options.steps;
  std::optional<OomReport> first_oom;  // of batch 1, for the advice when nothing fits
  answer.tried = estimator::search_batches(limit, [&](std::size_t b) {
    TrainingSetup s = setup;
    s.batch = b;
    const estimator::TrialResult r = estimator::run_trial(s, trial_options);
    if (b == 1 && r.oom) first_oom = r.oom;
    (f.json ? std::cerr : std::cout) << trial_line(b, r) << '\n' << std::flush;
    answer.trials.push_back(trial_json(b, r));
    return estimator::BatchTry{!r.oom, r.oom && estimator::no_larger_batch_fits(s, device.capacity)};
  });
  // Not even one row fits: the advice trainmem train and estimate give (one advisor, oom_advice.h).
  if (answer.tried.largest == 0 && first_oom) {
    TrainingSetup one_row = setup;
    one_row.batch = 1;
    answer.advice = estimator::estimator_oom_advice(one_row, device.capacity, *first_oom);
  }
}

int run_max_batch(const MaxBatchFlags& f) {
  // The device's flags first, then the data: --data checked as train checks it, for the smallest
  // batch tried (B = 1). The trials are real runs: a file's tokens are read once for all of them;
  // synthetic data is made per trial.
  const DeviceOptions options = trial_device_options(f);
  const std::size_t dataset_tokens = checked_dataset_tokens(f.train, 1, 1);
  const ModelConfig config = model_config(f.train);
  std::vector<std::uint16_t> file_tokens;
  if (f.train.data != "synthetic") file_tokens = load_dataset(f.train.data, config.seq + 1, config.vocab, f.train.setup.seed);
  const TrialDevice device = open_trial_device(f, options);
  const TrainingSetup setup = training_setup(f.train, device.backend, dataset_tokens);
  // (A sharding technique runs at world size 1, as `trainmem train` runs it without mpirun: ZeRO-Offload
  // on one device; `trainmem estimate --world-size N` gives a sharded run's largest micro-batch over N.)
  // The search goes no further than the data holds (train would refuse a larger batch).
  MaxBatchAnswer answer;
  answer.data_limit = estimator::data_batch_limit(setup);
  const std::size_t limit = answer.data_limit ? std::min(f.limit, answer.data_limit) : f.limit;
  answer.data_limits = limit < f.limit;

  // The estimator's answer, on the capacity the allocator has (meta runs).
  answer.predicted = estimator::search_batches_on_meta(setup, device.capacity, limit);

  search_by_trials(f, setup, device, file_tokens, limit, answer);
  if (f.json)
    std::cout << max_batch_json(f, setup, device, answer).dump(2) << '\n';
  else
    print_max_batch(f, setup, device, answer);
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
