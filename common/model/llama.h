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
//
// A mixture of experts (model_config.h) replaces the MLP: llama_moe.cpp, where its formulas and
// saved tensors are; a shared expert (Qwen2-MoE) is the dense MLP above, of width Fs, in gate, up
// and swiglu.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model/layer_stack.h"

namespace trainmem {

// What one Llama layer's forward saves for its backward, beside attention's (model.h).
struct LlamaLayerActivations : AttentionActivations {
  Tensor attn_norm, attn_norm_rstd;  // RMSNorm output [B,T,C]; rstd [B,T] fp32
  Tensor residual2;                  // x_l + attention branch [B,T,C]
  Tensor mlp_norm, mlp_norm_rstd;    // [B,T,C]; [B,T] fp32
  Tensor gate, up;                   // the two projections of mlp_norm [B,T,F]: SwiGLU's inputs
  Tensor swiglu;                     // silu(gate) * up [B,T,F]: the down projection's input
  // A mixture of experts (llama_moe.cpp): the router's choices and the experts' grouped rows
  // (B*T*k of them), and the shared expert's output and gate (Qwen2-MoE; its MLP is gate, up, swiglu).
  Tensor router_probs;                       // softmax of the router's logits [B,T,E] fp32
  Tensor router_experts, router_weights;     // each token's k experts [B,T,k] int32, their weights [B,T,k] fp32
  Tensor expert_rows;                        // each (token, choice)'s row in the grouped layout [B,T,k] int32
  std::vector<std::int32_t> expert_counts;   // each expert's rows (on the host): the grouped layout's segments
  Tensor expert_gate, expert_up, expert_swiglu;  // [B*T*k, Fe], grouped by expert
  Tensor expert_out;                         // the experts' outputs [B*T*k, C], before their weights
  Tensor shared_out;                         // the shared expert's output [B,T,C], before its gate
  Tensor shared_gate_logit;                  // x . w_sg [B,T]: the shared expert's gate is its sigmoid
  // What selective recompute drops beside att: the SwiGLU outputs (the dense MLP's, or the
  // experts' and the shared expert's).
  void release_mlp_nonlinearity() {
    swiglu.reset();
    expert_swiglu.reset();
  }
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
  // The SwiGLU MLP of width F on a.mlp_norm, with the weights `gate`, `up`, `down` (the dense MLP's,
  // or the shared expert's): saves a.gate, a.up, a.swiglu (named `name` + "gate.out", ...). The
  // backward frees them and returns d a.mlp_norm (workspace, `dnorm_name`), from dout (the down
  // projection's output gradient; freed once read when consume_dout).
  void swiglu_mlp_forward(std::size_t layer, LlamaLayerActivations& a, std::size_t F, W gate, W up, const std::string& name);
  Tensor swiglu_mlp_backward(std::size_t layer, LlamaLayerActivations& a, Tensor& dout, bool consume_dout, std::size_t F,
                             W gate, W up, W down, const std::string& name, const std::string& dnorm_name);
  // The mixture of experts in place of the MLP (llama_moe.cpp): forward from a.mlp_norm to x_{l+1}
  // (when produce_output), backward from dresidual_ to d a.mlp_norm (returned, workspace).
  // One mixture layer's sizes: N = B*T tokens of width C, E experts, k a token, their widths Fe
  // and the shared expert's Fs, rows = N*k in the grouped layout.
  struct MoeSizes {
    std::size_t N, C, E, k, Fe, Fs, rows;
  };
  MoeSizes moe_sizes() const;
  void moe_forward(std::size_t layer, LlamaLayerActivations& a, bool produce_output);
  Tensor moe_backward(std::size_t layer, LlamaLayerActivations& a);
  // Each expert's rows in the grouped layout, copied to the host from the plan's counts; on the meta
  // device (nothing computed) a balanced routing, for the kernels' costs: the memory is the same
  // for every routing.
  std::vector<std::int32_t> expert_counts(const Tensor& counts) const;
  // The load-balancing loss (Switch Transformer's, as transformers' load_balancing_loss_func):
  // coef * E * sum_e f_e P_e over all layers' tokens; added to the loss, its gradient made ready
  // for the routers' backward (model.h).
  double auxiliary_loss(std::optional<float> dloss) override;
  bool load_balancing() const { return config_.moe() && config_.router_aux_loss_coef > 0; }
  // This micro-step's routing per layer, for the load-balancing loss: assignments per expert and the
  // sum of each expert's probability over the tokens (recomputing a layer writes the same again).
  struct RouterStatistics {
    std::vector<std::int64_t> counts;
    std::vector<double> probability_sums;
  };
  std::vector<RouterStatistics> router_statistics_;
  std::vector<float> aux_loss_dprobs_;  // d loss / d p[token, e], the same for every token and layer (E)
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
