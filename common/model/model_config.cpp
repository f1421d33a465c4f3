#include "common/model/model_config.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <sstream>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/cli/suggestion.h"
#include "common/model/parameter_table.h"
#include "common/util/checked_math.h"

namespace trainmem {

std::size_t ModelConfig::num_parameters() const { return ParameterTable(*this).total_numel(); }

void check_run_sizes(const ModelConfig& c, std::size_t batch) {
  const std::uint64_t B = batch, T = c.seq, H = c.heads, Vp = padded_vocab(c.vocab);
  try {
    checked_mul(c.num_parameters(), 16, "the model states (16 bytes per parameter: weights, gradients, Adam's moments)");
    checked_product({B, T, c.mlp_dim(), 4}, "the MLP activations (B x T x F x 4 bytes; GPT's F = 4C)");
    if (c.moe()) {
      checked_product({B, T, c.experts_per_token, std::max(c.expert_ffn_dim, c.dim), 4},
                      "the experts' activations (B x T x k x max(Fe, C) x 4 bytes)");
      // The grouped layout's rows are int32 (kernels/moe.h): B T k of them.
      if (B * T * c.experts_per_token > static_cast<std::uint64_t>(INT32_MAX))
        throw SizeLimitError("B x T x k = " + std::to_string(B * T * c.experts_per_token) +
                             " expert rows, above 2^31 - 1 (int32 row indices)");
    }
    checked_product({B, T, Vp, 4}, "the logits (B x T x Vp x 4 bytes)");
    checked_product({B, H, T, T, 4}, "the attention scores (B x H x T x T x 4 bytes)");
  } catch (const SizeLimitError& e) {
    throw SizeLimitError(std::string(e.what()) + " bytes; use a smaller model or --batch");
  }
}

void ModelConfig::validate() const {
  const std::string model = "model '" + name + "': ";
  if (vocab < 2 || seq < 1 || layers < 1 || heads < 1 || dim < 1 || num_kv_heads() < 1 || mlp_dim() < 1)
    throw ModelConfigError(model + "vocab >= 2 and seq, layers, heads, kv-heads, dim, ffn-dim >= 1 are needed");
  if (arch == Arch::gpt && head_dim_set != 0 && head_dim_set * heads != dim)
    throw ModelConfigError(model + "a GPT's head dimension is --dim / --heads; --head-dim " + std::to_string(head_dim_set) +
                           " is the Llama family's (add --arch llama)");
  if (head_dim_set == 0 && dim % heads != 0)
    throw ModelConfigError(model + "--dim " + std::to_string(dim) + " is not divisible by --heads " +
                           std::to_string(heads) + (arch == Arch::llama ? " (or set the head dimension: --head-dim)" : ""));
  // Token ids are int32 on the device. (Token files hold uint16 ids: a vocabulary above 65536, as
  // Llama-3's 128256, trains on the ids below it, and is estimated whole.)
  if (vocab > kMaxVocab)
    throw ModelConfigError(model + "a vocabulary above " + std::to_string(kMaxVocab) + " tokens is not supported");
  if (arch == Arch::gpt) {
    if (experts != 0 || experts_per_token != 0 || expert_ffn_dim != 0 || shared_expert_ffn_dim != 0)
      throw ModelConfigError(model + "a mixture of experts is the Llama family's (add --arch llama)");
    return;
  }
  if (heads % kv_heads != 0)
    throw ModelConfigError(model + "--heads " + std::to_string(heads) + " is not a multiple of --kv-heads " +
                           std::to_string(kv_heads) + " (each K/V head serves heads / kv-heads query heads)");
  if (head_dim() % 2 != 0)
    throw ModelConfigError(model + "the head dimension " + std::string(head_dim_set ? "--head-dim" : "--dim / --heads") +
                           " = " + std::to_string(head_dim()) + " is odd: rotary embeddings rotate pairs of channels");
  if (!(std::isfinite(rope.theta) && rope.theta > 1))
    throw ModelConfigError(model + "--rope-theta must be a finite number above 1");
  try {
    rope.check("rope");
  } catch (const std::invalid_argument& e) {
    throw ModelConfigError(model + e.what());
  }
  if (!(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1))
    throw ModelConfigError(model + "--norm-eps must be a number between 0 and 1 (excluded)");
  validate_experts();
}

void ModelConfig::validate_experts() const {
  const std::string model = "model '" + name + "': ";
  if (experts == 0) {
    if (experts_per_token != 0 || expert_ffn_dim != 0 || shared_expert_ffn_dim != 0 || router_aux_loss_coef != 0)
      throw ModelConfigError(model + "--experts-per-token, --expert-ffn-dim, --shared-expert-ffn-dim and --router-aux-loss "
                             "describe a mixture of experts: give --experts E too");
    return;
  }
  if (experts < 2 || experts > kMaxExperts)
    throw ModelConfigError(model + "--experts " + std::to_string(experts) + ": a mixture has 2 to " +
                           std::to_string(kMaxExperts) + " experts");
  if (experts_per_token < 1 || experts_per_token > experts)
    throw ModelConfigError(model + "--experts-per-token " + std::to_string(experts_per_token) +
                           ": each token reaches 1 to --experts (" + std::to_string(experts) + ") experts");
  if (expert_ffn_dim < 1) throw ModelConfigError(model + "--expert-ffn-dim must be at least 1");
  if (!(std::isfinite(router_aux_loss_coef) && router_aux_loss_coef >= 0))
    throw ModelConfigError(model + "--router-aux-loss must be a finite number >= 0");
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {{"name", name},     {"arch", to_string(arch)}, {"vocab", vocab},
                      {"padded_vocab", padded_vocab(vocab)}, {"seq", seq},   {"layers", layers},
                      {"heads", heads},   {"kv_heads", num_kv_heads()}, {"dim", dim},
                      {"ffn_dim", mlp_dim()}, {"parameters", num_parameters()},
                      // as Hugging Face counts them: without the vocabulary's padding rows
                      {"parameters_without_padding", num_parameters() - ParameterTable(*this).padding_numel()}};
  if (arch == Arch::llama) {
    j["rope_theta"] = rope.theta;
    if (rope.scaled())
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", rope.factor},
                           {"low_freq_factor", rope.low_freq_factor},
                           {"high_freq_factor", rope.high_freq_factor},
                           {"original_max_position_embeddings", rope.original_context}};
    j["norm_eps"] = norm_eps;
    j["head_dim"] = head_dim();
    j["tied_head"] = head_is_tied();
    j["qkv_bias"] = qkv_bias;
    if (moe())
      j["experts"] = {{"experts", experts},
                      {"experts_per_token", experts_per_token},
                      {"expert_ffn_dim", expert_ffn_dim},
                      {"shared_expert_ffn_dim", shared_expert_ffn_dim},
                      {"normalize_top_k", normalize_top_k},
                      {"router_aux_loss_coef", router_aux_loss_coef}};
  }
  if (!origin.empty()) j["origin"] = origin;
  return j;
}

namespace {
struct Preset {
  const char* name;
  Arch arch;
  std::size_t vocab, seq, layers, heads, dim;
  std::size_t kv_heads = 0, ffn_dim = 0;  // Llama's (a GPT's: heads and 4C)
  double rope_theta = 0, norm_eps = 0;
  // The variants (model_config.h): a tied head, q/k/v biases, D when not C/H, and Llama 3.1's
  // rope scaling factor (its other constants are every Llama 3.x's: 1, 4 and 8192).
  bool tied_head = false, qkv_bias = false;
  std::size_t head_dim = 0;
  double llama3_rope_factor = 1;
  MixtureShape experts;  // none unless set (mixture() below)

  ModelConfig config() const {
    ModelConfig c;
    c.name = name;
    c.arch = arch;
    c.vocab = vocab;
    c.seq = seq;
    c.layers = layers;
    c.heads = heads;
    c.dim = dim;
    if (arch == Arch::llama) {
      c.kv_heads = kv_heads;
      c.ffn_dim = ffn_dim;
      c.rope.theta = rope_theta;
      c.norm_eps = norm_eps;
      c.tied_head = tied_head;
      c.qkv_bias = qkv_bias;
      c.head_dim_set = head_dim;
      if (llama3_rope_factor != 1) c.rope = kernels::RopeFrequencies::llama3(rope_theta, llama3_rope_factor, 1, 4, 8192);
      c.set_mixture(experts);
    }
    return c;
  }
};
constexpr Preset gpt(const char* name, std::size_t vocab, std::size_t seq, std::size_t layers, std::size_t heads,
                     std::size_t dim) {
  Preset p{};  // (member by member: GCC 12 warns of a shorter braced list that leaves out `experts`)
  p.name = name;
  p.arch = Arch::gpt;
  p.vocab = vocab;
  p.seq = seq;
  p.layers = layers;
  p.heads = heads;
  p.dim = dim;
  return p;
}
constexpr Preset llama(const char* name, std::size_t vocab, std::size_t seq, std::size_t layers, std::size_t heads,
                       std::size_t kv_heads, std::size_t dim, std::size_t ffn_dim, double rope_theta, double norm_eps) {
  Preset p = gpt(name, vocab, seq, layers, heads, dim);
  p.arch = Arch::llama;
  p.kv_heads = kv_heads;
  p.ffn_dim = ffn_dim;
  p.rope_theta = rope_theta;
  p.norm_eps = norm_eps;
  return p;
}
// A Llama-family preset with its variants: tied head, q/k/v biases, head dimension, llama3 rope factor.
constexpr Preset with(Preset p, bool tied_head, bool qkv_bias, std::size_t head_dim, double llama3_rope_factor) {
  p.tied_head = tied_head;
  p.qkv_bias = qkv_bias;
  p.head_dim = head_dim;
  p.llama3_rope_factor = llama3_rope_factor;
  return p;
}
// A Llama-family preset whose MLPs are mixtures of E experts of width Fe, k per token (and a shared
// expert of width Fs; 0: none), the k weights renormalized or not.
constexpr Preset mixture(Preset p, std::size_t experts, std::size_t experts_per_token, std::size_t expert_ffn_dim,
                         std::size_t shared_expert_ffn_dim, bool normalize_top_k) {
  p.experts = {experts, experts_per_token, expert_ffn_dim, shared_expert_ffn_dim, normalize_top_k};
  return p;
}
// GPT-2 sizes from the GPT-2 paper / llm.c; tiny and small are ours, byte-level (V = 256).
// tiny-hd64 and tiny-hd128 are tiny models with the head dims the CUDA flash kernels take (64,
// 128; tiny's is 16), and T = 128, two of their 64-row tiles: the models that run flash and
// cuDNN attention on a GPU (ci/gpu-check's train step, test_training_cuda).
// Llama shapes from the models' published configurations (Hugging Face config.json: vocab_size,
// max_position_embeddings, num_hidden_layers, num_attention_heads, num_key_value_heads,
// hidden_size, intermediate_size, rope_theta, rms_norm_eps); their parameter counts are tested
// against the published ones (common/tests/test_parameter_table.cpp). mistral-7b is v0.1 at its
// 8192-token training context. llama-tiny and llama-small are ours: grouped (2 query heads per
// K/V head), byte-level, the sizes of tiny and small; llama-tiny-hd64 is tiny-hd64's Llama (head
// dim 64 for the CUDA flash kernels, 2 query heads on 1 K/V head).
constexpr Preset kPresets[] = {
    gpt("tiny", 256, 64, 2, 4, 64),
    gpt("small", 256, 128, 4, 4, 128),
    gpt("gpt2-124m", 50257, 1024, 12, 12, 768),
    gpt("gpt2-350m", 50257, 1024, 24, 16, 1024),
    gpt("gpt2-774m", 50257, 1024, 36, 20, 1280),
    gpt("gpt2-1.5b", 50257, 1024, 48, 25, 1600),
    gpt("tiny-hd64", 256, 128, 2, 2, 128),
    gpt("tiny-hd128", 256, 128, 2, 2, 256),
    llama("llama-tiny", 256, 64, 2, 4, 2, 64, 176, 10000, 1e-5),
    llama("llama-small", 256, 128, 4, 4, 2, 128, 352, 10000, 1e-5),
    llama("llama-tiny-hd64", 256, 128, 2, 2, 1, 128, 352, 10000, 1e-5),
    // Ours with a mixture of experts (tests and CPU runs): llama-tiny's and llama-small's attention,
    // 8 experts, top 2; in the small one a shared expert too.
    mixture(llama("llama-tiny-moe", 256, 64, 2, 4, 2, 64, 176, 10000, 1e-5), 8, 2, 64, 0, true),
    mixture(llama("llama-small-moe", 256, 128, 4, 4, 2, 128, 352, 10000, 1e-5), 8, 2, 96, 128, true),
    llama("llama2-7b", 32000, 4096, 32, 32, 32, 4096, 11008, 10000, 1e-5),
    llama("llama3-8b", 128256, 8192, 32, 32, 8, 4096, 14336, 500000, 1e-5),
    llama("llama3-70b", 128256, 8192, 80, 64, 8, 8192, 28672, 500000, 1e-5),
    llama("mistral-7b", 32000, 8192, 32, 32, 8, 4096, 14336, 10000, 1e-5),
    // The shapes Hugging Face configs give (ANCHORS.md, "Hugging Face configs"; common/tests/data/hf_configs):
    // the context is max_position_embeddings.
    with(llama("llama3.2-1b", 128256, 131072, 16, 32, 8, 2048, 8192, 500000, 1e-5), true, false, 0, 32),
    with(llama("llama3.1-8b", 128256, 131072, 32, 32, 8, 4096, 14336, 500000, 1e-5), false, false, 0, 8),
    with(llama("qwen2.5-0.5b", 151936, 32768, 24, 14, 2, 896, 4864, 1000000, 1e-6), true, true, 0, 1),
    with(llama("qwen2.5-7b", 152064, 131072, 28, 28, 4, 3584, 18944, 1000000, 1e-6), false, true, 0, 1),
    with(llama("mistral-nemo-12b", 131072, 1024000, 40, 32, 8, 5120, 14336, 1000000, 1e-5), false, false, 128, 1),
    // Mixtures of experts: Mixtral 8x7B (8 experts of 14336, top 2) and Qwen1.5-MoE-A2.7B (60 of
    // 1408, top 4, not renormalized, a shared expert of 5632, q/k/v biases).
    mixture(llama("mixtral-8x7b", 32000, 32768, 32, 32, 8, 4096, 14336, 1000000, 1e-5), 8, 2, 14336, 0, true),
    mixture(with(llama("qwen1.5-moe-a2.7b", 151936, 8192, 24, 16, 16, 2048, 5632, 1000000, 1e-6), false, true, 0, 1), 60, 4,
            1408, 5632, false),
};
}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

// A preset by its name or an alias, in any case ("GPT2-Medium" is gpt2-350m). The config keeps
// the preset's own name.
ModelConfig model_preset(const std::string& name) {
  // The names Hugging Face gives the GPT-2 checkpoints, for the sizes above.
  static constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
      {"gpt2", "gpt2-124m"},        {"gpt2-small", "gpt2-124m"}, {"gpt2-medium", "gpt2-350m"},
      {"gpt2-large", "gpt2-774m"}, {"gpt2-xl", "gpt2-1.5b"},
  };
  std::string wanted = name;
  std::transform(wanted.begin(), wanted.end(), wanted.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [alias, preset] : kAliases)
    if (wanted == alias) wanted = preset;
  for (const Preset& p : kPresets)
    if (wanted == p.name) return p.config();
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  std::string aliases;
  for (const auto& [alias, preset] : kAliases) aliases += std::string(aliases.empty() ? "" : ", ") + std::string(alias) + "=" + std::string(preset);
  std::vector<std::string> names = model_preset_names();
  for (const auto& [alias, preset] : kAliases) names.emplace_back(alias);
  throw ModelConfigError("unknown model '" + name + "'" + cli::did_you_mean(wanted, names) + " (presets: " + known +
                         ", in any case; aliases " + aliases +
                       "; or describe a shape of your own with --layers --heads --dim, and --arch --seq --vocab "
                       "--kv-heads --ffn-dim --rope-theta --norm-eps)");
}

std::string ModelConfig::label() const {
  if (origin.empty()) return name + " (" + to_string(arch) + ")";
  // A shape changed from a preset or given whole is "custom" (the origin names the preset, if any);
  // one read from a file keeps the file's name ("TinyLlama-1.1B (llama, from .../config.json ...)").
  const bool custom = name.rfind("custom", 0) == 0;
  return (custom ? std::string("custom") : name) + " (" + to_string(arch) + ", " + origin + ")";
}

FamilyDefaults family_defaults(Arch arch) {
  if (arch == Arch::llama) return {4096, 32000, 10000, 1e-5, "Llama 2's"};
  return {1024, 50257, 10000, 1e-5, "GPT-2's"};  // (a GPT has no rotary embeddings nor RMSNorm)
}

std::size_t llama_ffn_dim(std::size_t dim) {
  const std::size_t two_thirds_of_4c = 2 * (4 * dim) / 3;
  return (two_thirds_of_4c + 255) / 256 * 256;
}

std::string ModelConfig::shape_summary() const {
  std::string s = "L=" + std::to_string(layers) + " H=" + std::to_string(heads);
  if (arch == Arch::llama) s += " Hkv=" + std::to_string(num_kv_heads());
  s += " C=" + std::to_string(dim);
  if (moe()) {
    s += " E=" + std::to_string(experts) + " k=" + std::to_string(experts_per_token) + " Fe=" + std::to_string(expert_ffn_dim);
    if (shared_expert_ffn_dim != 0) s += " Fs=" + std::to_string(shared_expert_ffn_dim);
  } else if (arch == Arch::llama) {
    s += " F=" + std::to_string(mlp_dim());
  }
  if (arch == Arch::llama && head_dim_set != 0) s += " D=" + std::to_string(head_dim());  // only where it is not C/H
  s += " T=" + std::to_string(seq) + " V=" + std::to_string(vocab) + ", padded to Vp=" + std::to_string(padded_vocab(vocab));
  if (arch == Arch::llama && tied_head) s += ", tied head";
  if (arch == Arch::llama && qkv_bias) s += ", q/k/v biases";
  if (moe() && !normalize_top_k) s += ", top-k weights not renormalized";
  if (moe() && router_aux_loss_coef != 0) {
    std::ostringstream coef;
    coef << router_aux_loss_coef;
    s += ", load-balancing loss x" + coef.str();
  }
  return s;
}

}  // namespace trainmem
