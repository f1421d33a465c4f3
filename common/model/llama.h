// Llama's blocks (the model's interface and what both families share: model.h).
//
//   x0      = wte[tokens]                                         (no position table: RoPE)
//   layer l: q, k, v = split(qkv(rmsnorm(x_l)))                   (H q heads, Hkv k and v heads)
//            a = x_l + attn_proj(attention(rope(q), rope(k), v))  (grouped-query attention)
//            n = rmsnorm(a)
//            x_{l+1} = a + down(silu(gate(n)) * up(n))            (SwiGLU, hidden size F)
//   logits  = rmsnorm(x_L) @ head^T                               (untied head, Vp columns)
//
// No biases anywhere. RoPE rotates q and k in place inside the saved qkv tensor, so what attention
// reads (and its backward) is the rotated qkv; its backward rotates dq and dk back, in place.
//
// Saved per layer (kernels' rows are B*T; see common/model/README.md for the bytes):
//   attn_norm [B,T,C], attn_norm_rstd [B,T] fp32, qkv [B,T,(H+2Hkv)D] (q, k rotated),
//   att [B,H,T,T] (naive) or lse [B,H,T] fp32 (flash, cudnn), atty [B,T,C], residual2 [B,T,C],
//   mlp_norm [B,T,C], mlp_norm_rstd [B,T] fp32, gate [B,T,F], up [B,T,F], swiglu [B,T,F].
// SwiGLU's backward writes dgate and dup over gate and up (they are read for the last time), so
// the MLP's backward needs no [B,T,F] gradient buffer beside dswiglu's.
#pragma once
#include <cstdint>
#include <vector>

#include "common/model/model.h"

namespace trainmem {

// What one Llama layer's forward saves for its backward, beside attention's (model.h).
struct LlamaLayerActivations : AttentionActivations {
  Tensor attn_norm, attn_norm_rstd;  // RMSNorm output [B,T,C]; rstd [B,T] fp32
  Tensor residual2;                  // x_l + attention branch [B,T,C]
  Tensor mlp_norm, mlp_norm_rstd;    // [B,T,C]; [B,T] fp32
  Tensor gate, up;                   // the two projections of mlp_norm [B,T,F]: SwiGLU's inputs
  Tensor swiglu;                     // silu(gate) * up [B,T,F]: the down projection's input
  bool present() const { return qkv.data() != nullptr; }
};

class Llama : public Model {
 public:
  Llama(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

  void layer_backward(std::size_t layer) override;
  void release_layer_activations(std::size_t layer) override { acts_[layer] = LlamaLayerActivations{}; }
  // Drops the probabilities (naive attention) and the SwiGLU output BTF.
  void release_selective(std::size_t layer) override;
  void recompute_selective(std::size_t layer) override;
  const LlamaLayerActivations& layer_activations(std::size_t layer) const { return acts_[layer]; }

 private:
  using W = LlamaLayerParameter;  // a layer's parameters by name: p(l, W::qkv_weight)
  void forward_layer(std::size_t layer, bool produce_output) override;
  void final_norm_forward() override;
  void final_norm_backward(const Tensor& dnorm) override;
  std::size_t head_weight_index() const override { return table_.head_weight(); }
  // RoPE on the q and k heads of a [B,T,(H+2Hkv)D] tensor, in place: forward on qkv, backward
  // (the inverse rotation) on dqkv.
  void rotate_qk(Tensor& qkv, bool inverse);
  Tensor& p(std::size_t layer, LlamaLayerParameter which) { return param(ParameterTable::index(layer, which)); }
  Tensor& g(std::size_t layer, LlamaLayerParameter which) {
    return grad_for_write(ParameterTable::index(layer, which));
  }

  std::vector<LlamaLayerActivations> acts_;
};

}  // namespace trainmem
