// Every parameter of the model, listed once from its configuration (as llm.c's
// fill_in_parameter_sizes): name, shape, layer and initialization. The model allocates from it;
// the optimizer, the sharding units (ZeRO, FSDP), the estimator's formulas and the reports read
// it. Nothing else spells out a shape or an index.
//
// The order (the model's parameters(), the flat order of the sharding units), per family:
// gpt:
//   0  wte               [Vp, C]    token embedding, tied with the LM head; Vp = padded_vocab(V),
//                                   rows V..Vp-1 padding (model_config.h), zero-initialized
//   1  wpe               [T, C]     position embedding
//   per layer l, at index 2 + 12 l + k, k in LayerParameter order:
//      ln1.weight [C], ln1.bias [C], attn.qkv.weight [3C, C], attn.qkv.bias [3C],
//      attn.proj.weight [C, C], attn.proj.bias [C], ln2.weight [C], ln2.bias [C],
//      mlp.fc.weight [4C, C], mlp.fc.bias [4C], mlp.proj.weight [C, 4C], mlp.proj.bias [C]
//   2 + 12 L, 2 + 12 L + 1   lnf.weight [C], lnf.bias [C]
//   A layer holds 12 C^2 + 13 C elements; the model Vp C + T C + L (12 C^2 + 13 C) + 2 C.
// llama (rotary embeddings have no parameters; D = C / H unless the config sets it):
//   0  wte               [Vp, C]    token embedding (padding rows as GPT's)
//   per layer l, at index 1 + P l + k (P = 7, or 8 with q, k, v biases), in LlamaLayerParameter order:
//      attn_norm.weight [C], attn.qkv.weight [(H + 2 Hkv) D, C] (q, then k, then v rows),
//      attn.qkv.bias [(H + 2 Hkv) D] (only with qkv_bias, Qwen2), attn.proj.weight [C, H D],
//      mlp_norm.weight [C], mlp.gate.weight [F, C], mlp.up.weight [F, C], mlp.down.weight [C, F]
//   where the MLP is a mixture of experts (model_config.h), mlp_norm.weight is followed instead by
//      mlp.router.weight [E, C], then per expert e: mlp.experts.<e>.gate.weight [Fe, C],
//      mlp.experts.<e>.up.weight [Fe, C], mlp.experts.<e>.down.weight [C, Fe]; and with a shared
//      expert (Qwen2-MoE) mlp.shared_expert.gate.weight [Fs, C], .up.weight [Fs, C],
//      .down.weight [C, Fs], mlp.shared_expert_gate.weight [1, C]   (P = 6 + 3E (+ 1) (+ 4))
//   1 + P L      norm.weight [C]     the final RMSNorm
//   1 + P L + 1  head.weight [Vp, C] the LM head (padding rows zero); none when it is tied to wte
//   A layer holds 2C + (H + 2 Hkv) D C (+ (H + 2 Hkv) D) + H D C + 3 F C elements (a mixture:
//   E C + 3 E Fe C (+ 3 Fs C + C) instead of 3 F C); the model Vp C (+ Vp C, untied) + L (...) + C.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/model/model_config.h"

namespace trainmem {

// A GPT layer's parameters, in their order within the layer.
enum class LayerParameter : std::size_t {
  ln1_weight, ln1_bias, qkv_weight, qkv_bias, attn_proj_weight, attn_proj_bias,
  ln2_weight, ln2_bias, fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias,
};
constexpr std::size_t kParametersPerLayer = 12;
// A Llama layer's parameters, in their order within the layer, each where the config has it:
// qkv_bias with ModelConfig::qkv_bias; gate, up, down in a dense MLP; the router (then the experts,
// ExpertParameter) in a mixture of experts, the shared_* with its shared expert.
enum class LlamaLayerParameter : std::size_t {
  attn_norm_weight, qkv_weight, qkv_bias, attn_proj_weight, mlp_norm_weight, gate_weight, up_weight, down_weight,
  router_weight, shared_gate_weight, shared_up_weight, shared_down_weight, shared_expert_gate_weight,
};
constexpr std::size_t kLlamaLayerParameterKinds = 13;
// One expert's parameters, in their order within the expert.
enum class ExpertParameter : std::size_t { gate_weight, up_weight, down_weight };

// GPT-2's initialization: N(0, 0.02); residual projections N(0, 0.02 / sqrt(2L)); ones; zeros.
enum class ParameterInit { normal, residual, ones, zeros };

struct ParameterInfo {
  std::string name;                  // "wte", "h3.attn.qkv.weight", "lnf.bias", "h0.mlp.gate.weight"
  std::vector<std::int64_t> shape;
  long layer = -1;                   // the transformer layer; -1 for the embeddings and lnf
  ParameterInit init = ParameterInit::zeros;
  std::int64_t padding_rows = 0;     // trailing rows initialized to zero whatever `init` (wte: Vp - V)
  std::size_t numel() const;
};

class ParameterTable {
 public:
  explicit ParameterTable(const ModelConfig& config);

  const std::vector<ParameterInfo>& all() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  const ParameterInfo& operator[](std::size_t i) const { return entries_[i]; }

  // Indices into all(). GPT's layer parameters: index(layer, LayerParameter); Llama's:
  // index(layer, LlamaLayerParameter) (a logic_error for qkv_bias where the model has none).
  static constexpr std::size_t kWte = 0, kWpe = 1;
  static std::size_t index(std::size_t layer, LayerParameter which) {
    return 2 + layer * kParametersPerLayer + static_cast<std::size_t>(which);
  }
  std::size_t index(std::size_t layer, LlamaLayerParameter which) const;
  bool has(LlamaLayerParameter which) const { return slot_[static_cast<std::size_t>(which)] != kAbsent; }
  // Expert e's parameter of a mixture-of-experts layer.
  std::size_t index(std::size_t layer, std::size_t expert, ExpertParameter which) const;
  // GPT's final layernorm.
  std::size_t lnf_weight() const { return 2 + layers_ * kParametersPerLayer; }
  std::size_t lnf_bias() const { return lnf_weight() + 1; }
  // Llama's final RMSNorm, and the LM head: its own weight, or wte where tied (GPT's: wte).
  std::size_t norm_weight() const { return 1 + layers_ * per_layer(); }
  std::size_t head_weight() const { return tied_head_ ? kWte : norm_weight() + 1; }
  // The parameters outside the layers, in order (the root unit of the sharding strategies):
  // gpt wte, wpe, lnf.weight, lnf.bias; llama wte, norm.weight, head.weight (untied).
  std::vector<std::size_t> root_indices() const;
  std::vector<std::size_t> layer_indices(std::size_t layer) const;

  // Element counts: the root's, one layer's, the whole model's.
  std::size_t root_numel() const;
  std::size_t layer_numel() const;
  std::size_t total_numel() const;
  // Of those, the elements of the vocabulary's padding rows (padding_rows: Vp - V of wte, and of a
  // Llama's head): what trainmem holds beyond the parameters Hugging Face counts.
  std::size_t padding_numel() const;

 private:
  std::size_t per_layer() const { return per_layer_; }  // a layer's parameter tensors
  static constexpr std::size_t kAbsent = ~std::size_t{0};

  Arch arch_;
  std::size_t layers_;
  bool tied_head_;
  // A Llama layer's layout: each parameter's place in the layer (kAbsent where it has none), the
  // first expert's, the number of experts.
  std::size_t slot_[kLlamaLayerParameterKinds];
  std::size_t first_expert_slot_ = kAbsent, experts_ = 0, per_layer_ = kParametersPerLayer;
  std::vector<ParameterInfo> entries_;
};

}  // namespace trainmem
