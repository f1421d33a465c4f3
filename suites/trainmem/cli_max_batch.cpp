// trainmem max-batch: the largest micro-batch that fits, found on the meta device and confirmed
// by trying — real allocations, real training steps.
//
//   trainmem max-batch --model tiny --device-memory 24MiB
//   the estimator (meta runs) says:
//   largest micro-batch that fits: 16
//     every batch from 1 to 31 was tried (meta runs); from 31 up none can fit: ...
//   confirming with real runs: B=16 (the answer), 17 (just past it), about 2 s
//   B=16     fits  peak allocated     6.41 MiB  reserved    22.00 MiB      10.5 ms/step
//   B=17     OOM   peak allocated ...  (out of memory allocating ... with ... live)
//   on cpu budget (24.00 MiB), by trying (2 trials of 2 steps): confirmed
//   largest micro-batch that fits: 16
//
// The search is the estimator's (estimator/batch_search.h): every batch from 1, since fitting is
// not monotone in the batch, up to the first whose live tensors alone exceed the device, each a
// meta run (milliseconds). Real runs then try the batches its answer rests on: the answer, the
// holes below it and the misses up to the end (a few, not every batch). Each trial builds the
// run as `trainmem train` does and trains two steps: Adam's moments are allocated in the first
// step, so only the second has everything in place. On the CPU the trials' time is predicted
// first (trial_time.h); when it passes --trial-minutes they are not run, and max-batch says so and
// answers from the meta runs, as `trainmem estimate` does.
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
#include "suites/trainmem/trial_time.h"

namespace trainmem::cli {

namespace {

struct MaxBatchFlags {
  TrainFlags train;
  std::string gpu;  // --gpu NAME: the trials' device memory is that card's usable memory
  std::size_t limit = estimator::kMaxBatchLimit;
  double trial_minutes = 10;  // run the trials on the CPU only when expected within this
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

// A trial's line ("B=17     OOM   peak allocated ...") and its entry in --json's "trials". An OOM
// says what failed: the allocation and what was live.
std::string trial_line(std::size_t b, const estimator::TrialResult& r) {
  char line[256];
  std::snprintf(line, sizeof line, "B=%-6zu %-5s peak allocated %12s  reserved %12s", b, r.oom ? "OOM" : "fits",
                format_bytes(static_cast<std::uint64_t>(r.stats.allocated_bytes[0].peak)).c_str(),
                format_bytes(static_cast<std::uint64_t>(r.stats.reserved_bytes[0].peak)).c_str());
  std::string text = line;
  if (r.oom) {
    const OomReport& o = *r.oom;
    text += "  (out of memory allocating " + format_bytes(o.rounded_bytes) + " for " +
            (o.tensor.empty() ? std::string(to_string(o.category)) : o.tensor + ", " + std::string(to_string(o.category))) +
            ", with " + format_bytes(o.allocated_bytes) + " live and " + format_bytes(o.reserved_bytes) +
            " reserved of " + format_bytes(o.capacity_bytes) + ")";
  } else {
    std::snprintf(line, sizeof line, "  %8.1f ms/step", r.ms_per_step);
    text += line;
  }
  return text;
}
nlohmann::json trial_json(std::size_t b, const estimator::TrialResult& r) {
  nlohmann::json j = {{"batch", b},
                      {"fits", !r.oom},
                      {"peak_allocated_bytes", r.stats.allocated_bytes[0].peak},
                      {"peak_reserved_bytes", r.stats.reserved_bytes[0].peak},
                      {"ms_per_step", r.oom ? nlohmann::json() : nlohmann::json(r.ms_per_step)}};
  if (r.oom)
    j["oom"] = {{"tensor", r.oom->tensor},
                {"category", to_string(r.oom->category)},
                {"requested_bytes", r.oom->rounded_bytes},
                {"allocated_bytes", r.oom->allocated_bytes},
                {"reserved_bytes", r.oom->reserved_bytes}};
  return j;
}

// The two answers and what bounds them.
struct MaxBatchAnswer {
  estimator::BatchSearch predicted;  // by meta runs: every batch up to the end
  estimator::BatchSearch tried;      // by real trials of the batches `predicted` rests on
  std::vector<std::size_t> to_try;   // those batches, in order
  bool trials_run = false;           // false: expected to take longer than --trial-minutes
  double expected_seconds = 0;       // the trials' predicted time on the CPU (0: not predicted)
  std::vector<double> expected_each;  // each trial's, in the order of to_try (empty: not predicted)
  std::vector<std::size_t> disagree;  // batches where a trial and its meta run differ
  nlohmann::json trials = nlohmann::json::array();
  int steps_per_trial = 0;
  std::size_t data_limit = 0;  // the largest batch the data holds (0: synthetic, no limit)
  bool data_limits = false;    // the data's limit is below --limit: it, not --limit, ends the search
  std::vector<std::string> advice;  // when not even one row fits: the OOM advisor's lines
};

// The batches the meta answer rests on: the holes below the largest, the largest, and every miss
// above it up to the search's end (the end itself is proven by its live tensors alone); batch 1
// when nothing fits. A few trials, where the whole search would be one per batch.
std::vector<std::size_t> batches_to_try(const estimator::BatchSearch& predicted) {
  if (predicted.largest == 0) return {1};
  std::vector<std::size_t> batches = predicted.holes;
  const std::size_t last = predicted.end ? predicted.end - 1 : predicted.limit;
  for (std::size_t b = predicted.largest; b <= last; ++b) batches.push_back(b);
  return batches;
}

// The meta search's answer, as the trials found it: the same where every trial agreed, else the
// largest batch that fit by trying, with the holes the trials found below it.
estimator::BatchSearch answer_by_trials(const estimator::BatchSearch& predicted, const nlohmann::json& trials,
                                         bool agreed) {
  if (agreed) return predicted;
  estimator::BatchSearch tried = predicted;
  tried.largest = 0;
  tried.holes.clear();
  for (const nlohmann::json& t : trials)
    if (t["fits"].get<bool>()) tried.largest = std::max(tried.largest, t["batch"].get<std::size_t>());
  for (const nlohmann::json& t : trials)
    if (!t["fits"].get<bool>() && t["batch"].get<std::size_t>() < tried.largest)
      tried.holes.push_back(t["batch"].get<std::size_t>());
  return tried;
}

nlohmann::json max_batch_json(const MaxBatchFlags& f, const TrainingSetup& setup, const TrialDevice& device,
                              const MaxBatchAnswer& a) {
  const estimator::BatchSearch& answer = a.trials_run ? a.tried : a.predicted;
  const bool at_limit = answer.at_limit();
  return {{"command", "max-batch"},
          {"device", device.name},
          {"capacity_bytes", device.capacity},
          {"config", {{"model", setup.model.to_json()}, {"setup", describe_setup(setup)}}},
          {"steps_per_trial", a.steps_per_trial},
          {"limit", f.limit},
          {"data_limit", a.data_limit ? nlohmann::json(a.data_limit) : nlohmann::json()},
          {"confirmed_by_trials", a.trials_run && a.disagree.empty()},
          {"trials_run", a.trials_run},
          {"expected_trial_seconds", a.expected_seconds > 0 ? nlohmann::json(a.expected_seconds) : nlohmann::json()},
          {"disagreements", a.disagree},
          {"max_batch", answer.largest},
          {"max_batch_holes", answer.holes},
          {"max_batch_search_end", answer.end ? nlohmann::json(answer.end) : nlohmann::json()},
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
  if (!a.trials_run) {
    std::cout << "on " << device.name << ": the real runs were not made (about " << spoken_duration(a.expected_seconds)
              << " here, more than --trial-minutes " << f.trial_minutes
              << "): the estimator's answer above stands unconfirmed. It is the same run on the meta device, to the "
                 "byte; trainmem estimate gives it with its figures. To confirm it anyway: --trial-minutes "
              << static_cast<long>(a.expected_seconds / 60 + 2) << ", or run max-batch on the card itself.\n";
  } else {
    std::cout << "on " << device.name << ", by trying (" << a.trials.size() << " trials of " << a.steps_per_trial
              << " steps): "
              << (a.disagree.empty() ? "the meta runs' answer confirmed"
                                     : "the real runs DIFFER from the meta runs at B=" +
                                           estimator::list_of_batches(a.disagree) +
                                           " (a gap in the meta device's model of this run: please report it)")
              << "\n"
              << estimator::batch_search_lines(a.tried, data_max_batch,
                                               "meta runs; " + std::to_string(a.trials.size()) + " of them again by trials");
  }
  std::cout << estimator::advice_lines(a.advice);
  const estimator::BatchSearch& answer = a.trials_run ? a.tried : a.predicted;
  if (answer.at_limit() && a.data_limits)
    std::cout << "the data, not memory, limits the batch: --data " << f.train.data << " holds " << setup.dataset_tokens
              << " tokens, one batch of at most " << a.data_limit << " rows of " << setup.seq()
              << " (B x T + 1 tokens); a larger batch might fit in memory, with more data\n";
}

// The trials, each a real run of two steps, in order; a progress line before each (stderr).
void run_trials(const MaxBatchFlags& f, const TrainingSetup& setup, const TrialDevice& device,
                const std::vector<std::uint16_t>& file_tokens, MaxBatchAnswer& answer) {
  estimator::TrialOptions trial_options;
  trial_options.device = f.train.device.device;
  trial_options.capacity = device.options.device_memory.value_or(0);
  if (!file_tokens.empty()) trial_options.tokens = &file_tokens;
  std::optional<OomReport> first_oom;  // of batch 1, for the advice when nothing fits
  std::ostream& lines = f.json ? std::cerr : std::cout;
  for (std::size_t i = 0; i < answer.to_try.size(); ++i) {
    const std::size_t b = answer.to_try[i];
    TrainingSetup s = setup;
    s.batch = b;
    std::cerr << "trial " << i + 1 << " of " << answer.to_try.size() << ": B=" << b;
    if (!answer.expected_each.empty()) {
      double left = 0;
      for (std::size_t j = i; j < answer.expected_each.size(); ++j) left += answer.expected_each[j];
      std::cerr << " (about " << spoken_duration(answer.expected_each[i]) << "; " << spoken_duration(left)
                << " for the trials left)";
    }
    std::cerr << "\n" << std::flush;
    const estimator::TrialResult r = estimator::run_trial(s, trial_options);
    if (b == 1 && r.oom) first_oom = r.oom;
    lines << trial_line(b, r) << '\n' << std::flush;
    answer.trials.push_back(trial_json(b, r));
    const bool meta_fits = b <= answer.predicted.largest &&
                           std::find(answer.predicted.holes.begin(), answer.predicted.holes.end(), b) == answer.predicted.holes.end();
    if (meta_fits == static_cast<bool>(r.oom)) answer.disagree.push_back(b);
  }
  answer.tried = answer_by_trials(answer.predicted, answer.trials, answer.disagree.empty());
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
  // (A sharding technique runs at world size 1, as `trainmem train` runs it without mpirun:
  // ZeRO-Offload on one device; `trainmem estimate --world-size N` gives a sharded run's largest
  // micro-batch over N.) The search goes no further than the data holds (train would refuse more).
  MaxBatchAnswer answer;
  answer.data_limit = estimator::data_batch_limit(setup);
  const std::size_t limit = answer.data_limit ? std::min(f.limit, answer.data_limit) : f.limit;
  answer.data_limits = limit < f.limit;
  const std::size_t data_max_batch = answer.data_limits ? answer.data_limit : 0;

  // The estimator's answer first, on the capacity the allocator has (meta runs: milliseconds each).
  std::ostream& text = f.json ? std::cerr : std::cout;
  answer.predicted = estimator::search_batches_on_meta(setup, device.capacity, limit);
  text << "the estimator (meta runs) says:\n" << estimator::batch_search_lines(answer.predicted, data_max_batch, "meta runs");
  answer.to_try = batches_to_try(answer.predicted);
  estimator::TrialOptions defaults;
  answer.steps_per_trial = defaults.steps;

  // On the CPU, the trials' time first (a CPU trial of a GPT-2-sized model takes minutes).
  answer.trials_run = true;
  if (device.backend == DeviceKind::cpu) {  // (a meta device's trials are meta runs: milliseconds)
    const CpuSpeed speed = measure_cpu_speed(setup);
    for (std::size_t b : answer.to_try) {
      TrainingSetup s = setup;
      s.batch = b;
      answer.expected_each.push_back(expected_seconds(s, answer.steps_per_trial, speed));
      answer.expected_seconds += answer.expected_each.back();
    }
    answer.trials_run = answer.expected_seconds <= f.trial_minutes * 60;
  }
  text << "confirming with real runs: B=" << estimator::list_of_batches(answer.to_try);
  if (answer.expected_seconds > 0) text << ", about " << spoken_duration(answer.expected_seconds) << " on this CPU";
  text << (answer.trials_run ? "" : ": not run") << "\n" << std::flush;

  if (answer.trials_run) run_trials(f, setup, device, file_tokens, answer);
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
                                     "Find the largest micro-batch that fits: meta runs, then real runs (two steps each) "
                                     "of the batches the answer rests on");
  add_device_flags(*cmd, flags->train.device);
  add_model_flags(*cmd, flags->train);
  add_technique_flags(*cmd, flags->train);
  add_optimizer_flags(*cmd, flags->train);
  add_data_flags(*cmd, flags->train);
  cmd->add_option("--limit", flags->limit, "Search no further than this micro-batch")
      ->capture_default_str()
      ->check(whole_number(1, FlagLimits::max_batch));
  cmd->add_option("--trial-minutes", flags->trial_minutes,
                  "On the CPU, confirm the meta runs' answer by real runs only if they are expected to take at most "
                  "this long (0: never; the expected time is said either way)")
      ->capture_default_str()
      ->check(real_number<double>(0, Bound::inclusive, 1e6, Bound::inclusive));
  add_gpu_flag(*cmd, flags->gpu,
               "Try the runs with this card's memory: the device budget on cpu, a cap on a larger card on cuda");
  cmd->add_flag("--json", flags->json, "Print JSON (the trials go to stderr)");
  cmd->callback([flags, &run] { run = [flags] { return run_max_batch(*flags); }; });
}

}  // namespace trainmem::cli
