// trainmem max-batch: the largest micro-batch that fits, found by trying — real allocations, real
// training steps — next to the estimator's answer.
//
//   trainmem max-batch --model tiny --device-memory 24MiB --precision bf16
//   B=14  fits    peak allocated 17.93 MiB  reserved 22.00 MiB   61.2 ms/step
//   B=15  OOM     (out of memory in ... )
//   largest micro-batch that fits: 14 (tried); the estimator says 14
//
// Each trial builds the run as `trainmem train` does and trains two steps: Adam's moments are
// allocated at the end of the first step, so only the second has everything in place (a batch
// that survives one step can still fail in the next). The search starts at the estimator's answer
// (usually two trials: it fits, one more does not) and widens by doubling or halving, then
// bisects.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/data/token_file.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/estimate_flags.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "suites/trainmem/estimator/trial_run.h"
#include "common/cli/flag_ranges.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

struct MaxBatchFlags {
  TrainFlags train;
  std::string gpu;  // --gpu NAME: the trials' device memory is that card's usable memory
  std::size_t limit = 4096;
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
  if (const Technique* sharding = registered_techniques().sharding(setup))
    throw std::invalid_argument("max-batch tries runs on one device, without ranks: drop " + sharding->describe(setup) +
                                " (trainmem estimate --world-size N gives a sharded run's largest micro-batch)");
  // The search goes no further than the data holds (train would refuse a larger batch).
  const std::size_t data_limit = estimator::data_batch_limit(setup);  // 0: synthetic, no limit
  const std::size_t limit = data_limit ? std::min(f.limit, data_limit) : f.limit;
  const bool data_limits = limit < f.limit;

  // The estimator's answer, on the capacity the allocator has.
  bool capped = false;
  const std::size_t predicted = estimator::largest_fitting_batch(setup, capacity, limit, &capped);

  estimator::TrialOptions trial_options;
  trial_options.device = f.train.device.device;
  trial_options.capacity = options.device_memory.value_or(0);
  if (!file_tokens.empty()) trial_options.tokens = &file_tokens;
  nlohmann::json trials = nlohmann::json::array();
  std::map<std::size_t, bool> tried;  // B -> fits
  auto fits = [&](std::size_t b) {
    if (auto it = tried.find(b); it != tried.end()) return it->second;
    TrainingSetup s = setup;
    s.batch = b;
    const estimator::TrialResult r = estimator::run_trial(s, trial_options);
    const bool ok = !r.oom.has_value();
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
    return tried[b] = ok;
  };

  // Bracket: lo fits (0: nothing known to), hi does not (limit + 1: nothing known not to).
  std::size_t lo = 0, hi = limit + 1;
  std::size_t start = std::clamp<std::size_t>(predicted, 1, limit);
  if (fits(start)) {
    lo = start;
    for (std::size_t step = 1; lo < limit;) {  // up: start+1, +2, +4, ... until one fails
      const std::size_t b = std::min(lo + step, limit);
      if (!fits(b)) {
        hi = b;
        break;
      }
      lo = b;
      step *= 2;
    }
  } else {
    hi = start;
    for (std::size_t b = start / 2; b >= 1; b /= 2) {  // down: halve until one fits
      if (fits(b)) {
        lo = b;
        break;
      }
      hi = b;
    }
  }
  if (lo > 0)
    while (hi - lo > 1) {
      const std::size_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }

  // What stopped the search: memory (a larger batch does not fit), the data (it holds no larger
  // batch), or --limit (it was not tried).
  const bool at_limit = lo == limit;
  if (f.json) {
    nlohmann::json j = {{"command", "max-batch"},
                        {"device", device_name},
                        {"capacity_bytes", capacity},
                        {"config", {{"model", config.to_json()}, {"setup", describe_setup(setup)}}},
                        {"steps_per_trial", trial_options.steps},
                        {"limit", f.limit},
                        {"data_limit", data_limit ? nlohmann::json(data_limit) : nlohmann::json()},
                        {"max_batch", lo},
                        {"max_batch_is_limit", at_limit && !data_limits},
                        {"max_batch_is_data_limit", at_limit && data_limits},
                        {"predicted_max_batch", predicted},
                        {"predicted_is_limit", capped},
                        {"trials", trials}};
    std::cout << j.dump(2) << '\n';
    return 0;
  }
  std::cout << "largest micro-batch that fits " << device_name << ": ";
  if (lo == 0) std::cout << "none (not even --batch 1)";
  else std::cout << (at_limit && !data_limits ? ">= " : "") << lo;
  std::cout << " (tried, " << trials.size() << " trials of " << trial_options.steps << " steps); the estimator says ";
  if (predicted == 0) std::cout << "none";
  else std::cout << (capped && !data_limits ? ">= " : "") << predicted;
  std::cout << '\n';
  if (at_limit && data_limits)
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
