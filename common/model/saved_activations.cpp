#include "common/model/saved_activations.h"

#include "common/allocator/allocator_config.h"

namespace trainmem {

namespace {
std::size_t blocks(const std::vector<SavedTensor>& tensors, bool selective_only) {
  std::size_t sum = 0;
  for (const SavedTensor& t : tensors)
    if (!selective_only || t.selective) sum += round_size(t.bytes);
  return sum;
}
}  // namespace

std::size_t SavedActivations::layer_blocks() const { return blocks(layer, false); }
std::size_t SavedActivations::selective_blocks() const { return blocks(layer, true); }
std::size_t SavedActivations::head_blocks() const { return blocks(head, false); }
std::size_t SavedActivations::residual_block() const { return round_size(residual); }

SavedActivations saved_activations(const ModelConfig& c, std::size_t B, std::size_t T, DType dtype,
                                   AttentionKind attention) {
  const std::size_t e = dtype_size(dtype), f32 = 4, BT = B * T, C = c.dim, H = c.heads, F = c.mlp_dim(),
                    Vp = padded_vocab(c.vocab), QKV = (H + 2 * c.num_kv_heads()) * c.head_dim();
  const std::size_t btc = BT * C * e, stat = BT * f32, bthd = BT * c.attention_dim() * e;  // H*D = C unless D is set
  // attention (model.cpp): naive saves the probabilities, made before its output; flash and
  // cudnn the output, then the log-sum-exp per query row.
  std::vector<SavedTensor> attn;
  if (attention == AttentionKind::naive)
    attn = {{"attn.probs", B * H * T * T * e, true}, {"attn.out", bthd, false}};
  else
    attn = {{"attn.out", bthd, false}, {"attn.lse", B * H * T * f32, false}};

  SavedActivations s;
  s.residual = btc;
  if (c.arch == Arch::gpt) {
    s.layer = {{"ln1", btc}, {"ln1.mean", stat}, {"ln1.rstd", stat}, {"qkv", BT * QKV * e}};
    s.layer.insert(s.layer.end(), attn.begin(), attn.end());
    s.layer.insert(s.layer.end(), {{"residual2", btc},
                                   {"ln2", btc},
                                   {"ln2.mean", stat},
                                   {"ln2.rstd", stat},
                                   {"mlp.fc.out", BT * F * e},
                                   {"mlp.gelu.out", BT * F * e, true}});
    s.head = {{"lnf", btc}, {"lnf.mean", stat}, {"lnf.rstd", stat}, {"logits", BT * Vp * e}};
  } else {
    s.layer = {{"attn_norm", btc}, {"attn_norm.rstd", stat}, {"qkv", BT * QKV * e}};
    s.layer.insert(s.layer.end(), attn.begin(), attn.end());
    s.layer.insert(s.layer.end(), {{"residual2", btc}, {"mlp_norm", btc}, {"mlp_norm.rstd", stat}});
    if (!c.moe()) {
      s.layer.insert(s.layer.end(), {{"mlp.gate.out", BT * F * e},
                                     {"mlp.up.out", BT * F * e},
                                     {"mlp.swiglu.out", BT * F * e, true}});
    } else {
      // A mixture of experts (llama_moe.cpp): the router's choices, the N k grouped rows of the
      // experts (the same bytes for every routing), the shared expert's MLP, output and gate logit.
      const std::size_t E = c.experts, k = c.experts_per_token, Fe = c.expert_ffn_dim, Fs = c.shared_expert_ffn_dim,
                        i32 = 4;
      s.layer.insert(s.layer.end(), {{"mlp.router.probs", BT * E * f32},
                                     {"mlp.router.experts", BT * k * i32},
                                     {"mlp.router.weights", BT * k * f32},
                                     {"moe.rows", BT * k * i32},
                                     {"moe.gate.out", BT * k * Fe * e},
                                     {"moe.up.out", BT * k * Fe * e},
                                     {"moe.swiglu.out", BT * k * Fe * e, true},
                                     {"moe.out", BT * k * C * e}});
      if (Fs != 0)
        s.layer.insert(s.layer.end(), {{"mlp.shared_expert.gate.out", BT * Fs * e},
                                       {"mlp.shared_expert.up.out", BT * Fs * e},
                                       {"mlp.shared_expert.swiglu.out", BT * Fs * e, true},
                                       {"mlp.shared_expert.out", btc},
                                       {"mlp.shared_expert_gate.out", BT * e}});
    }
    s.head = {{"norm", btc}, {"norm.rstd", stat}, {"logits", BT * Vp * e}};
  }
  return s;
}

}  // namespace trainmem
