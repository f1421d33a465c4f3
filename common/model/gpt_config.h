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
  std::size_t num_parameters() const;

  // Throws std::invalid_argument saying what to change (e.g. dim not divisible by heads).
  void validate() const;
  nlohmann::json to_json() const;
};

struct GPTConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// tiny (tests), small (CPU demo), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b.
GPTConfig gpt_preset(const std::string& name);  // throws GPTConfigError naming the presets
std::vector<std::string> gpt_preset_names();

}  // namespace trainmem
