// The shape of a GPT-2-style model, and the named presets.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace trainmem {

// The rows of the token embedding and of the tied LM head: V rounded up to a multiple of 64, Vp
// (as llm.c pads GPT-2's 50257 to 50304). The head's matmul then has a leading dimension that
// divides into the tile sizes of the GPU's fast GEMM kernels (an odd V = 50257 sends cuBLASLt to
// slow ones, for about 30% of GPT-2's FLOPs). The Vp - V padding rows of wte are zero from the
// start: no token reads them (tokens are checked against V), the cross-entropy gives their
// logits no probability and a gradient of exactly 0, so the optimizer keeps them at zero (AdamW
// on a zero weight with a zero gradient). They count in the parameters and in memory.
constexpr std::size_t kVocabAlignment = 64;
constexpr std::size_t padded_vocab(std::size_t vocab) {
  return (vocab + kVocabAlignment - 1) / kVocabAlignment * kVocabAlignment;
}

struct GPTConfig {
  std::string name = "custom";
  std::size_t vocab = 256;   // V, the real vocabulary (tokens are below it); padded_vocab(V) rows in wte
  std::size_t seq = 64;      // T, the context length
  std::size_t layers = 2;    // L
  std::size_t heads = 4;     // H (NH)
  std::size_t dim = 64;      // C

  // Parameters: wte Vp*C (Vp = padded_vocab(V)) + wpe T*C + L * (12 C^2 + 13 C) + 2 C (final layernorm); the LM head
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
// (B*T*4C, the logits B*T*Vp, the attention scores B*H*T*T, at 4 bytes an element). Every other
// size a run computes is a smaller product of the same factors, so none of them can wrap around.
void check_run_sizes(const GPTConfig& config, std::size_t batch);

// tiny (tests), small (CPU demo), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b.
GPTConfig gpt_preset(const std::string& name);  // throws GPTConfigError naming the presets
std::vector<std::string> gpt_preset_names();

}  // namespace trainmem
