// GPT-2's blocks (the model's interface and what both families share: model.h).
//
//   x0      = wte[tokens] + wpe                                   (embedding)
//   layer l: a = x_l + attn_proj(attention(qkv(ln1(x_l))))        (residual 2)
//            x_{l+1} = a + fc_proj(gelu(fc(ln2(a))))              (residual 3)
//   logits  = lnf(x_L) @ wte^T                                    (tied LM head, Vp columns)
//
// LayerNorms with biases, learned position embeddings, a GELU MLP of 4C, multi-head attention
// (qkv [B,T,3C]), every linear layer with a bias.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "common/model/model.h"

namespace trainmem {

// What one GPT layer's forward saves for its backward (B*T rows of C channels unless noted),
// beside attention's qkv [B,T,3C], att or lse, and atty (model.h).
struct LayerActivations : AttentionActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // ln1 output [B,T,C]; mean, rstd [B,T]
  Tensor residual2;                // x_l + attention branch [B,T,C]
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C]; [B,T]; [B,T]
  Tensor fch;                      // fc output, GELU input [B,T,4C]
  Tensor fch_gelu;                 // GELU output [B,T,4C]
  bool present() const { return qkv.data() != nullptr; }
};

class GPT : public Model {
 public:
  GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

  void layer_backward(std::size_t layer) override;
  void release_layer_activations(std::size_t layer) override { acts_[layer] = LayerActivations{}; }
  // Drops the probabilities (naive attention) and the GELU output 4BTC.
  void release_selective(std::size_t layer) override;
  void recompute_selective(std::size_t layer) override;
  const LayerActivations& layer_activations(std::size_t layer) const { return acts_[layer]; }

 private:
  using W = LayerParameter;  // a layer's parameters by name: p(l, W::qkv_weight)
  void forward_layer(std::size_t layer, bool produce_output) override;
  void final_norm_forward() override;
  void final_norm_backward(const Tensor& dnorm) override;
  std::size_t head_weight_index() const override { return ParameterTable::kWte; }  // tied
  std::optional<std::size_t> position_table_index() const override { return ParameterTable::kWpe; }
  Tensor& p(std::size_t layer, LayerParameter which) { return param(ParameterTable::index(layer, which)); }
  Tensor& g(std::size_t layer, LayerParameter which) { return grad_for_write(ParameterTable::index(layer, which)); }

  std::vector<LayerActivations> acts_;
};

}  // namespace trainmem
