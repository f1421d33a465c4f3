#include "common/model/gpt_config.h"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/model/parameter_table.h"
#include "common/util/checked_math.h"

namespace trainmem {

std::size_t GPTConfig::num_parameters() const { return ParameterTable(*this).total_numel(); }

void check_run_sizes(const GPTConfig& c, std::size_t batch) {
  const std::uint64_t B = batch, T = c.seq, C = c.dim, H = c.heads, Vp = padded_vocab(c.vocab);
  try {
    checked_mul(c.num_parameters(), 16, "the model states (16 bytes per parameter: weights, gradients, Adam's moments)");
    checked_product({B, T, 4, C, 4}, "the MLP activations (B x T x 4C x 4 bytes)");
    checked_product({B, T, Vp, 4}, "the logits (B x T x Vp x 4 bytes)");
    checked_product({B, H, T, T, 4}, "the attention scores (B x H x T x T x 4 bytes)");
  } catch (const SizeLimitError& e) {
    throw SizeLimitError(std::string(e.what()) + " bytes; use a smaller model or --batch");
  }
}

void GPTConfig::validate() const {
  if (vocab < 2 || seq < 1 || layers < 1 || heads < 1 || dim < 1)
    throw GPTConfigError("model '" + name + "': vocab >= 2 and seq, layers, heads, dim >= 1 are needed");
  if (dim % heads != 0)
    throw GPTConfigError("model '" + name + "': --dim " + std::to_string(dim) + " is not divisible by --heads " +
                         std::to_string(heads));
  if (vocab > 65536)
    throw GPTConfigError("model '" + name + "': --vocab above 65536 does not fit the uint16 token format");
}

nlohmann::json GPTConfig::to_json() const {
  return {{"name", name},     {"vocab", vocab}, {"padded_vocab", padded_vocab(vocab)}, {"seq", seq},
          {"layers", layers}, {"heads", heads}, {"dim", dim},
          {"parameters", num_parameters()}};
}

namespace {
struct Preset {
  const char* name;
  std::size_t vocab, seq, layers, heads, dim;
};
// GPT-2 sizes from the GPT-2 paper / llm.c; tiny and small are ours, byte-level (V = 256).
// tiny-hd64 and tiny-hd128 are tiny models with the head dims the CUDA flash kernels take (64,
// 128; tiny's is 16), and T = 128, two of their 64-row tiles: the models that run flash and
// cuDNN attention on a GPU (ci/gpu-check's train step, test_training_cuda).
constexpr Preset kPresets[] = {
    {"tiny", 256, 64, 2, 4, 64},
    {"small", 256, 128, 4, 4, 128},
    {"gpt2-124m", 50257, 1024, 12, 12, 768},
    {"gpt2-350m", 50257, 1024, 24, 16, 1024},
    {"gpt2-774m", 50257, 1024, 36, 20, 1280},
    {"gpt2-1.5b", 50257, 1024, 48, 25, 1600},
    {"tiny-hd64", 256, 128, 2, 2, 128},
    {"tiny-hd128", 256, 128, 2, 2, 256},
};
}  // namespace

std::vector<std::string> gpt_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

// A preset by its name or an alias, in any case ("GPT2-Medium" is gpt2-350m). The config keeps
// the preset's own name.
GPTConfig gpt_preset(const std::string& name) {
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
    if (wanted == p.name) return GPTConfig{p.name, p.vocab, p.seq, p.layers, p.heads, p.dim};
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  std::string aliases;
  for (const auto& [alias, preset] : kAliases) aliases += std::string(aliases.empty() ? "" : ", ") + std::string(alias) + "=" + std::string(preset);
  throw GPTConfigError("unknown model '" + name + "' (presets: " + known + ", in any case; aliases " + aliases +
                       "; or give --layers --heads --dim --seq --vocab)");
}

}  // namespace trainmem
