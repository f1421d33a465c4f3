// Llama's blocks (the model's interface and what both families share: model.h; the layers'
// bookkeeping: layer_stack.h).
//
//   x0      = wte[tokens]                                         (no position table: RoPE)
//   layer l: q, k, v = split(qkv(rmsnorm(x_l)))                   (H q heads, Hkv k and v heads)
//            a = x_l + attn_proj(attention(rope(q), rope(k), v))  (grouped-query attention)
//            n = rmsnorm(a)
//            x_{l+1} = a + down(silu(gate(n)) * up(n))            (SwiGLU, hidden size F)
//   logits  = rmsnorm(x_L) @ head^T                               (Vp columns; head = wte where tied)
//
// No biases, except on q, k, v where the config has them (qkv += bias, before RoPE: Qwen2). The
// heads are H of D = C / H, or of the config's D (Mistral NeMo): attention's output is [B,T,H*D]
// and attn_proj maps it back to C. RoPE rotates q and k in place inside the saved qkv tensor, so what attention
// reads (and its backward) is the rotated qkv; its backward rotates dq and dk back, in place.
//
// Saved per layer (kernels' rows are B*T; see common/model/README.md for the bytes):
//   attn_norm [B,T,C], attn_norm_rstd [B,T] fp32, qkv [B,T,(H+2Hkv)D] (q, k rotated),
//   att [B,H,T,T] (naive) or lse [B,H,T] fp32 (flash, cudnn), atty [B,T,H*D], residual2 [B,T,C],
//   mlp_norm [B,T,C], mlp_norm_rstd [B,T] fp32, gate [B,T,F], up [B,T,F], swiglu [B,T,F].
// SwiGLU's backward writes dgate and dup over gate and up (they are read for the last time), so
// the MLP's backward needs no [B,T,F] gradient buffer beside dswiglu's.
#pragma once
#include <cstdint>
#include <string>

#include "common/model/layer_stack.h"

namespace trainmem {

// What one Llama layer's forward saves for its backward, beside attention's (model.h).
struct LlamaLayerActivations : AttentionActivations {
  Tensor attn_norm, attn_norm_rstd;  // RMSNorm output [B,T,C]; rstd [B,T] fp32
  Tensor residual2;                  // x_l + attention branch [B,T,C]
  Tensor mlp_norm, mlp_norm_rstd;    // [B,T,C]; [B,T] fp32
  Tensor gate, up;                   // the two projections of mlp_norm [B,T,F]: SwiGLU's inputs
  Tensor swiglu;                     // silu(gate) * up [B,T,F]: the down projection's input
  Tensor& mlp_nonlinearity() { return swiglu; }  // what selective recompute drops beside att
};

// Selective recompute drops the probabilities (naive attention) and the SwiGLU output BTF.
class Llama : public LayerStack<LlamaLayerActivations, LlamaLayerParameter> {
 public:
  Llama(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

 private:
  // In the model's order: the block (RoPE inside it), the final norm and the head.
  void block_forward(std::size_t layer, LlamaLayerActivations& a, bool produce_output) override;
  void block_backward(std::size_t layer, LlamaLayerActivations& a) override;
  void recompute_mlp_nonlinearity(std::size_t layer, LlamaLayerActivations& a) override;
  // RMSNorm of x into out [B,T,C] with its rstd [B,T] (fp32), both saved for the backward as
  // `name`, name.rstd.
  void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, const std::string& name);
  // RoPE on the q and k heads of a [B,T,(H+2Hkv)D] tensor, in place: forward on qkv, backward
  // (the inverse rotation) on dqkv.
  void rotate_qk(Tensor& qkv, bool inverse);
  void final_norm_forward() override;
  void final_norm_backward(const Tensor& dnorm) override;
  std::size_t head_weight_index() const override { return table_.head_weight(); }
};

}  // namespace trainmem
