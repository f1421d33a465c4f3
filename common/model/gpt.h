// GPT-2's blocks (the model's interface and what both families share: model.h; the layers'
// bookkeeping: layer_stack.h).
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
#include <string>

#include "common/model/layer_stack.h"

namespace trainmem {

// What one GPT layer's forward saves for its backward (B*T rows of C channels unless noted),
// beside attention's qkv [B,T,3C], att or lse, and atty (model.h).
struct LayerActivations : AttentionActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // ln1 output [B,T,C]; mean, rstd [B,T]
  Tensor residual2;                // x_l + attention branch [B,T,C]
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C]; [B,T]; [B,T]
  Tensor fch;                      // fc output, GELU input [B,T,4C]
  Tensor fch_gelu;                 // GELU output [B,T,4C]
  void release_mlp_nonlinearity() { fch_gelu.reset(); }  // what selective recompute drops beside att
};

// Selective recompute drops the probabilities (naive attention) and the GELU output 4BTC.
class GPT : public LayerStack<LayerActivations, LayerParameter> {
 public:
  GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

 private:
  // In the model's order: the embedding's position table, the block, the final norm and the head.
  std::optional<std::size_t> position_table_index() const override { return ParameterTable::kWpe; }
  void block_forward(std::size_t layer, LayerActivations& a, bool produce_output) override;
  void block_backward(std::size_t layer, LayerActivations& a) override;
  void recompute_mlp_nonlinearity(std::size_t layer, LayerActivations& a) override;
  // LayerNorm of x into out [B,T,C] with its mean and rstd [B,T] (fp32), the three saved for the
  // backward as `name`, name.mean, name.rstd.
  void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                         const Tensor& bias, const std::string& name);
  void final_norm_forward() override;
  void final_norm_backward(const Tensor& dnorm) override;
  std::size_t head_weight_index() const override { return ParameterTable::kWte; }  // tied
};

}  // namespace trainmem
