#include "suites/trainmem/train_flags.h"

#include <limits>

#include "common/allocator/memory_snapshot.h"
#include "common/data/dataset_check.h"
#include "common/data/token_file.h"
#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "common/cli/output_flags.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::cli {

ModelConfig model_config(const TrainFlags& f) {
  const std::string preset = !f.model.empty() ? f.model : f.arch == Arch::llama ? "llama-tiny" : "tiny";
  ModelConfig c = model_preset(preset);
  if (f.arch && *f.arch != c.arch)
    throw ModelConfigError("--arch " + to_string(*f.arch) + " but --model " + f.model + " is a " + to_string(c.arch) +
                           ": drop --arch (a preset has its family) or choose a " + to_string(*f.arch) + " preset");
  if (c.arch != Arch::llama) {
    for (const auto& [given, flag] : {std::pair{f.kv_heads.has_value(), "--kv-heads"}, {f.ffn_dim.has_value(), "--ffn-dim"},
                                      {f.rope_theta.has_value(), "--rope-theta"}, {f.norm_eps.has_value(), "--norm-eps"}})
      if (given)
        throw ModelConfigError(std::string(flag) + " is the Llama family's: add --arch llama (or a llama --model), or drop " +
                               flag);
  }
  if (f.layers) c.layers = *f.layers;
  if (f.heads) c.heads = *f.heads;
  if (f.dim) c.dim = *f.dim;
  if (f.seq) c.seq = *f.seq;
  if (f.vocab) c.vocab = *f.vocab;
  if (f.kv_heads) c.kv_heads = *f.kv_heads;
  if (f.ffn_dim) c.ffn_dim = *f.ffn_dim;
  if (f.rope_theta) c.rope_theta = *f.rope_theta;
  if (f.norm_eps) c.norm_eps = *f.norm_eps;
  if (f.layers || f.heads || f.dim || f.seq || f.vocab || f.kv_heads || f.ffn_dim || f.rope_theta || f.norm_eps)
    c.name += "+custom";  // the preset's own name, not the alias
  c.validate();
  check_run_sizes(c, f.setup.batch);  // every size the run computes stays below 2^62 bytes
  return c;
}

TrainingSetup setup_from_train_flags(const std::string& flags, DeviceKind backend, std::size_t world_size) {
  CLI::App command{"", "trainmem train"};
  TrainFlags parsed;
  add_train_flags(command, parsed);
  command.parse(flags, false);
  return training_setup(parsed, backend, 0, world_size);
}

TrainingSetup training_setup(const TrainFlags& flags, DeviceKind backend, std::size_t dataset_tokens,
                             std::size_t world_size) {
  TrainingSetup s = flags.setup;  // batch, seed, the optimizer and every technique's options, as the flags set them
  s.model = model_config(flags);
  s.dataset_tokens = dataset_tokens;
  s.backend = backend;
  s.allocator = flags.device.allocator();
  s.world_size = world_size;
  registered_techniques().complete(s);
  registered_techniques().validate(s);
  return s;
}

std::size_t checked_dataset_tokens(const TrainFlags& flags, std::size_t world_size, std::size_t batch) {
  const ModelConfig config = model_config(flags);
  const std::size_t min_tokens = tokens_for_batches(world_size, batch, config.seq);
  const DatasetFacts facts = inspect_dataset(flags.data, min_tokens);
  check_dataset(facts, flags.data, min_tokens, config.vocab);
  return flags.data == "synthetic" ? 0 : static_cast<std::size_t>(facts.tokens);
}

void add_model_flags(CLI::App& command, TrainFlags& flags) {
  std::string presets;
  for (const std::string& name : model_preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  command
      .add_option("--model", flags.model,
                  "Preset: " + presets + ", in any case; also GPT-2's Hugging Face names (gpt2 and gpt2-small = "
                  "gpt2-124m, gpt2-medium, gpt2-large, gpt2-xl). Default: tiny (llama-tiny with --arch llama)")
      ->type_name("NAME");
  // (no default: a preset has its family, and --arch must agree with it)
  takes_one_of(command.add_option_function<std::string>(
                   "--arch", [&flags](const std::string& text) { flags.arch = kArchs.parse(text); },
                   "The model family: gpt (GPT-2) or llama (RMSNorm, RoPE, SwiGLU, grouped-query attention); a "
                   "preset has its own"),
               kArchs);
  using L = FlagLimits;
  command.add_option("--layers", flags.layers, "Override the preset's number of layers L")->check(whole_number(1, L::max_layers));
  command.add_option("--heads", flags.heads, "Override the number of attention heads H")->check(whole_number(1, L::max_heads));
  command.add_option("--kv-heads", flags.kv_heads, "Override the K/V heads of grouped-query attention (llama; = --heads: "
                     "multi-head attention)")->check(whole_number(1, L::max_heads));
  command.add_option("--dim", flags.dim, "Override the width C")->check(whole_number(1, L::max_dim));
  command.add_option("--ffn-dim", flags.ffn_dim, "Override the MLP's hidden size F (llama's SwiGLU; a GPT's is 4C)")
      ->check(whole_number(1, L::max_ffn_dim));
  command.add_option("--seq", flags.seq, "Override the context length T (also the training sequence length)")
      ->check(whole_number(1, L::max_seq));
  command.add_option("--vocab", flags.vocab, "Override the vocabulary size V (at most 65536: token files hold uint16 ids; a preset may be larger, e.g. Llama 3's 128256, whose ids above 65535 never occur in training)")->check(whole_number(L::min_vocab, L::max_vocab));
  command.add_option("--rope-theta", flags.rope_theta, "Override the rotary embeddings' base theta (llama)")
      ->check(real_number<double>(1, Bound::exclusive, kNoMax, Bound::inclusive));
  command.add_option("--norm-eps", flags.norm_eps, "Override RMSNorm's epsilon (llama)")
      ->check(real_number<double>(0, Bound::exclusive, 1, Bound::exclusive));
  command.add_option("--batch", flags.setup.batch, "Micro-batch size B")->capture_default_str()->check(whole_number(1, L::max_batch));
}

void add_technique_flags(CLI::App& command, TrainFlags& flags) { registered_techniques().add_flags(command, flags.setup); }

void add_data_flags(CLI::App& command, TrainFlags& flags) {
  command.add_option("--data", flags.data, "synthetic, a .tok token file, or any file (tokenized byte by byte)")
      ->capture_default_str();
}

void add_optimizer_flags(CLI::App& command, TrainFlags& flags) {
  // lr, weight decay and the clip norm are floats: finite, at most the largest float, and none
  // so small that a float would keep 0 or a denormal (real_number<float>).
  command.add_option("--lr", flags.setup.adam.lr, "AdamW learning rate")
      ->capture_default_str()
      ->check(real_number<float>(0, Bound::exclusive, kNoMax, Bound::inclusive));
  command.add_option("--weight-decay", flags.setup.adam.weight_decay, "AdamW weight decay")
      ->capture_default_str()
      ->check(real_number<float>(0, Bound::inclusive, kNoMax, Bound::inclusive));
  command.add_option("--grad-clip", flags.setup.max_grad_norm, "Clip the global gradient norm to this (0: off)")
      ->capture_default_str()
      ->check(real_number<float>(0, Bound::inclusive, kNoMax, Bound::inclusive));
}

void add_run_flags(CLI::App& command, TrainFlags& flags, JsonFlag json) {
  command.add_option("--steps", flags.steps, "Optimizer steps")->capture_default_str()->check(whole_number(1, FlagLimits::max_steps));
  command.add_option("--seed", flags.setup.seed, "Seed for the initialization and the synthetic corpus")
      ->capture_default_str()
      ->check(whole_number(0, std::numeric_limits<std::uint64_t>::max()));
  if (json == JsonFlag::result_file)
    add_output_flag(command, "--json", flags.json, "Write the run's result (config, device, per-step figures, memory) here");
  add_output_flag(command, "--record-memory", flags.record_memory,
                  "Write the allocator's event log (every event of the run) here, streamed to the file as it "
                  "happens: none is kept in memory; 'trainmem replay' reads it");
  add_output_flag(command, "--memory-snapshot", flags.memory_snapshot,
                  "Write the final segments and the last " + std::to_string(kSnapshotMaxEntries) +
                      " events (PyTorch's max_entries) in PyTorch's snapshot structure (JSON) here; "
                      "the report tool turns it into the pickle pytorch.org/memory_viz opens");
}

void add_train_flags(CLI::App& command, TrainFlags& flags) {
  add_device_flags(command, flags.device);
  add_pattern_flag(command, flags.device);
  add_model_flags(command, flags);
  add_technique_flags(command, flags);
  add_data_flags(command, flags);
  add_optimizer_flags(command, flags);
  add_run_flags(command, flags);
}

}  // namespace trainmem::cli
