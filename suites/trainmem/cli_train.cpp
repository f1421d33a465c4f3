// trainmem train: trains a GPT on the chosen device and shows its memory as it goes.
//
//   trainmem train --model tiny --steps 300 --json run.json
//   step   10/300 | loss 4.2210 | 21.4 ms | 11963 tok/s | mem 2.91 MiB/24.00 MiB (peak 8.09 MiB/24.00 MiB)
//
// mem=ALLOCATED/RESERVED is what the program holds / what the allocator holds from the device,
// the familiar "GPU=1.3GB/6.8GB" readout; the gap between them is cached free memory.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "common/data/token_file.h"
#include "common/results/result_json.h"
#include "common/train/trainer.h"
#include "common/util/byte_size.h"
#include "suites/checkpointing/recompute.h"
#include "suites/lazy_loading/eager_loader.h"
#include "suites/lazy_loading/lazy_loader.h"
#include "suites/mixed_precision/loss_scaler.h"
#include "suites/trainmem/cli_common.h"
#include "suites/trainmem/train_flags.h"

namespace trainmem::cli {

namespace {

std::string progress_line(const StepResult& r, long total, std::string techniques) {
  if (r.loss_scale != 1.0) {
    char scale[48];
    std::snprintf(scale, sizeof scale, " scale=%g", r.loss_scale);
    techniques += scale;
  }
  if (r.skipped) techniques += " SKIPPED(inf/nan grads)";
  char line[400];
  std::snprintf(line, sizeof line, "step %4ld/%ld | %s | loss %.4f | %7.1f ms | %8.0f tok/s | mem %s/%s (peak %s/%s)", r.step,
                total, techniques.c_str(), r.loss, r.ms, r.tokens_per_s, format_bytes(static_cast<std::uint64_t>(r.allocated_bytes)).c_str(),
                format_bytes(static_cast<std::uint64_t>(r.reserved_bytes)).c_str(),
                format_bytes(static_cast<std::uint64_t>(r.peak_allocated_bytes)).c_str(),
                format_bytes(static_cast<std::uint64_t>(r.peak_reserved_bytes)).c_str());
  return line;
}

int run_train(const TrainFlags& flags) {
  const GPTConfig config = model_config(flags);
  if (flags.steps < 1) throw std::invalid_argument("--steps must be at least 1");
  const RecomputePolicy recompute = RecomputePolicy::parse(flags.recompute);
  const Precision precision = parse_precision(flags.precision);
  if (flags.loss_scaler_flag_given && precision != Precision::fp16)
    throw std::invalid_argument("--loss-scale* options apply only to --precision fp16 (bf16 and fp32 need no loss scaling)");
  const std::size_t T = config.seq;
  // Data first: a bad file is an input error, found before any memory is touched.
  // A token file under the lazy loader is memory-mapped, never read into the heap; everything else
  // is loaded (and checked) into host memory here.
  const bool map_token_file =
      flags.loader == "lazy" && flags.data.size() > 4 && flags.data.compare(flags.data.size() - 4, 4, ".tok") == 0;
  std::vector<std::uint16_t> tokens;
  lazy_loading::HostTokens mapped_tokens;
  if (map_token_file) {
    mapped_tokens = lazy_loading::HostTokens::map_file(flags.data);
    mapped_tokens.check_vocab(config.vocab, "--data " + flags.data);
  } else {
    tokens = load_dataset(flags.data, flags.batch * T + 1, config.vocab, flags.seed);
  }

  const DeviceOptions options = flags.device.to_options();
  auto device = Device::open(options, &std::cerr);
  device->allocator().recorder().enable(!flags.record_memory.empty());
  std::cerr << "model: " << config.name << ", " << config.num_parameters() << " parameters (L=" << config.layers
            << " H=" << config.heads << " C=" << config.dim << " T=" << T << " V=" << config.vocab << "), batch "
            << flags.batch << " x " << flags.accum << " accumulation steps, " << flags.steps << " steps\n";

  ModelOptions model_options;
  model_options.precision = precision;
  model_options.attention = parse_attention(flags.attention);
  GPT model(*device, config, flags.seed, model_options);
  // Where the dataset lives (suites/lazy_loading): on the host read in order (sequential), all on
  // the device (eager), or on the host with batches prefetched by a background thread (lazy).
  std::unique_ptr<BatchSource> data;
  if (flags.loader == "sequential") {
    data = std::make_unique<SequentialBatches>(*device, std::move(tokens), flags.batch, T);
  } else if (flags.loader == "eager") {
    data = std::make_unique<lazy_loading::EagerLoader>(*device, lazy_loading::HostTokens(std::move(tokens)), flags.batch,
                                                      T, lazy_loading::EagerLoaderOptions{flags.seed, true});
  } else {
    lazy_loading::LazyLoaderOptions lo;
    lo.prefetch = flags.prefetch;
    lo.pinned = flags.pinned;
    lo.seed = flags.seed;
    data = std::make_unique<lazy_loading::LazyLoader>(
        *device, map_token_file ? std::move(mapped_tokens) : lazy_loading::HostTokens(std::move(tokens)), flags.batch, T,
        lo);
  }
  TrainerOptions topt;
  topt.batch = flags.batch;
  topt.seq = T;
  topt.adam.lr = flags.lr;
  topt.adam.weight_decay = flags.weight_decay;
  topt.max_grad_norm = flags.grad_clip;
  topt.accumulation_steps = flags.accum;
  // The techniques, as strategies on the trainer's hooks.
  RecomputeStrategy recompute_strategy(recompute);
  DynamicLossScaler loss_scaler(flags.loss_scaler);
  std::vector<Strategy*> strategies;
  if (recompute.kind != RecomputePolicy::Kind::none) strategies.push_back(&recompute_strategy);
  if (precision == Precision::fp16) strategies.push_back(&loss_scaler);
  Trainer trainer(model, *data, topt, strategies);
  std::string techniques = to_string(precision);
  techniques += " accum=";
  techniques += std::to_string(flags.accum);
  techniques += " recompute=";
  techniques += recompute.to_string();
  techniques += " attention=";
  techniques += flags.attention;
  if (flags.loader != "sequential") {
    techniques += " loader=";
    techniques += flags.loader;
  }

  const bool terminal = isatty(STDOUT_FILENO);
  nlohmann::json steps = nlohmann::json::array();
  for (long i = 0; i < flags.steps; ++i) {
    const StepResult r = trainer.step();
    steps.push_back({{"step", r.step},
                     {"loss", r.loss},
                     {"grad_norm", r.grad_norm},
                     {"loss_scale", r.loss_scale},
                     {"skipped", r.skipped},
                     {"ms", r.ms},
                     {"tokens_per_s", r.tokens_per_s},
                     {"allocated_bytes", r.allocated_bytes},
                     {"reserved_bytes", r.reserved_bytes}});
    // On a terminal, one line redrawn in place; in a log, one line per step.
    std::cout << (terminal ? "\r" : "") << progress_line(r, flags.steps, techniques) << (terminal && i + 1 < flags.steps ? "" : "\n")
              << std::flush;
  }

  if (!flags.json.empty()) {
    nlohmann::json result = run_context_json(device->info(), options.allocator);
    result["config"] = {{"command", "train"},
                        {"model", config.to_json()},
                        {"batch", flags.batch},
                        {"seq", T},
                        {"steps", flags.steps},
                        {"lr", flags.lr},
                        {"weight_decay", flags.weight_decay},
                        {"grad_clip", flags.grad_clip},
                        {"seed", flags.seed},
                        {"data", flags.data},
                        {"device", flags.device.device},
                        {"device_memory_bytes", device->info().device_memory_bytes},
                        {"allocator_config", options.allocator.to_string()},
                        {"precision", to_string(precision)},
                        {"attention", flags.attention},
                        {"loader", flags.loader},
                        {"prefetch", flags.prefetch},
                        {"pinned", flags.pinned},
                        {"accum", flags.accum},
                        {"recompute", recompute.to_string()},
                        {"tokens_per_step", flags.batch * T * flags.accum}};
    if (precision == Precision::fp16)
      result["config"]["loss_scaler"] = {{"init_scale", flags.loss_scaler.init_scale},
                                         {"growth_factor", flags.loss_scaler.growth_factor},
                                         {"backoff_factor", flags.loss_scaler.backoff_factor},
                                         {"growth_interval", flags.loss_scaler.growth_interval},
                                         {"skipped_steps", loss_scaler.skipped_steps()}};
    result["steps"] = std::move(steps);
    result["memory"] = memory_json(device->allocator());
    std::ofstream out(flags.json);
    if (!out) throw std::runtime_error("cannot write --json " + flags.json);
    out << result.dump(2) << '\n';
  }
  if (!flags.record_memory.empty()) device->allocator().recorder().write_json(flags.record_memory);
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, Command& run) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* train = app.add_subcommand("train", "Train a GPT and watch its memory");
  add_device_flags(*train, flags->device);
  add_model_flags(*train, *flags);
  add_technique_flags(*train, *flags);
  add_data_flags(*train, *flags);
  add_run_flags(*train, *flags);
  train->callback([flags, &run] { run = [flags] { return run_train(*flags); }; });
}

}  // namespace trainmem::cli
