#include "suites/trainmem/train_flags.h"

#include "common/model/hf_config.h"

#include <limits>
#include <sstream>
#include <utility>

#include "common/allocator/memory_snapshot.h"
#include "common/data/dataset_check.h"
#include "common/data/token_file.h"
#include "common/cli/enum_flag.h"
#include "common/cli/flag_ranges.h"
#include "common/cli/output_flags.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::cli {

namespace {

// " --layers 2 --seq 128": the shape flags given, as written.
struct GivenShape {
  std::string flags;     // " --layers 24 --heads 16"
  bool dimensions = false;  // one of L, H, C, Hkv, F: a shape, not a preset's variant
};
GivenShape given_shape(const TrainFlags& f) {
  GivenShape g;
  auto add = [&g](const char* flag, const auto& value, bool dimension) {
    if (!value) return;
    std::ostringstream text;
    text << std::boolalpha << ' ' << flag << ' ' << *value;
    g.flags += text.str();
    g.dimensions = g.dimensions || dimension;
  };
  add("--layers", f.layers, true);
  add("--heads", f.heads, true);
  add("--kv-heads", f.kv_heads, true);
  add("--dim", f.dim, true);
  add("--ffn-dim", f.ffn_dim, true);
  add("--head-dim", f.head_dim, true);
  add("--tied-head", f.tied_head, true);
  add("--qkv-bias", f.qkv_bias, true);
  add("--experts", f.experts, true);
  add("--experts-per-token", f.experts_per_token, true);
  add("--expert-ffn-dim", f.expert_ffn_dim, true);
  add("--shared-expert-ffn-dim", f.shared_expert_ffn_dim, true);
  add("--normalize-top-k", f.normalize_top_k, true);
  add("--router-aux-loss", f.router_aux_loss, false);
  add("--seq", f.seq, false);
  add("--vocab", f.vocab, false);
  add("--rope-theta", f.rope_theta, false);
  add("--norm-eps", f.norm_eps, false);
  return g;
}

// The shape flags given, each changing the field it names.
void apply_shape_flags(const TrainFlags& f, ModelConfig& c) {
  if (f.layers) c.layers = *f.layers;
  if (f.heads) c.heads = *f.heads;
  if (f.dim) c.dim = *f.dim;
  if (f.seq) c.seq = *f.seq;
  if (f.vocab) c.vocab = *f.vocab;
  if (f.kv_heads) c.kv_heads = *f.kv_heads;
  if (f.ffn_dim) c.ffn_dim = *f.ffn_dim;
  if (f.head_dim) c.head_dim_set = *f.head_dim;
  if (f.tied_head) c.tied_head = *f.tied_head;
  if (f.qkv_bias) c.qkv_bias = *f.qkv_bias;
  if (f.experts) c.experts = *f.experts;
  if (f.experts_per_token) c.experts_per_token = *f.experts_per_token;
  if (f.expert_ffn_dim) c.expert_ffn_dim = *f.expert_ffn_dim;
  if (f.shared_expert_ffn_dim) c.shared_expert_ffn_dim = *f.shared_expert_ffn_dim;
  if (f.normalize_top_k) c.normalize_top_k = *f.normalize_top_k;
  if (f.router_aux_loss) c.router_aux_loss_coef = *f.router_aux_loss;
  if (f.rope_theta) c.rope.theta = *f.rope_theta;
  if (f.norm_eps) c.norm_eps = *f.norm_eps;
}

// A shape of one's own (shape flags and no --model): L, H and C as given, nothing of a preset's.
// What is not given and changes the answer is filled with the family's usual value, and said:
// T and V (GPT-2's 1024 and 50257, Llama 2's 4096 and 32000), a Llama's K/V heads (= H, multi-head
// attention, as transformers' LlamaConfig) and F (Meta's rule from C); the Llama constants change
// no memory and no time.
ModelConfig custom_shape(const TrainFlags& f, const GivenShape& given) {
  std::string missing;
  for (const auto& [value, flag] : {std::pair{f.layers, "--layers"}, {f.heads, "--heads"}, {f.dim, "--dim"}})
    if (!value) missing += std::string(missing.empty() ? "" : ", ") + flag;
  if (!missing.empty())
    throw ModelConfigError("a shape of your own needs --layers, --heads and --dim (missing: " + missing +
                           "); or start from a preset with --model NAME and change what differs");
  ModelConfig c;
  c.name = "custom";
  c.arch = f.arch.value_or(Arch::gpt);
  // The family's usual values first, then every flag given over them (as over a preset's).
  const FamilyDefaults usual = family_defaults(c.arch);
  c.seq = usual.seq;
  c.vocab = usual.vocab;
  c.kv_heads = *f.heads;
  c.ffn_dim = llama_ffn_dim(*f.dim);
  c.rope.theta = usual.rope_theta;
  c.norm_eps = usual.norm_eps;
  apply_shape_flags(f, c);

  std::vector<std::string> filled;  // "T=1024 (GPT-2's; no --seq)"
  if (!f.seq) filled.push_back("T=" + std::to_string(c.seq) + " (" + usual.whose + "; no --seq)");
  if (!f.vocab) filled.push_back("V=" + std::to_string(c.vocab) + " (" + usual.whose + "; no --vocab)");
  if (c.arch == Arch::llama) {
    if (!f.kv_heads) filled.push_back("Hkv=H (multi-head attention; no --kv-heads)");
    if (!f.ffn_dim && !f.experts)
      filled.push_back("F=" + std::to_string(c.ffn_dim) + " (Llama's 2/3 of 4C to a multiple of 256; no --ffn-dim)");
    // A mixture given by its expert count alone: Mixtral's top 2, experts as wide as F would be.
    if (f.experts && !f.experts_per_token) {
      c.experts_per_token = 2;
      filled.push_back("k=2 (Mixtral's; no --experts-per-token)");
    }
    if (f.experts && !f.expert_ffn_dim) {
      c.expert_ffn_dim = f.ffn_dim.value_or(c.ffn_dim);
      filled.push_back("Fe=" + std::to_string(c.expert_ffn_dim) + " (F; no --expert-ffn-dim)");
    }
  }
  c.origin = "as given:" + given.flags;
  if (!filled.empty()) {
    c.origin += "; filled in: ";
    for (std::size_t i = 0; i < filled.size(); ++i) c.origin += (i ? ", " : "") + filled[i];
  }
  return c;
}

// The model of a Hugging Face config.json (common/model/hf_config.h), with the shape flags given
// beside it changing its fields, and said so in its origin.
ModelConfig hf_config_model(const TrainFlags& f, const GivenShape& given) {
  if (!f.model.empty()) throw ModelConfigError("--model " + f.model + " and --hf-config " + f.hf_config + ": give one of them");
  ModelConfig c = read_hf_config(f.hf_config);
  if (f.arch && *f.arch != c.arch)
    throw ModelConfigError("--arch " + to_string(*f.arch) + " but " + f.hf_config + " describes a " + to_string(c.arch) +
                           ": drop --arch (the config has its family)");
  apply_shape_flags(f, c);
  if (!given.flags.empty()) {
    c.origin += "; changed with" + given.flags;
    c.name = "custom (from " + c.name + ")";  // as a preset changed by the shape flags
  }
  return c;
}

}  // namespace

ModelConfig model_config(const TrainFlags& f) {
  const GivenShape given = given_shape(f);
  ModelConfig c;
  if (!f.hf_config.empty()) {
    c = hf_config_model(f, given);
  } else if (f.model.empty() && given.dimensions) {
    c = custom_shape(f, given);
  } else {
    const std::string preset = !f.model.empty() ? f.model : f.arch == Arch::llama ? "llama-tiny" : "tiny";
    c = model_preset(preset);
    if (f.arch && *f.arch != c.arch)
      throw ModelConfigError("--arch " + to_string(*f.arch) + " but --model " + f.model + " is a " + to_string(c.arch) +
                             ": drop --arch (a preset has its family) or choose a " + to_string(*f.arch) + " preset");
    apply_shape_flags(f, c);
    if (!given.flags.empty()) {
      // The preset's own name, not the alias; "custom (from ...)" only for a preset the user named.
      c.origin = "from " + (f.model.empty() ? "the default model " + c.name + " (no --model)" : c.name) + " with" + given.flags;
      c.name = f.model.empty() ? "custom" : "custom (from " + c.name + ")";
    }
  }
  if (c.arch != Arch::llama) {
    for (const auto& [given_flag, flag] : {std::pair{f.kv_heads.has_value(), "--kv-heads"}, {f.ffn_dim.has_value(), "--ffn-dim"},
                                           {f.head_dim.has_value(), "--head-dim"}, {f.tied_head.has_value(), "--tied-head"},
                                           {f.qkv_bias.has_value(), "--qkv-bias"}, {f.experts.has_value(), "--experts"},
                                           {f.experts_per_token.has_value(), "--experts-per-token"},
                                           {f.expert_ffn_dim.has_value(), "--expert-ffn-dim"},
                                           {f.shared_expert_ffn_dim.has_value(), "--shared-expert-ffn-dim"},
                                           {f.normalize_top_k.has_value(), "--normalize-top-k"},
                                           {f.router_aux_loss.has_value(), "--router-aux-loss"},
                                           {f.rope_theta.has_value(), "--rope-theta"}, {f.norm_eps.has_value(), "--norm-eps"}})
      if (given_flag)
        throw ModelConfigError(std::string(flag) + " is the Llama family's: add --arch llama (or a llama --model), or drop " +
                               flag);
  }
  c.validate();
  check_run_sizes(c, f.setup.batch);  // every size the run computes stays below 2^62 bytes
  return c;
}

namespace {
// train's parser on `line` (CLI11's App::parse: a command line's text, or its words last first),
// then the setup it describes.
template <typename... Line>
TrainingSetup parsed_train_setup(DeviceKind backend, std::size_t world_size, Line&&... line) {
  CLI::App command{"", "trainmem train"};
  TrainFlags parsed;
  add_train_flags(command, parsed);
  command.parse(std::forward<Line>(line)...);
  return training_setup(parsed, backend, 0, world_size);
}
}  // namespace

TrainingSetup setup_from_train_flags(const std::string& flags, DeviceKind backend, std::size_t world_size) {
  return parsed_train_setup(backend, world_size, flags, false);
}

TrainingSetup setup_from_train_flags(const std::vector<std::string>& words, DeviceKind backend, std::size_t world_size) {
  std::vector<std::string> reversed(words.rbegin(), words.rend());  // CLI11 takes them last first
  return parsed_train_setup(backend, world_size, reversed);
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
  command
      .add_option("--hf-config", flags.hf_config,
                  std::string("A Hugging Face config.json (or the folder holding it) as the model, instead of --model: ") +
                      kHfConfigFamilies + "; the shape flags beside it change its fields")
      ->type_name("PATH");
  // (no default: a preset has its family, and --arch must agree with it)
  takes_one_of(command.add_option_function<std::string>(
                   "--arch", [&flags](const std::string& text) { flags.arch = kArchs.parse(text); },
                   "The model family: gpt (GPT-2) or llama (RMSNorm, RoPE, SwiGLU, grouped-query attention); a "
                   "preset has its own"),
               kArchs);
  using L = FlagLimits;
  command.add_option("--layers", flags.layers, "The number of layers L: changes --model's; with --heads and --dim and no --model, a shape of your own (T and V then GPT-2's or Llama 2's unless given)")->check(whole_number(1, L::max_layers));
  command.add_option("--heads", flags.heads, "The attention heads H (changes --model's)")->check(whole_number(1, L::max_heads));
  command.add_option("--kv-heads", flags.kv_heads, "Override the K/V heads of grouped-query attention (llama; = --heads: "
                     "multi-head attention)")->check(whole_number(1, L::max_heads));
  command.add_option("--dim", flags.dim, "The width C (changes --model's)")->check(whole_number(1, L::max_dim));
  command.add_option("--ffn-dim", flags.ffn_dim, "Override the MLP's hidden size F (llama's SwiGLU; a GPT's is 4C)")
      ->check(whole_number(1, L::max_ffn_dim));
  command.add_option("--head-dim", flags.head_dim, "Override the head dimension D (llama; default --dim / --heads: "
                     "Mistral NeMo's is 128 at C 5120, H 32)")->check(whole_number(1, L::max_dim));
  command.add_option("--tied-head", flags.tied_head, "true: the LM head is the token embedding wte (llama; "
                     "tie_word_embeddings: Llama 3.2, Qwen2.5 up to 3B). A GPT's is always tied")
      ->type_name("BOOL");
  command.add_option("--qkv-bias", flags.qkv_bias, "true: biases on the q, k, v projections (llama; Qwen2's)")
      ->type_name("BOOL");
  command.add_option("--experts", flags.experts, "A mixture of experts in every layer's MLP: E experts (llama; "
                     "Mixtral's 8, Qwen1.5-MoE's 60)")->check(whole_number(2, ModelConfig::kMaxExperts));
  command.add_option("--experts-per-token", flags.experts_per_token, "The experts k each token reaches (top-k of the "
                     "router's probabilities; Mixtral's 2)")->check(whole_number(1, ModelConfig::kMaxExperts));
  command.add_option("--expert-ffn-dim", flags.expert_ffn_dim, "An expert's SwiGLU hidden size Fe")
      ->check(whole_number(1, L::max_ffn_dim));
  command.add_option("--shared-expert-ffn-dim", flags.shared_expert_ffn_dim, "A shared expert of this hidden size Fs that "
                     "every token reaches, gated by a sigmoid (Qwen2-MoE's); 0: none")
      ->check(whole_number(0, L::max_ffn_dim));
  command.add_option("--normalize-top-k", flags.normalize_top_k, "true: the k routing weights are divided by their sum "
                     "(Mixtral's; Qwen2-MoE's norm_topk_prob)")->type_name("BOOL");
  command.add_option("--router-aux-loss", flags.router_aux_loss, "Add the load-balancing loss times this coefficient to "
                     "the loss (Switch Transformer's, as transformers' router_aux_loss_coef with output_router_logits); "
                     "0: not added")
      ->check(real_number<double>(0, Bound::inclusive, kNoMax, Bound::inclusive));
  command.add_option("--seq", flags.seq, "Override the context length T (also the training sequence length)")
      ->check(whole_number(1, L::max_seq));
  command.add_option("--vocab", flags.vocab, "Override the vocabulary size V (Llama 3's is 128256; training on a .tok file holds ids below 65536, its uint16 limit)")->check(whole_number(L::min_vocab, L::max_vocab));
  command.add_option("--rope-theta", flags.rope_theta, "Override the rotary embeddings' base theta (llama)")
      ->check(real_number<double>(1, Bound::exclusive, kNoMax, Bound::inclusive));
  command.add_option("--norm-eps", flags.norm_eps, "Override RMSNorm's epsilon (llama)")
      ->check(real_number<double>(0, Bound::exclusive, 1, Bound::exclusive));
  command.add_option("--batch", flags.setup.batch, "Micro-batch size B")->capture_default_str()->check(whole_number(1, L::max_batch));
}

// The model's options that suites measure (ModelOptions: how the model is built), declared here
// beside the shape (common/README.md, "Core options and techniques"). Their suites
// (mixed_precision, flash_attention) keep what depends on them: remedies, plan settings, formulas,
// benchmarks, README.
void add_model_option_flags(CLI::App& command, TrainingSetup& setup) {
  add_enum_flag(command, kPrecisions, setup.precision,
                "fp32, or bf16/fp16: 16-bit weights, gradients and activations with fp32 master weights");
  add_enum_flag(command, kAttentionKinds, setup.attention,
                "naive (saves B*H*T^2 probabilities), flash (saves O and a log-sum-exp per row), cudnn (GPU, "
                "bf16/fp16). Default: naive on the CPU; on a GPU flash where its kernels run (bf16/fp16, head "
                "dim 64 or 128), as PyTorch's scaled_dot_product_attention picks its flash kernel")
      ->default_str("naive on the CPU, flash on a GPU")
      ->each([&setup](const std::string&) { setup.attention_given = true; });
}

void add_technique_flags(CLI::App& command, TrainFlags& flags) {
  add_model_option_flags(command, flags.setup);
  registered_techniques().add_flags(command, flags.setup);
}

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
