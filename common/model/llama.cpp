#include "common/model/llama.h"

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace trainmem {


Llama::Llama(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options)
    : LayerStack(device, std::move(config), seed, options, Arch::llama, "Llama") {
  router_statistics_.resize(config_.layers);
}

void Llama::rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& x, const Tensor& weight, const std::string& name) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    out = make(per_token(config_.dim), MemoryCategory::activations, name);
    rstd = make_f32(per_token(), MemoryCategory::activations, name + ".rstd");
    kernels::rmsnorm_forward<T>(kernel_stream(device_), out.data_as<T>(), f32(rstd), x.data_as<T>(), weight.data_as<T>(),
                                B_ * T_, config_.dim, config_.norm_eps);
  });
}

void Llama::rotate_qk(Tensor& qkv, bool inverse) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t H = config_.heads, Hkv = config_.num_kv_heads(), D = config_.head_dim(), row = qkv_dim();
    const kernels::RopeFrequencies& frequencies = config_.rope;
    // q: H heads from column 0; k: Hkv heads from column H*D. v is not rotated.
    for (const auto& [first_column, heads] : {std::pair{std::size_t{0}, H}, std::pair{H * D, Hkv}}) {
      if (inverse)
        kernels::rope_backward<T>(s, qkv.data_as<T>(), qkv.data_as<T>(), B_, T_, heads, D, row, first_column, frequencies);
      else
        kernels::rope_forward<T>(s, qkv.data_as<T>(), qkv.data_as<T>(), B_, T_, heads, D, row, first_column, frequencies);
    }
  });
}

void Llama::block_forward(std::size_t l, LlamaLayerActivations& a, bool produce_output) {
  const std::size_t N = B_ * T_, C = config_.dim, F = config_.mlp_dim(), QKV = qkv_dim();
  const std::string h = indexed_name("h", l, ".");
  const Tensor& x = residual_[l];

  // attention branch: residual2 = x_l + attn_proj(attention(rope(qkv(rmsnorm(x_l)))))
  rmsnorm_forward(a.attn_norm, a.attn_norm_rstd, x, p(l, W::attn_norm_weight), h + "attn_norm");
  a.qkv = make(per_token(QKV), MemoryCategory::activations, h + "qkv");
  linear_forward(a.qkv, a.attn_norm, p(l, W::qkv_weight), table_.has(W::qkv_bias) ? &p(l, W::qkv_bias) : nullptr, N, C,
                 QKV);
  rotate_qk(a.qkv, /*inverse=*/false);  // saved rotated: attention and its backward read these
  attention_forward(a, h);
  a.residual2 = make(per_token(C), MemoryCategory::activations, h + "residual2");
  project_and_add(a.residual2, x, a.atty, p(l, W::attn_proj_weight), nullptr, config_.attention_dim(), h + "attn.proj.out");

  // MLP branch: x_{l+1} = residual2 + down(silu(gate(n)) * up(n)),  n = rmsnorm(residual2)
  // (or a mixture of experts on n: llama_moe.cpp)
  rmsnorm_forward(a.mlp_norm, a.mlp_norm_rstd, a.residual2, p(l, W::mlp_norm_weight), h + "mlp_norm");
  if (config_.moe()) return moe_forward(l, a, produce_output);
  swiglu_mlp_forward(l, a, F, W::gate_weight, W::up_weight, h + "mlp.");
  if (!produce_output) return;  // recomputing for backward: x_{l+1} is not needed again
  residual_[l + 1] = make(per_token(C), MemoryCategory::activations, indexed_name("x", l + 1));
  project_and_add(residual_[l + 1], a.residual2, a.swiglu, p(l, W::down_weight), nullptr, F, h + "mlp.down.out");
}

void Llama::swiglu_mlp_forward(std::size_t l, LlamaLayerActivations& a, std::size_t F, W gate, W up,
                               const std::string& name) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim;
    a.gate = make(per_token(F), MemoryCategory::activations, name + "gate.out");
    linear_forward(a.gate, a.mlp_norm, p(l, gate), nullptr, N, C, F);
    a.up = make(per_token(F), MemoryCategory::activations, name + "up.out");
    linear_forward(a.up, a.mlp_norm, p(l, up), nullptr, N, C, F);
    a.swiglu = make(per_token(F), MemoryCategory::activations, name + "swiglu.out");
    kernels::swiglu_forward<T>(kernel_stream(device_), a.swiglu.data_as<T>(), a.gate.data_as<T>(), a.up.data_as<T>(), N * F);
  });
}

void Llama::final_norm_forward() {
  rmsnorm_forward(head_.norm, head_.norm_rstd, residual_[config_.layers], param(table_.norm_weight()), "norm");
}

void Llama::final_norm_backward(const Tensor& dnorm) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim, norm = table_.norm_weight();
    Tensor workspace = make_cuda_workspace(kernels::rmsnorm_backward_workspace_bytes(N, C), "norm.backward.workspace");
    kernels::rmsnorm_backward<T>(kernel_stream(device_), dresidual_.data_as<T>(), grad_for_write(norm).data_as<T>(),
                                 dnorm.data_as<T>(), residual_[config_.layers].data_as<T>(), param(norm).data_as<T>(),
                                 f32(head_.norm_rstd), workspace.data(), N, C);
  });
}

// ---------------------------------------------------------------------------------------------
// backward
// ---------------------------------------------------------------------------------------------

void Llama::block_backward(std::size_t l, LlamaLayerActivations& a) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim, F = config_.mlp_dim(), QKV = qkv_dim();
    const std::string h = indexed_name("h", l, ".");
    Tensor& dres = dresidual_;  // d x_{l+1} on entry, d x_l on exit

    // Each tensor is freed once read for the last time (layer_stack.h).
    // MLP branch: x_{l+1} = residual2 + down(swiglu(gate(n), up(n))),  n = mlp_norm(residual2)
    // (or a mixture of experts: llama_moe.cpp)
    {
      Tensor dnorm = config_.moe() ? moe_backward(l, a)
                                   : swiglu_mlp_backward(l, a, dres, /*consume_dout=*/false, F, W::gate_weight,
                                                         W::up_weight, W::down_weight, h + "mlp.", h + "mlp_norm.grad");
      a.mlp_norm.reset();
      // d residual2 = d x_{l+1} (skip path) + the norm's backward (accumulated into the same buffer)
      Tensor workspace =
          make_cuda_workspace(kernels::rmsnorm_backward_workspace_bytes(N, C), h + "mlp_norm.backward.workspace");
      kernels::rmsnorm_backward<T>(s, dres.data_as<T>(), g(l, W::mlp_norm_weight).data_as<T>(), dnorm.data_as<T>(),
                                   a.residual2.data_as<T>(), p(l, W::mlp_norm_weight).data_as<T>(), f32(a.mlp_norm_rstd),
                                   workspace.data(), N, C);
      workspace.reset();
      dnorm.reset();
      a.residual2.reset();
      a.mlp_norm_rstd.reset();
    }
    // Attention branch: residual2 = x_l + attn_proj(attention(rope(qkv(attn_norm(x_l)))))
    {
      const std::size_t HD = config_.attention_dim();  // H*D: C unless the head dimension is set
      Tensor datty = make(per_token(HD), MemoryCategory::workspace, h + "attn.out.grad");
      linear_backward(&datty, g(l, W::attn_proj_weight), nullptr, dres, a.atty, p(l, W::attn_proj_weight), N, HD, C);
      Tensor dqkv = make(per_token(QKV), MemoryCategory::workspace, h + "qkv.grad");
      attention_backward(dqkv, datty, a, h);  // the gradient of the rotated q, k (and of v)
      datty.reset();
      a.atty.reset();
      a.att.reset();
      a.lse.reset();
      rotate_qk(dqkv, /*inverse=*/true);  // back through RoPE: the gradient of the projection's q, k
      Tensor dnorm = make(per_token(C), MemoryCategory::workspace, h + "attn_norm.grad");
      Tensor& dweight = g(l, W::qkv_weight);  // (then the bias's: the gradients are made in this order)
      Tensor* dbias = table_.has(W::qkv_bias) ? &g(l, W::qkv_bias) : nullptr;
      linear_backward(&dnorm, dweight, dbias, dqkv, a.attn_norm, p(l, W::qkv_weight), N, C, QKV);
      dqkv.reset();
      a.qkv.reset();
      a.attn_norm.reset();
      Tensor workspace =
          make_cuda_workspace(kernels::rmsnorm_backward_workspace_bytes(N, C), h + "attn_norm.backward.workspace");
      kernels::rmsnorm_backward<T>(s, dres.data_as<T>(), g(l, W::attn_norm_weight).data_as<T>(), dnorm.data_as<T>(),
                                   residual_[l].data_as<T>(), p(l, W::attn_norm_weight).data_as<T>(), f32(a.attn_norm_rstd),
                                   workspace.data(), N, C);
    }
  });
}

Tensor Llama::swiglu_mlp_backward(std::size_t l, LlamaLayerActivations& a, Tensor& dout, bool consume_dout,
                                  std::size_t F, W gate, W up, W down, const std::string& name,
                                  const std::string& dnorm_name) {
  Tensor dnorm;
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    Tensor dswiglu = make(per_token(F), MemoryCategory::workspace, name + "swiglu.out.grad");
    linear_backward(&dswiglu, g(l, down), nullptr, dout, a.swiglu, p(l, down), N, F, C);
    a.swiglu.reset();
    if (consume_dout) dout.reset();
    // In place: dgate over gate, dup over up (each is read for the last time by this kernel).
    Tensor& dgate = a.gate;
    Tensor& dup = a.up;
    kernels::swiglu_backward<T>(s, dgate.data_as<T>(), dup.data_as<T>(), dswiglu.data_as<T>(), a.gate.data_as<T>(),
                                a.up.data_as<T>(), N * F);
    dswiglu.reset();
    // d n = dgate W_gate + dup W_up: n feeds two projections, whose input gradients add.
    dnorm = make(per_token(C), MemoryCategory::workspace, dnorm_name);
    linear_backward(&dnorm, g(l, gate), nullptr, dgate, a.mlp_norm, p(l, gate), N, C, F);
    a.gate.reset();
    Tensor dnorm_up = make(per_token(C), MemoryCategory::workspace, dnorm_name + ".up");
    linear_backward(&dnorm_up, g(l, up), nullptr, dup, a.mlp_norm, p(l, up), N, C, F);
    a.up.reset();
    kernels::residual_forward<T>(s, dnorm.data_as<T>(), dnorm.data_as<T>(), dnorm_up.data_as<T>(), N * C);
  });
  return dnorm;
}

void Llama::recompute_mlp_nonlinearity(std::size_t l, LlamaLayerActivations& a) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_;
    const std::string h = indexed_name("h", l, ".");
    // The dense MLP's or the shared expert's SwiGLU (in gate, up), then the experts'.
    if (a.gate.data() != nullptr) {
      const std::size_t F = config_.moe() ? config_.shared_expert_ffn_dim : config_.mlp_dim();
      a.swiglu = make(per_token(F), MemoryCategory::activations,
                      h + (config_.moe() ? "mlp.shared_expert.swiglu.out" : "mlp.swiglu.out"));
      kernels::swiglu_forward<T>(s, a.swiglu.data_as<T>(), a.gate.data_as<T>(), a.up.data_as<T>(), N * F);
    }
    if (config_.moe()) {
      const std::size_t rows = N * config_.experts_per_token, Fe = config_.expert_ffn_dim;
      a.expert_swiglu = make({static_cast<std::int64_t>(rows), static_cast<std::int64_t>(Fe)}, MemoryCategory::activations,
                             h + "moe.swiglu.out");
      kernels::swiglu_forward<T>(s, a.expert_swiglu.data_as<T>(), a.expert_gate.data_as<T>(), a.expert_up.data_as<T>(),
                                 rows * Fe);
    }
  });
}

}  // namespace trainmem
