// The shape of a GPT-2-style model, and the named presets.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainmem {

struct GPTConfig {
  std::string name = "custom";
  std::size_t vocab = 256;   // V
  std::size_t seq = 64;      // T, the context length
  std::size_t layers = 2;    // L
  std::size_t heads = 4;     // H (NH)
  std::size_t dim = 64;      // C

  // Parameters: wte V*C + wpe T*C + L * (12 C^2 + 13 C) + 2 C (final layernorm); the LM head
  // is tied to wte. Per layer: ln1 2C, qkv 3C^2+3C, attn proj C^2+C, ln2 2C, fc 4C^2+4C,
  // fc proj 4C^2+C.
  // Checked (common/util/checked_math.h): SizeLimitError if the count passes 2^62.
  std::size_t num_parameters() const;

  // Throws std::invalid_argument saying what to change (e.g. dim not divisible by heads).
  void validate() const;
  nlohmann::json to_json() const;
};

struct GPTConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Refuses (SizeLimitError, an input error) a model and micro-batch whose sizes would pass
// 2^62 bytes: the model states (16 bytes per parameter with Adam), the largest activations
// (B*T*4C, the logits B*T*V, the attention scores B*H*T*T, at 4 bytes an element). Every other
// size a run computes is a smaller product of the same factors, so none of them can wrap around.
void check_run_sizes(const GPTConfig& config, std::size_t batch);

// tiny (tests), small (CPU demo), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b.
GPTConfig gpt_preset(const std::string& name);  // throws GPTConfigError naming the presets
std::vector<std::string> gpt_preset_names();

}  // namespace trainmem
