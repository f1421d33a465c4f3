// The shape of a model, of either family, and the named presets:
//   gpt    GPT-2: LayerNorm (with biases), learned position embeddings, a GELU MLP of 4C, multi-head
//          attention, the LM head tied to the token embedding.
//   llama  Llama-style: RMSNorm (eps), rotary position embeddings (theta; no parameters), a SwiGLU
//          MLP of its own hidden size F, grouped-query attention (kv_heads K/V heads shared by
//          heads / kv_heads query heads each), no biases and an untied head unless the config says
//          otherwise (its variants below: a tied head, biases on q, k, v, a head dimension that is
//          not C / H; the shapes of Llama 3.2, Qwen2 and Mistral NeMo).
// One description and one parameter table (parameter_table.h) for both; the presets give the
// published shapes.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/cli/enum_table.h"
#include "kernels/rope_frequencies.h"

namespace trainmem {

// The rows of the token embedding and of the tied LM head: V rounded up to a multiple of 64, Vp
// (as llm.c pads GPT-2's 50257 to 50304). The head's matmul then has a leading dimension that
// divides into the tile sizes of the GPU's fast GEMM kernels (an odd V = 50257 sends cuBLASLt to
// slow ones, for about 30% of GPT-2's FLOPs). The Vp - V padding rows of wte are zero from the
// start: no token reads them (tokens are checked against V), the cross-entropy gives their
// logits no probability and a gradient of exactly 0, so the optimizer keeps them at zero (AdamW
// on a zero weight with a zero gradient). They count in the parameters and in memory.
constexpr std::size_t kVocabAlignment = 64;
constexpr std::size_t kMaxVocab = std::size_t{1} << 24;  // a model's vocabulary (the --vocab flag: 65536, uint16 token files)
constexpr std::size_t padded_vocab(std::size_t vocab) {
  return (vocab + kVocabAlignment - 1) / kVocabAlignment * kVocabAlignment;
}

enum class Arch { gpt, llama };
inline constexpr auto kArchs = cli::enum_table<Arch>("--arch", {{Arch::gpt, "gpt"}, {Arch::llama, "llama"}});
inline std::string to_string(Arch a) { return std::string(kArchs.name(a)); }

// A mixture of experts' shape (the ModelConfig fields of the same names), as a preset or a test
// gives it in one piece.
struct MixtureShape {
  std::size_t experts = 0, experts_per_token = 0, expert_ffn_dim = 0, shared_expert_ffn_dim = 0;
  bool normalize_top_k = true;
};

struct ModelConfig {
  std::string name = "custom";
  Arch arch = Arch::gpt;
  std::size_t vocab = 256;   // V, the real vocabulary (tokens are below it); padded_vocab(V) rows in wte
  std::size_t seq = 64;      // T, the context length
  std::size_t layers = 2;    // L
  std::size_t heads = 4;     // H (NH), the query heads; head dimension D = C / H
  std::size_t dim = 64;      // C
  // The Llama family's own; a GPT ignores them (its K/V heads are its heads, its MLP is 4C wide:
  // read num_kv_heads() and mlp_dim(), which say so for both families).
  std::size_t kv_heads = 4;  // Hkv, the K/V heads (grouped-query attention; = H: multi-head attention)
  std::size_t ffn_dim = 176; // F, SwiGLU's hidden size
  kernels::RopeFrequencies rope;  // the rotary embedding's base theta (rope.theta, 10000) and its Llama 3.1 rescaling
  double norm_eps = 1e-5;    // RMSNorm's epsilon
  // The Llama family's variants, as Hugging Face configs name them (a GPT's head is always tied and
  // its linears always have biases: it ignores these).
  bool tied_head = false;        // tie_word_embeddings: the LM head is wte (Llama 3.2 1B/3B, Qwen2.5 0.5B-3B)
  bool qkv_bias = false;         // biases on the q, k, v projections (Qwen2; o and the MLP have none)
  std::size_t head_dim_set = 0;  // head_dim: D when it is not C / H (Mistral NeMo: C 5120, H 32, D 128); 0: C / H
  // Mixture of experts (the Llama family: Mixtral, Qwen2-MoE; kernels/moe.h): every layer's MLP is
  // a router to E experts, each a SwiGLU MLP of width Fe, of which every token reaches its k most
  // probable; 0 experts is the dense MLP of width F (ffn_dim, which a mixture does not read).
  std::size_t experts = 0;                // E: num_local_experts (Mixtral), num_experts (Qwen2-MoE)
  std::size_t experts_per_token = 0;      // k: num_experts_per_tok
  std::size_t expert_ffn_dim = 0;         // Fe: intermediate_size (Mixtral), moe_intermediate_size (Qwen2-MoE)
  std::size_t shared_expert_ffn_dim = 0;  // Fs: an expert every token reaches, scaled by sigmoid(x . w) (Qwen2-MoE); 0: none
  bool normalize_top_k = true;            // the k weights divided by their sum (Mixtral always; Qwen2-MoE's norm_topk_prob)
  double router_aux_loss_coef = 0;        // the load-balancing loss's weight in the loss; 0: not added
  // Where the shape came from when it is not a preset as it stands: what the user gave and what
  // was filled in, from where ("as given: --layers 24 --heads 16 --dim 1024; filled in: T=1024 (GPT-2's; no --seq), ...").
  // Empty for a preset. Printed in every command's first line (label()).
  std::string origin;

  std::size_t head_dim() const { return llama() && head_dim_set ? head_dim_set : dim / heads; }  // D
  std::size_t num_kv_heads() const { return llama() ? kv_heads : heads; }  // Hkv
  std::size_t mlp_dim() const { return llama() ? ffn_dim : 4 * dim; }      // F
  std::size_t attention_dim() const { return heads * head_dim(); }          // H*D: attention's output row (= C unless D is set)
  bool head_is_tied() const { return !llama() || tied_head; }               // the LM head is wte
  bool moe() const { return llama() && experts > 0; }                       // a mixture of experts in every layer
  void set_mixture(const MixtureShape& m) {
    experts = m.experts;
    experts_per_token = m.experts_per_token;
    expert_ffn_dim = m.expert_ffn_dim;
    shared_expert_ffn_dim = m.shared_expert_ffn_dim;
    normalize_top_k = m.normalize_top_k;
  }

  // Parameters (parameter_table.h lists them):
  //   gpt    wte Vp*C (Vp = padded_vocab(V)) + wpe T*C + L * (12 C^2 + 13 C) + 2 C (final
  //          layernorm); the LM head is tied to wte. Per layer: ln1 2C, qkv 3C^2+3C, attn proj
  //          C^2+C, ln2 2C, fc 4C^2+4C, fc proj 4C^2+C.
  //   llama  wte Vp*C (+ head Vp*C, untied) + L * (2C + (H + 2 Hkv) D C (+ (H + 2 Hkv) D, q, k, v
  //          biases) + H D C + 3 F C) + C (final norm). A mixture of experts has, instead of 3 F C:
  //          the router E C + E * 3 Fe C (+ 3 Fs C + C, the shared expert and its gate).
  // Checked (common/util/checked_math.h): SizeLimitError if the count passes 2^62.
  std::size_t num_parameters() const;

  // The shape in one line, as every command prints it: "L=2 H=4 C=64 T=64 V=256, padded to Vp=256";
  // a Llama's adds its family's own sizes, "L=2 H=4 Hkv=2 C=64 F=176 T=64 V=256, padded to Vp=256".
  std::string shape_summary() const;
  // The model as every command's first line names it: "gpt2-124m (gpt)", or a custom shape with
  // its origin, "custom (gpt, from gpt2-124m with --layers 2)", "custom (gpt, as given: ...)", or a
  // Hugging Face config's, "TinyLlama-1.1B (llama, from TinyLlama-1.1B/config.json (llama, LlamaForCausalLM))".
  std::string label() const;

  // Throws ModelConfigError saying what to change (e.g. dim not divisible by heads).
  void validate() const;
  static constexpr std::size_t kMaxExperts = 4096;
  nlohmann::json to_json() const;

 private:
  bool llama() const { return arch == Arch::llama; }
  void validate_experts() const;
};

struct ModelConfigError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Refuses (SizeLimitError, an input error) a model and micro-batch whose sizes would pass
// 2^62 bytes: the model states (16 bytes per parameter with Adam), the largest activations
// (B*T*4C, the logits B*T*Vp, the attention scores B*H*T*T, at 4 bytes an element). Every other
// size a run computes is a smaller product of the same factors, so none of them can wrap around.
void check_run_sizes(const ModelConfig& config, std::size_t batch);

// The usual values of a family for the fields a shape of one's own leaves out (T, V and the
// Llama constants), and whose they are: GPT-2's 1024 and 50257; Llama 2's 4096, 32000, theta
// 10000 and eps 1e-5.
struct FamilyDefaults {
  std::size_t seq, vocab;
  double rope_theta, norm_eps;
  const char* whose;  // "GPT-2's"
};
FamilyDefaults family_defaults(Arch arch);

// Llama's MLP width for a width C when none is given: 2/3 of 4C, rounded up to a multiple of 256
// (Meta's reference code, multiple_of = 256: C = 4096 gives Llama 2 7B's 11008).
std::size_t llama_ffn_dim(std::size_t dim);

// GPT: tiny (tests), small (CPU demo), gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, tiny-hd64,
// tiny-hd128. Llama: llama-tiny, llama-small, llama-tiny-hd64 (tests and CPU runs), llama2-7b, llama3-8b,
// llama3-70b, mistral-7b (the published shapes).
ModelConfig model_preset(const std::string& name);  // throws ModelConfigError naming the presets
std::vector<std::string> model_preset_names();

}  // namespace trainmem
