#include "common/model/gpt.h"

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"

namespace trainmem {


GPT::GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options)
    : LayerStack(device, std::move(config), seed, options, Arch::gpt, "GPT") {}

void GPT::layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                            const Tensor& bias, const std::string& name) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    out = make(per_token(config_.dim), MemoryCategory::activations, name);
    mean = make_f32(per_token(), MemoryCategory::activations, name + ".mean");
    rstd = make_f32(per_token(), MemoryCategory::activations, name + ".rstd");
    kernels::layernorm_forward<T>(kernel_stream(device_), out.data_as<T>(), f32(mean), f32(rstd), x.data_as<T>(),
                                  weight.data_as<T>(), bias.data_as<T>(), B_ * T_, config_.dim);
  });
}

void GPT::block_forward(std::size_t l, LayerActivations& a, bool produce_output) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const std::string h = indexed_name("h", l, ".");
    const Tensor& x = residual_[l];

    // attention branch
    layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p(l, W::ln1_weight), p(l, W::ln1_bias), h + "ln1");
    a.qkv = make(per_token(3 * C), MemoryCategory::activations, h + "qkv");
    linear_forward(a.qkv, a.ln1, p(l, W::qkv_weight), &p(l, W::qkv_bias), N, C, 3 * C);
    attention_forward(a, h);
    a.residual2 = make(per_token(C), MemoryCategory::activations, h + "residual2");
    project_and_add(a.residual2, x, a.atty, p(l, W::attn_proj_weight), &p(l, W::attn_proj_bias), C, h + "attn.proj.out");

    // MLP branch
    layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p(l, W::ln2_weight), p(l, W::ln2_bias), h + "ln2");
    a.fch = make(per_token(4 * C), MemoryCategory::activations, h + "mlp.fc.out");
    linear_forward(a.fch, a.ln2, p(l, W::fc_weight), &p(l, W::fc_bias), N, C, 4 * C);
    a.fch_gelu = make(per_token(4 * C), MemoryCategory::activations, h + "mlp.gelu.out");
    kernels::gelu_forward<T>(s, a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
    if (!produce_output) return;  // recomputing for backward: x_{l+1} is not needed again
    residual_[l + 1] = make(per_token(C), MemoryCategory::activations, indexed_name("x", l + 1));
    project_and_add(residual_[l + 1], a.residual2, a.fch_gelu, p(l, W::mlp_proj_weight), &p(l, W::mlp_proj_bias),
                    4 * C, h + "mlp.proj.out");
  });
}

void GPT::final_norm_forward() {
  layernorm_forward(head_.norm, head_.norm_mean, head_.norm_rstd, residual_[config_.layers],
                    param(table_.lnf_weight()), param(table_.lnf_bias()), "lnf");
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

void GPT::block_backward(std::size_t l, LayerActivations& a) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const std::string h = indexed_name("h", l, ".");
    Tensor& dres = dresidual_;  // d x_{l+1} on entry, d x_l on exit

    // Each tensor is freed once read for the last time (layer_stack.h).
    // MLP branch: x_{l+1} = residual2 + fc_proj(gelu(fc(ln2(residual2))))
    {
      Tensor dfch = make(per_token(4 * C), MemoryCategory::workspace, h + "mlp.gelu.out.grad");
      linear_backward(&dfch, g(l, W::mlp_proj_weight), &g(l, W::mlp_proj_bias), dres, a.fch_gelu, p(l, W::mlp_proj_weight), N, 4 * C, C);
      a.fch_gelu.reset();
      // in place: d gelu.out -> d fc.out
      kernels::gelu_backward<T>(s, dfch.data_as<T>(), a.fch.data_as<T>(), dfch.data_as<T>(), N * 4 * C);
      a.fch.reset();
      Tensor dln2 = make(per_token(C), MemoryCategory::workspace, h + "ln2.grad");
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
      Tensor datty = make(per_token(C), MemoryCategory::workspace, h + "attn.out.grad");
      linear_backward(&datty, g(l, W::attn_proj_weight), &g(l, W::attn_proj_bias), dres, a.atty, p(l, W::attn_proj_weight), N, C, C);
      Tensor dqkv = make(per_token(3 * C), MemoryCategory::workspace, h + "qkv.grad");
      attention_backward(dqkv, datty, a, h);  // reads atty too (flash: O)
      datty.reset();
      a.atty.reset();
      a.att.reset();
      a.lse.reset();
      Tensor dln1 = make(per_token(C), MemoryCategory::workspace, h + "ln1.grad");
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
  });
}

void GPT::recompute_mlp_nonlinearity(std::size_t l, LayerActivations& a) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::size_t N = B_ * T_, C = config_.dim;
    a.fch_gelu = make(per_token(4 * C), MemoryCategory::activations, indexed_name("h", l, ".mlp.gelu.out"));
    kernels::gelu_forward<T>(kernel_stream(device_), a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
  });
}

}  // namespace trainmem
