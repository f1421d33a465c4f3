#include "common/model/gpt.h"

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"

namespace trainmem {


GPT::GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options)
    : Model(device, std::move(config), seed, options) {
  if (config_.arch != Arch::gpt) throw std::invalid_argument("GPT: the config is a " + to_string(config_.arch) + " model");
  acts_.resize(config_.layers);
}

void GPT::forward_layer(std::size_t l, bool produce_output) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::string h = indexed_name("h", l, ".");
    const Tensor& x = residual_[l];
    LayerActivations& a = acts_[l];
    a = LayerActivations{};

    // attention branch
    a.ln1 = make({B, Tn, Ci}, MemoryCategory::activations, h + "ln1");
    a.ln1_mean = make_f32({B, Tn}, MemoryCategory::activations, h + "ln1.mean");
    a.ln1_rstd = make_f32({B, Tn}, MemoryCategory::activations, h + "ln1.rstd");
    kernels::layernorm_forward<T>(s, a.ln1.data_as<T>(), f32(a.ln1_mean), f32(a.ln1_rstd), x.data_as<T>(),
                                  p(l, W::ln1_weight).data_as<T>(), p(l, W::ln1_bias).data_as<T>(), N, C);
    a.qkv = make({B, Tn, 3 * Ci}, MemoryCategory::activations, h + "qkv");
    linear_forward(a.qkv, a.ln1, p(l, W::qkv_weight), &p(l, W::qkv_bias), N, C, 3 * C);
    attention_forward(a, h);
    a.residual2 = make({B, Tn, Ci}, MemoryCategory::activations, h + "residual2");
    {
      Tensor proj = make({B, Tn, Ci}, MemoryCategory::workspace, h + "attn.proj.out");
      linear_forward(proj, a.atty, p(l, W::attn_proj_weight), &p(l, W::attn_proj_bias), N, C, C);
      kernels::residual_forward<T>(s, a.residual2.data_as<T>(), x.data_as<T>(), proj.data_as<T>(), N * C);
    }

    // MLP branch
    a.ln2 = make({B, Tn, Ci}, MemoryCategory::activations, h + "ln2");
    a.ln2_mean = make_f32({B, Tn}, MemoryCategory::activations, h + "ln2.mean");
    a.ln2_rstd = make_f32({B, Tn}, MemoryCategory::activations, h + "ln2.rstd");
    kernels::layernorm_forward<T>(s, a.ln2.data_as<T>(), f32(a.ln2_mean), f32(a.ln2_rstd), a.residual2.data_as<T>(),
                                  p(l, W::ln2_weight).data_as<T>(), p(l, W::ln2_bias).data_as<T>(), N, C);
    a.fch = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.fc.out");
    linear_forward(a.fch, a.ln2, p(l, W::fc_weight), &p(l, W::fc_bias), N, C, 4 * C);
    a.fch_gelu = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.gelu.out");
    kernels::gelu_forward<T>(s, a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
    if (!produce_output) return;  // recomputing for backward: x_{l+1} is not needed again
    residual_[l + 1] = make({B, Tn, Ci}, MemoryCategory::activations, indexed_name("x", l + 1));
    {
      Tensor proj = make({B, Tn, Ci}, MemoryCategory::workspace, h + "mlp.proj.out");
      linear_forward(proj, a.fch_gelu, p(l, W::mlp_proj_weight), &p(l, W::mlp_proj_bias), N, 4 * C, C);
      kernels::residual_forward<T>(s, residual_[l + 1].data_as<T>(), a.residual2.data_as<T>(), proj.data_as<T>(),
                                   N * C);
    }
  });
}

void GPT::final_norm_forward() {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    head_.norm = make({B, Tn, Ci}, MemoryCategory::activations, "lnf");
    head_.norm_mean = make_f32({B, Tn}, MemoryCategory::activations, "lnf.mean");
    head_.norm_rstd = make_f32({B, Tn}, MemoryCategory::activations, "lnf.rstd");
    kernels::layernorm_forward<T>(kernel_stream(device_), head_.norm.data_as<T>(), f32(head_.norm_mean),
                                  f32(head_.norm_rstd), residual_[config_.layers].data_as<T>(),
                                  param(table_.lnf_weight()).data_as<T>(), param(table_.lnf_bias()).data_as<T>(), N, C);
  });
}

void GPT::final_norm_backward(const Tensor& dnorm) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim;
    Tensor workspace = make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), "lnf.backward.workspace");
    kernels::layernorm_backward<T>(kernel_stream(device_), dresidual_.data_as<T>(),
                                   grad_for_write(table_.lnf_weight()).data_as<T>(),
                                   grad_for_write(table_.lnf_bias()).data_as<T>(), dnorm.data_as<T>(),
                                   residual_[config_.layers].data_as<T>(), param(table_.lnf_weight()).data_as<T>(),
                                   f32(head_.norm_mean), f32(head_.norm_rstd), workspace.data(), N, C);
  });
}

// ---------------------------------------------------------------------------------------------
// backward
// ---------------------------------------------------------------------------------------------

void GPT::layer_backward(std::size_t l) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    if (!acts_[l].present())
      throw std::logic_error("GPT::layer_backward(" + std::to_string(l) + "): the layer's activations are gone; "
                             "a recompute strategy must call layer_forward first");
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::string h = indexed_name("h", l, ".");
    LayerActivations& a = acts_[l];
    Tensor& dres = dresidual_;  // d x_{l+1} on entry, d x_l on exit

    // Each saved tensor and each gradient buffer is freed as soon as the backward has read it for
    // the last time, before the next buffer is allocated (as PyTorch's autograd releases a node's
    // saved tensors once the node has run): the layer's backward never holds what it is done with.
    // MLP branch: x_{l+1} = residual2 + fc_proj(gelu(fc(ln2(residual2))))
    {
      Tensor dfch = make({B, Tn, 4 * Ci}, MemoryCategory::workspace, h + "mlp.gelu.out.grad");
      linear_backward(&dfch, g(l, W::mlp_proj_weight), &g(l, W::mlp_proj_bias), dres, a.fch_gelu, p(l, W::mlp_proj_weight), N, 4 * C, C);
      a.fch_gelu.reset();
      // in place: d gelu.out -> d fc.out
      kernels::gelu_backward<T>(s, dfch.data_as<T>(), a.fch.data_as<T>(), dfch.data_as<T>(), N * 4 * C);
      a.fch.reset();
      Tensor dln2 = make({B, Tn, Ci}, MemoryCategory::workspace, h + "ln2.grad");
      linear_backward(&dln2, g(l, W::fc_weight), &g(l, W::fc_bias), dfch, a.ln2, p(l, W::fc_weight), N, C, 4 * C);
      dfch.reset();
      a.ln2.reset();
      // d residual2 = d x_{l+1} (skip path) + ln2's backward (accumulated into the same buffer)
      Tensor workspace =
          make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), h + "ln2.backward.workspace");
      kernels::layernorm_backward<T>(s, dres.data_as<T>(), g(l, W::ln2_weight).data_as<T>(), g(l, W::ln2_bias).data_as<T>(),
                                     dln2.data_as<T>(), a.residual2.data_as<T>(), p(l, W::ln2_weight).data_as<T>(),
                                     f32(a.ln2_mean), f32(a.ln2_rstd), workspace.data(), N, C);
      workspace.reset();
      dln2.reset();
      a.residual2.reset();
      a.ln2_mean.reset();
      a.ln2_rstd.reset();
    }
    // Attention branch: residual2 = x_l + attn_proj(attention(qkv(ln1(x_l))))
    {
      Tensor datty = make({B, Tn, Ci}, MemoryCategory::workspace, h + "attn.out.grad");
      linear_backward(&datty, g(l, W::attn_proj_weight), &g(l, W::attn_proj_bias), dres, a.atty, p(l, W::attn_proj_weight), N, C, C);
      Tensor dqkv = make({B, Tn, 3 * Ci}, MemoryCategory::workspace, h + "qkv.grad");
      attention_backward(dqkv, datty, a, h);  // reads atty too (flash: O)
      datty.reset();
      a.atty.reset();
      a.att.reset();
      a.lse.reset();
      Tensor dln1 = make({B, Tn, Ci}, MemoryCategory::workspace, h + "ln1.grad");
      linear_backward(&dln1, g(l, W::qkv_weight), &g(l, W::qkv_bias), dqkv, a.ln1, p(l, W::qkv_weight), N, C, 3 * C);
      dqkv.reset();
      a.qkv.reset();
      a.ln1.reset();
      Tensor workspace =
          make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), h + "ln1.backward.workspace");
      kernels::layernorm_backward<T>(s, dres.data_as<T>(), g(l, W::ln1_weight).data_as<T>(), g(l, W::ln1_bias).data_as<T>(),
                                     dln1.data_as<T>(), residual_[l].data_as<T>(), p(l, W::ln1_weight).data_as<T>(),
                                     f32(a.ln1_mean), f32(a.ln1_rstd), workspace.data(), N, C);
    }
    a = LayerActivations{};  // this layer's saved tensors are no longer needed,
    residual_[l].reset();    // nor its input (the embedding's backward needs only the tokens)
  });
}

void GPT::release_selective(std::size_t layer) {
  acts_[layer].att.reset();
  acts_[layer].fch_gelu.reset();
}

void GPT::recompute_selective(std::size_t l) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::string h = indexed_name("h", l, ".");
    LayerActivations& a = acts_[l];
    attention_recompute_probabilities(a, h);
    a.fch_gelu = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.gelu.out");
    kernels::gelu_forward<T>(kernel_stream(device_), a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
  });
}

}  // namespace trainmem
