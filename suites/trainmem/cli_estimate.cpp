// trainmem estimate: the memory of a training run, predicted before anything runs.
//
//   trainmem estimate --model gpt2-124m --batch 8 --precision bf16 --attention flash --gpu h100-80gb
//
// Takes every flag of `trainmem train` (model, techniques, data, device; those that change no
// memory, such as --steps and --seed, are said to be ignored), plus --gpu NAME (a card from the
// catalog) or --device-memory SIZE, and prints the predicted peak memory by category, where in the
// step the peak happens, whether it fits, the largest micro-batch that does, and, when it does not
// fit, the advice train would give (suites/trainmem/estimator/README.md says how). --json prints
// the same as JSON.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/comm/communicator.h"
#include "common/comm/rank_agreement.h"
#include "common/data/dataset_check.h"
#include "common/data/token_file.h"
#include "common/util/byte_size.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/command_settings.h"
#include "suites/trainmem/estimator/estimate_report.h"
#include "suites/trainmem/estimator/gpu_catalog.h"
#include "suites/trainmem/estimator/memory_estimate.h"
#include "common/cli/flag_ranges.h"
#include "suites/trainmem/techniques.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

struct EstimateFlags {
  TrainFlags train;  // every flag of train (train.json: train's result file, --json FILE, ignored)
  std::size_t world_size = 1;
  bool world_size_given = false;
  std::string gpu;
  bool json = false;                  // --json without a FILE: print JSON
  std::vector<std::string> ignored;   // the flags given that change no memory, with their values
  Settings settings;                  // what the ranks of mpirun compare first (rank_agreement.h)
};

// The device kind whose allocation pattern to predict: --pattern when given; else --gpu and
// --device cuda mean a GPU; auto means a GPU when one answers (as trainmem train would pick), else
// the CPU.
DeviceKind backend_for(const EstimateFlags& f) {
  if (!f.train.device.pattern.empty()) return f.train.device.backend();
  if (!f.gpu.empty()) {
    if (f.train.device.device == "cpu") throw std::invalid_argument("--gpu names a GPU: drop --device cpu (or drop --gpu)");
    return DeviceKind::cuda;
  }
  return f.train.device.backend();
}

estimator::EstimateTarget target_for(const EstimateFlags& f, DeviceKind backend) {
  estimator::EstimateTarget t;
  if (!f.gpu.empty()) {
    if (!f.train.device.device_memory.empty())
      throw std::invalid_argument("give --gpu NAME or --device-memory SIZE, not both");
    const estimator::GpuSpec& g = estimator::find_gpu(f.gpu);
    t.name = g.name + " (" + g.description + ")";
    t.total_bytes = g.total_bytes;
    t.usable_bytes = g.usable_bytes();
  } else if (!f.train.device.device_memory.empty()) {
    t.name = "--device-memory " + f.train.device.device_memory;
    t.total_bytes = t.usable_bytes = parse_device_memory(f.train.device.device_memory);
  } else if (backend == DeviceKind::cpu) {
    t.name = "cpu budget (the default --device-memory)";
    t.total_bytes = t.usable_bytes = kDefaultDeviceMemory;
  } else {
    if (auto reason = cuda_unavailable_reason())
      throw DeviceError("no GPU to size the estimate by (" + *reason + "): give --gpu NAME or --device-memory SIZE");
    const DeviceInfo info = query_cuda_device_info(0);
    t.name = "cuda:0 (" + info.name + ")";
    t.total_bytes = info.total_memory_bytes;
    t.usable_bytes = t.total_bytes - std::min(t.total_bytes, estimator::kCudaContextBytes);
  }
  return t;
}

// The ranks to estimate for: --world-size, or under mpirun the ranks it started (the run that
// `mpirun -np N trainmem train` with these flags would be).
std::size_t world_size_for(const EstimateFlags& f) {
  if (!launched_by_mpirun()) return f.world_size;
  const std::size_t launched = launched_world_size();
  if (f.world_size_given && f.world_size != launched)
    throw std::invalid_argument("--world-size " + std::to_string(f.world_size) + " but mpirun started " +
                                std::to_string(launched) + " ranks: give one or the other (an estimate needs no "
                                "ranks: 'trainmem estimate --world-size N' alone estimates for N)");
  return launched;
}

// "ignored (they change no memory a step holds): --steps 10, --seed 3"
std::string ignored_line(const std::vector<std::string>& ignored) {
  std::string line = "ignored (they change no memory a step holds): ";
  for (std::size_t i = 0; i < ignored.size(); ++i) line += (i ? ", " : "") + ignored[i];
  return line + "\n";
}

int run_estimate(const EstimateFlags& f) {
  // Under mpirun, ranks started with different flags stop here, naming the flag: each rank would
  // answer for its own flags, and only rank 0's answer would be printed.
  require_same_settings_on_every_rank(f.settings);
  // What train refuses, estimate refuses, with train's checks: the device flags (--pattern goes
  // with --device meta), every technique's rules (training_setup) and the data (its size for one
  // global batch, its tokens within the vocabulary; read without keeping it).
  f.train.device.to_options();
  const std::size_t world_size = world_size_for(f);
  const DeviceKind backend = backend_for(f);
  const estimator::EstimateTarget target = target_for(f, backend);
  const std::size_t dataset_tokens = checked_dataset_tokens(f.train, world_size, f.train.setup.batch);
  const TrainingSetup setup = training_setup(f.train, backend, dataset_tokens, world_size);
  const estimator::MemoryEstimate e = estimator::estimate_memory(setup, target.usable_bytes);
  if (launched_rank() != 0) return 0;  // under mpirun every rank estimates (and refuses) alike; rank 0 prints
  if (f.json) {
    nlohmann::json j = estimator::estimate_json(e, target);
    j["ignored_flags"] = f.ignored;
    std::cout << j.dump(2) << '\n';
  } else {
    if (!f.ignored.empty()) std::cout << ignored_line(f.ignored);
    std::cout << estimator::estimate_table(e, target);
  }
  return 0;
}

}  // namespace

void add_estimate_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<EstimateFlags>();
  CLI::App* cmd = app.add_subcommand("estimate", "Predict a training run's peak memory by category, before it runs");
  add_device_flags(*cmd, flags->train.device);
  add_pattern_flag(*cmd, flags->train.device);
  add_model_flags(*cmd, flags->train);
  add_technique_flags(*cmd, flags->train);
  add_optimizer_flags(*cmd, flags->train);
  add_data_flags(*cmd, flags->train);
  // The rest of train's flags, so that a train command line is an estimate's (they change no memory).
  add_run_flags(*cmd, flags->train, JsonFlag::the_callers);
  cmd->add_option("--world-size", flags->world_size,
                  "Ranks of data parallelism to estimate for (trainmem train takes them from mpirun -np N; under "
                  "mpirun, estimate does too, and rank 0 prints); under a technique that shards the model (ZeRO, FSDP), the figures are per rank")
      ->capture_default_str()
      ->check(whole_number(1, FlagLimits::max_world_size));
  add_gpu_flag(*cmd, flags->gpu, "Size the estimate for this card");
  cmd->add_option("--json", flags->train.json,
                  "Print JSON instead of the table (--json FILE, as train takes it, names train's result file: ignored)")
      ->expected(0, 1)
      ->type_name("[FILE]");
  cmd->callback([flags, cmd, &run] {
    flags->world_size_given = cmd->count("--world-size") > 0;
    flags->json = cmd->count("--json") > 0 && flags->train.json.empty();
    for (const std::string& name : flags_that_change_no_memory()) {
      const CLI::Option* option = cmd->get_option_no_throw(name);
      if (option == nullptr || option->count() == 0 || (name == "--json" && flags->json)) continue;
      flags->ignored.push_back(name + " " + option->results().front());
    }
    flags->settings = command_settings(*cmd);
    run = [flags] { return run_estimate(*flags); };
  });
}

}  // namespace trainmem::cli
