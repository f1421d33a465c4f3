#include "common/model/gpt.h"

#include <cmath>
#include <optional>
#include <random>

#include "common/device/device_ops.h"
#include "common/model/parameter_table.h"
#include "common/model/storage_type.h"
#include "kernels/attention.h"
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
#include "kernels/cudnn_attention.h"
#endif
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/dtype.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_workspace.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace trainmem {

namespace {
// A layer's parameters by their short names (the order is parameter_table.h's).
constexpr LayerParameter kLn1W = LayerParameter::ln1_weight, kLn1B = LayerParameter::ln1_bias,
                         kQkvW = LayerParameter::qkv_weight, kQkvB = LayerParameter::qkv_bias,
                         kAttProjW = LayerParameter::attn_proj_weight, kAttProjB = LayerParameter::attn_proj_bias,
                         kLn2W = LayerParameter::ln2_weight, kLn2B = LayerParameter::ln2_bias,
                         kFcW = LayerParameter::fc_weight, kFcB = LayerParameter::fc_bias,
                         kFcProjW = LayerParameter::mlp_proj_weight, kFcProjB = LayerParameter::mlp_proj_bias;
constexpr std::size_t kWte = ParameterTable::kWte, kWpe = ParameterTable::kWpe;

// "h3." for layer 3's tensors, "x4" for the residual stream entering layer 4. (Built with +=:
// GCC 12 warns falsely about "h" + std::to_string(l) + ".".)
std::string indexed(const char* prefix, std::size_t index, const char* suffix = "") {
  std::string s = prefix;
  s += std::to_string(index);
  s += suffix;
  return s;
}

float* f(Tensor& t) { return t.data_as<float>(); }  // fp32-only tensors (layernorm statistics, losses)

// Each op runs in the model's storage type T -- float, kernels::bf16 or kernels::fp16
// (with_storage_type, common/model/storage_type.h) -- and names it to the kernels, which read and
// write that type and compute in fp32 inside: no fp32 copy of a 16-bit tensor is ever made.

// The CPU flash reference (no dispatcher: on a GPU the CUDA kernels below run), skipped on meta.
template <typename T>
void cpu_flash_forward(const kernels::Stream& s, T* out, float* lse, const T* qkv,
                       const kernels::AttentionShape& shape) {
  if (s.backend != kernels::Backend::meta) kernels::cpu::flash_attention_forward<T>(out, lse, qkv, shape);
}
template <typename T>
void cpu_flash_backward(const kernels::Stream& s, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const kernels::AttentionShape& shape) {
  if (s.backend != kernels::Backend::meta) kernels::cpu::flash_attention_backward<T>(dqkv, dout, qkv, out, lse, shape);
}
}  // namespace

Tensor GPT::make(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name) {
  return Tensor(device_.allocator(), std::move(shape), dtype_, category, name);
}

Tensor GPT::make_f32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name) {
  return Tensor(device_.allocator(), std::move(shape), DType::f32, category, name);
}

GPT::GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options)
    : device_(device), config_(std::move(config)), options_(options), dtype_(storage_dtype(options.precision)) {
  config_.validate();
  if (options_.attention != AttentionKind::naive && device_.cuda_pattern() && dtype_ == DType::f32)
    throw std::invalid_argument("--attention " + to_string(options_.attention) +
                                " runs on a GPU in 16 bits: add --precision bf16 (or fp16)");
  if (options_.attention == AttentionKind::cudnn && !device_.cuda_pattern())
    throw std::invalid_argument("--attention cudnn needs a CUDA device; on the CPU use --attention flash");
  const auto L = static_cast<float>(config_.layers);
  const ParameterTable table(config_);
  std::mt19937_64 rng(seed);
  std::vector<float> all_values;
  const float residual_std = 0.02f / std::sqrt(2.0f * L);
  for (const ParameterInfo& s : table.all()) {
    Parameter p{s.name, make(s.shape, MemoryCategory::parameters, s.name), Tensor()};
    if (device_.computes()) {  // meta: no values to draw (a 1.5B model's would be 6 GB of host memory)
      std::vector<float> host(static_cast<std::size_t>(p.value.numel()));  // zeros
      std::normal_distribution<float> normal(0.0f, s.init == ParameterInit::residual ? residual_std : 0.02f);
      // wte's vocabulary padding rows stay zero (and draw nothing: the real rows get the same values
      // as in an unpadded model).
      const std::size_t drawn = host.size() - static_cast<std::size_t>(s.padding_rows) * (host.size() / static_cast<std::size_t>(s.shape[0]));
      for (std::size_t i = 0; i < drawn; ++i)
        host[i] = s.init == ParameterInit::ones ? 1.0f : s.init == ParameterInit::zeros ? 0.0f : normal(rng);
      all_values.insert(all_values.end(), host.begin(), host.end());
    }
    params_.push_back(std::move(p));
    grad_for_write(params_.size() - 1);  // zeroed, right after its value (persistent gradients)
  }
  store_parameter_values(device_.computes() ? all_values.data() : nullptr);  // rounds to the storage type
  acts_.resize(config_.layers);
}

void GPT::zero_grad() {
  // A sharding strategy (ZeRO-2/3, FSDP) may have released a gradient: nothing to zero then.
  for (Parameter& p : params_)
    if (p.grad.data() != nullptr) zero_device_memory(device_, p.grad.data(), p.grad.nbytes());
}

void GPT::release_gradients() {
  for (Parameter& p : params_) p.grad.reset();
}

Tensor& GPT::grad_for_write(std::size_t index) {
  Parameter& p = params_[index];
  if (p.grad.data() == nullptr) {  // none since the last release: made now, at its first write
    p.grad = make(p.value.shape(), MemoryCategory::gradients, p.name + ".grad");
    zero_device_memory(device_, p.grad.data(), p.grad.nbytes());  // the backward accumulates into it
  }
  return p.grad;
}

// ---------------------------------------------------------------------------------------------
// forward
// ---------------------------------------------------------------------------------------------

void GPT::begin(const Tensor& tokens, const Tensor& targets) {
  if (tokens.shape().size() != 2 || tokens.shape() != targets.shape())
    throw std::invalid_argument("GPT::begin: tokens and targets must both be [B, T]");
  B_ = static_cast<std::size_t>(tokens.dim(0));
  T_ = static_cast<std::size_t>(tokens.dim(1));
  if (T_ > config_.seq)
    throw std::invalid_argument("sequence of " + std::to_string(T_) + " tokens is longer than the model's context " +
                                std::to_string(config_.seq));
  tokens_ = &tokens;
  targets_ = &targets;
  residual_.clear();
  residual_.resize(config_.layers + 1);
}

// The linear layer (kernels/matmul.h) in the storage type: fp32 accumulation inside; on a GPU, 16
// bits go to the tensor cores (cuBLASLt).
void GPT::linear_forward(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor* bias, std::size_t N,
                         std::size_t C, std::size_t OC) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    kernels::matmul_forward<T>(kernel_stream(device_), y.data_as<T>(), x.data_as<T>(), weight.data_as<T>(),
                               bias ? bias->data_as<T>() : nullptr, N, C, OC);
  });
}

void GPT::linear_backward(Tensor* dinp, Tensor& dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                          const Tensor& weight, std::size_t N, std::size_t C, std::size_t OC) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    kernels::matmul_backward<T>(kernel_stream(device_), dinp ? dinp->data_as<T>() : nullptr, dweight.data_as<T>(),
                                dbias ? dbias->data_as<T>() : nullptr, dout.data_as<T>(), inp.data_as<T>(),
                                weight.data_as<T>(), N, C, OC);
  });
}

kernels::Half16 GPT::half16() const {
  return dtype_ == DType::bf16 ? kernels::Half16::bf16 : kernels::Half16::fp16;
}

kernels::AttentionShape GPT::attention_shape() const {
  kernels::AttentionShape shape;
  shape.B = B_;
  shape.T = T_;
  shape.H = config_.heads;
  // This model's qkv is [B, T, 3C]: multi-head attention, every query head its own K/V head
  // (grouped-query attention, kernels/attention_heads.h, with Hkv = H).
  shape.Hkv = config_.heads;
  shape.D = config_.dim / config_.heads;
  shape.causal = true;
  return shape;
}

// naive: out, scores (workspace) and probabilities (saved) -- kernels/attention.h.
// flash / cudnn: out and the log-sum-exp per row (saved, fp32) -- kernels/flash_attention.h.
void GPT::attention_forward(LayerActivations& a, const std::string& h) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               C = static_cast<std::int64_t>(config_.dim), H = static_cast<std::int64_t>(config_.heads);
    if (options_.attention == AttentionKind::naive) {
      a.att = make({B, H, Tn, Tn}, MemoryCategory::activations, h + "attn.probs");
      a.atty = make({B, Tn, C}, MemoryCategory::activations, h + "attn.out");
      // The scores are needed only to compute the probabilities: workspace, freed at once.
      Tensor preatt = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores");
      kernels::attention_forward<T>(s, a.atty.data_as<T>(), preatt.data_as<T>(), a.att.data_as<T>(), a.qkv.data_as<T>(),
                                    B_, T_, config_.dim, config_.heads, config_.heads);  // K/V heads = H
      return;
    }
    a.atty = make({B, Tn, C}, MemoryCategory::activations, h + "attn.out");
    a.lse = make_f32({B, H, Tn}, MemoryCategory::activations, h + "attn.lse");
    const kernels::AttentionShape shape = attention_shape();
    if (!device_.cuda_pattern()) {  // the CPU reference, in the storage type
      cpu_flash_forward(s, a.atty.data_as<T>(), f(a.lse), a.qkv.data_as<T>(), shape);
      return;
    }
    const kernels::Half16 half = half16();
    // A meta run of the CUDA pattern: out and lse are all that flash's forward allocates. cuDNN sizes
    // its workspaces at run time, on the GPU (the plan cudnn-frontend picks for the shape), so a meta
    // run counts none, forward or backward: the one rule by which the meta run of the CUDA pattern
    // differs from a GPU's allocation sequence (they are freed at once; common/device/README.md, "The meta device").
    if (!device_.computes()) return;
    if (options_.attention == AttentionKind::flash) {
      TRAINMEM_CUDA_KERNEL("flash_attention_forward",
                           kernels::cuda::flash_attention_forward(
                               s.cuda_stream, kernels::cuda::flash_attention_versions(), half,
                               a.atty.data_as<std::uint16_t>(), f(a.lse), a.qkv.data_as<std::uint16_t>(), shape));
      return;
    }
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
    Tensor workspace =
        make_bytes(kernels::cudnn::attention_forward_workspace_bytes(half, shape), h + "attn.cudnn.workspace");
    kernels::cudnn::attention_forward(s.cuda_stream, half, a.atty.data_as<std::uint16_t>(), f(a.lse),
                                      a.qkv.data_as<std::uint16_t>(), workspace.data(), shape);
#else
    (void)half;
    throw std::invalid_argument(
        "--attention cudnn: trainmem was built without cuDNN's frontend headers (run ci/setup)");
#endif
  });
}

// dqkv is written from d(attention output).
void GPT::attention_backward(Tensor& dqkv, const Tensor& datty, LayerActivations& a, const std::string& h) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               H = static_cast<std::int64_t>(config_.heads);
    if (options_.attention == AttentionKind::naive) {
      // One B*H*T^2 buffer: the probabilities' gradient, then in place the scores' (kernels/attention.h)
      Tensor dscores = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores.grad");
      kernels::attention_backward<T>(s, dqkv.data_as<T>(), dscores.data_as<T>(), datty.data_as<T>(), a.qkv.data_as<T>(),
                                     a.att.data_as<T>(), B_, T_, config_.dim, config_.heads, config_.heads);
      return;
    }
    const kernels::AttentionShape shape = attention_shape();
    if (!device_.cuda_pattern()) {  // the CPU reference, in the storage type
      cpu_flash_backward(s, dqkv.data_as<T>(), datty.data_as<T>(), a.qkv.data_as<T>(), a.atty.data_as<T>(), f(a.lse),
                         shape);
      return;
    }
    const kernels::Half16 half = half16();
    if (options_.attention == AttentionKind::flash) {
      // The workspace the CUDA backward asks for (kernels/flash_attention_workspace.h), on meta too.
      const int version = kernels::kFlashAttentionNewestVersion;
      Tensor workspace =
          make_bytes(kernels::flash_attention_backward_workspace_bytes(version, shape), h + "attn.flash.workspace");
      if (!device_.computes()) return;
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
      kernels::cuda::flash_attention_backward(s.cuda_stream, version, half, dqkv.data_as<std::uint16_t>(),
                                              datty.data_as<std::uint16_t>(), a.qkv.data_as<std::uint16_t>(),
                                              a.atty.data_as<std::uint16_t>(), f(a.lse), workspace.data(), shape);
      return;
#else
      kernels::no_cuda_kernels("flash_attention_backward");
#endif
    }
    if (!device_.computes()) return;  // meta: cuDNN's workspace is not known (attention_forward says why)
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
    Tensor workspace =
        make_bytes(kernels::cudnn::attention_backward_workspace_bytes(half, shape), h + "attn.cudnn.workspace");
    kernels::cudnn::attention_backward(s.cuda_stream, half, dqkv.data_as<std::uint16_t>(),
                                       datty.data_as<std::uint16_t>(), a.qkv.data_as<std::uint16_t>(),
                                       a.atty.data_as<std::uint16_t>(), f(a.lse), workspace.data(), shape);
#else
    (void)half;
    throw std::invalid_argument(
        "--attention cudnn: trainmem was built without cuDNN's frontend headers (run ci/setup)");
#endif
  });
}

Tensor GPT::make_bytes(std::size_t bytes, const std::string& name) {
  // Scratch of a byte size, as 4-byte elements (the allocator sees the bytes, rounded up to 512 anyway).
  return Tensor(device_.allocator(), {static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32,
                MemoryCategory::workspace, name);
}

Tensor GPT::make_cuda_workspace(std::size_t bytes, const std::string& name) {
  return device_.cuda_pattern() ? make_bytes(bytes, name) : Tensor{};
}

void GPT::embed_forward() {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               C = static_cast<std::int64_t>(config_.dim);
    residual_[0] = make({B, Tn, C}, MemoryCategory::activations, "x0");
    kernels::embedding_forward<T>(kernel_stream(device_), residual_[0].data_as<T>(), tokens_->data_as<std::int32_t>(),
                               params_[kWte].value.data_as<T>(), params_[kWpe].value.data_as<T>(), B_, T_, config_.dim);
  });
}

void GPT::layer_forward(std::size_t l) { forward_layer(l, /*produce_output=*/true); }

void GPT::recompute_layer(std::size_t l, bool remake_output) { forward_layer(l, remake_output); }

void GPT::forward_layer(std::size_t l, bool produce_output) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::string h = indexed("h", static_cast<std::size_t>(l), ".");
    const Tensor& x = residual_[l];
    LayerActivations& a = acts_[l];
    a = LayerActivations{};

    // attention branch
    a.ln1 = make({B, Tn, Ci}, MemoryCategory::activations, h + "ln1");
    a.ln1_mean = make_f32({B, Tn}, MemoryCategory::activations, h + "ln1.mean");
    a.ln1_rstd = make_f32({B, Tn}, MemoryCategory::activations, h + "ln1.rstd");
    kernels::layernorm_forward<T>(s, a.ln1.data_as<T>(), f(a.ln1_mean), f(a.ln1_rstd), x.data_as<T>(),
                                  p(l, kLn1W).data_as<T>(), p(l, kLn1B).data_as<T>(), N, C);
    a.qkv = make({B, Tn, 3 * Ci}, MemoryCategory::activations, h + "qkv");
    linear_forward(a.qkv, a.ln1, p(l, kQkvW), &p(l, kQkvB), N, C, 3 * C);
    attention_forward(a, h);
    a.residual2 = make({B, Tn, Ci}, MemoryCategory::activations, h + "residual2");
    {
      Tensor proj = make({B, Tn, Ci}, MemoryCategory::workspace, h + "attn.proj.out");
      linear_forward(proj, a.atty, p(l, kAttProjW), &p(l, kAttProjB), N, C, C);
      kernels::residual_forward<T>(s, a.residual2.data_as<T>(), x.data_as<T>(), proj.data_as<T>(), N * C);
    }

    // MLP branch
    a.ln2 = make({B, Tn, Ci}, MemoryCategory::activations, h + "ln2");
    a.ln2_mean = make_f32({B, Tn}, MemoryCategory::activations, h + "ln2.mean");
    a.ln2_rstd = make_f32({B, Tn}, MemoryCategory::activations, h + "ln2.rstd");
    kernels::layernorm_forward<T>(s, a.ln2.data_as<T>(), f(a.ln2_mean), f(a.ln2_rstd), a.residual2.data_as<T>(),
                                  p(l, kLn2W).data_as<T>(), p(l, kLn2B).data_as<T>(), N, C);
    a.fch = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.fc.out");
    linear_forward(a.fch, a.ln2, p(l, kFcW), &p(l, kFcB), N, C, 4 * C);
    a.fch_gelu = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.gelu.out");
    kernels::gelu_forward<T>(s, a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
    if (!produce_output) return;  // recomputing for backward: x_{l+1} is not needed again
    residual_[l + 1] = make({B, Tn, Ci}, MemoryCategory::activations, indexed("x", l + 1));
    {
      Tensor proj = make({B, Tn, Ci}, MemoryCategory::workspace, h + "mlp.proj.out");
      linear_forward(proj, a.fch_gelu, p(l, kFcProjW), &p(l, kFcProjB), N, 4 * C, C);
      kernels::residual_forward<T>(s, residual_[l + 1].data_as<T>(), a.residual2.data_as<T>(), proj.data_as<T>(),
                                   N * C);
    }
  });
}

double GPT::head_forward() {
  double loss = 0;
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim, V = config_.vocab, Vp = padded_vocab(V);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C),
               Vpi = static_cast<std::int64_t>(Vp);
    const Tensor& x = residual_[config_.layers];
    const std::size_t lnf = ParameterTable(config_).lnf_weight();
    lnf_ = make({B, Tn, Ci}, MemoryCategory::activations, "lnf");
    lnf_mean_ = make_f32({B, Tn}, MemoryCategory::activations, "lnf.mean");
    lnf_rstd_ = make_f32({B, Tn}, MemoryCategory::activations, "lnf.rstd");
    kernels::layernorm_forward<T>(s, lnf_.data_as<T>(), f(lnf_mean_), f(lnf_rstd_), x.data_as<T>(),
                                  params_[lnf].value.data_as<T>(), params_[lnf + 1].value.data_as<T>(), N, C);
    // Vp logits a row (the padded head: model_config.h); the cross-entropy reads the first V.
    logits_ = make({B, Tn, Vpi}, MemoryCategory::activations, "logits");
    linear_forward(logits_, lnf_, params_[kWte].value, nullptr, N, C, Vp);

    Tensor losses = make_f32({B, Tn}, MemoryCategory::workspace, "losses");
    kernels::cross_entropy_forward<T>(s, f(losses), logits_.data_as<T>(), targets_->data_as<std::int32_t>(), N, V,
                                      Vp);
    if (!device_.computes()) return;  // meta: no loss to read (and no host copy of B x T losses)
    std::vector<float> host(N);
    copy_device_to_host(device_, host.data(), losses.data(), losses.nbytes());
    double sum = 0;
    for (float v : host) sum += v;
    loss = sum / static_cast<double>(N);
  });
  return loss;
}

// ---------------------------------------------------------------------------------------------
// backward
// ---------------------------------------------------------------------------------------------

void GPT::head_backward(float dloss) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim, V = config_.vocab, Vp = padded_vocab(V);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::size_t lnf = ParameterTable(config_).lnf_weight();

    // dlogits overwrites the logits (they are not needed any more): no second [B,T,Vp] tensor.
    // The padded columns' dlogits are 0, so wte's padding rows get a gradient of exactly 0.
    kernels::cross_entropy_backward<T>(s, logits_.data_as<T>(), logits_.data_as<T>(), targets_->data_as<std::int32_t>(),
                                       dloss, N, V, Vp);
    Tensor dlnf = make({B, Tn, Ci}, MemoryCategory::workspace, "lnf.grad");
    linear_backward(&dlnf, grad_for_write(kWte), nullptr, logits_, lnf_, params_[kWte].value, N, C, Vp);
    logits_.reset();
    // The residual stream's gradient starts here and flows down through every layer.
    dresidual_ = make({B, Tn, Ci}, MemoryCategory::workspace, "residual.grad");
    zero_device_memory(device_, dresidual_.data(), dresidual_.nbytes());
    Tensor workspace = make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), "lnf.backward.workspace");
    kernels::layernorm_backward<T>(s, dresidual_.data_as<T>(), grad_for_write(lnf).data_as<T>(),
                                   grad_for_write(lnf + 1).data_as<T>(), dlnf.data_as<T>(),
                                   residual_[config_.layers].data_as<T>(), params_[lnf].value.data_as<T>(),
                                   f(lnf_mean_), f(lnf_rstd_), workspace.data(), N, C);
    workspace.reset();
    lnf_.reset();
    lnf_mean_.reset();
    lnf_rstd_.reset();
    residual_[config_.layers].reset();
  });
}

void GPT::layer_backward(std::size_t l) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    if (!acts_[l].present())
      throw std::logic_error("GPT::layer_backward(" + std::to_string(l) + "): the layer's activations are gone; "
                             "a recompute strategy must call layer_forward first");
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
    const std::string h = indexed("h", static_cast<std::size_t>(l), ".");
    LayerActivations& a = acts_[l];
    Tensor& dres = dresidual_;  // d x_{l+1} on entry, d x_l on exit

    // Each saved tensor and each gradient buffer is freed as soon as the backward has read it for
    // the last time, before the next buffer is allocated (as PyTorch's autograd releases a node's
    // saved tensors once the node has run): the layer's backward never holds what it is done with.
    // MLP branch: x_{l+1} = residual2 + fc_proj(gelu(fc(ln2(residual2))))
    {
      Tensor dfch = make({B, Tn, 4 * Ci}, MemoryCategory::workspace, h + "mlp.gelu.out.grad");
      linear_backward(&dfch, g(l, kFcProjW), &g(l, kFcProjB), dres, a.fch_gelu, p(l, kFcProjW), N, 4 * C, C);
      a.fch_gelu.reset();
      // in place: d gelu.out -> d fc.out
      kernels::gelu_backward<T>(s, dfch.data_as<T>(), a.fch.data_as<T>(), dfch.data_as<T>(), N * 4 * C);
      a.fch.reset();
      Tensor dln2 = make({B, Tn, Ci}, MemoryCategory::workspace, h + "ln2.grad");
      linear_backward(&dln2, g(l, kFcW), &g(l, kFcB), dfch, a.ln2, p(l, kFcW), N, C, 4 * C);
      dfch.reset();
      a.ln2.reset();
      // d residual2 = d x_{l+1} (skip path) + ln2's backward (accumulated into the same buffer)
      Tensor workspace =
          make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), h + "ln2.backward.workspace");
      kernels::layernorm_backward<T>(s, dres.data_as<T>(), g(l, kLn2W).data_as<T>(), g(l, kLn2B).data_as<T>(),
                                     dln2.data_as<T>(), a.residual2.data_as<T>(), p(l, kLn2W).data_as<T>(),
                                     f(a.ln2_mean), f(a.ln2_rstd), workspace.data(), N, C);
      workspace.reset();
      dln2.reset();
      a.residual2.reset();
      a.ln2_mean.reset();
      a.ln2_rstd.reset();
    }
    // Attention branch: residual2 = x_l + attn_proj(attention(qkv(ln1(x_l))))
    {
      Tensor datty = make({B, Tn, Ci}, MemoryCategory::workspace, h + "attn.out.grad");
      linear_backward(&datty, g(l, kAttProjW), &g(l, kAttProjB), dres, a.atty, p(l, kAttProjW), N, C, C);
      Tensor dqkv = make({B, Tn, 3 * Ci}, MemoryCategory::workspace, h + "qkv.grad");
      attention_backward(dqkv, datty, a, h);  // reads atty too (flash: O)
      datty.reset();
      a.atty.reset();
      a.att.reset();
      a.lse.reset();
      Tensor dln1 = make({B, Tn, Ci}, MemoryCategory::workspace, h + "ln1.grad");
      linear_backward(&dln1, g(l, kQkvW), &g(l, kQkvB), dqkv, a.ln1, p(l, kQkvW), N, C, 3 * C);
      dqkv.reset();
      a.qkv.reset();
      a.ln1.reset();
      Tensor workspace =
          make_cuda_workspace(kernels::layernorm_backward_workspace_bytes(N, C), h + "ln1.backward.workspace");
      kernels::layernorm_backward<T>(s, dres.data_as<T>(), g(l, kLn1W).data_as<T>(), g(l, kLn1B).data_as<T>(),
                                     dln1.data_as<T>(), residual_[l].data_as<T>(), p(l, kLn1W).data_as<T>(),
                                     f(a.ln1_mean), f(a.ln1_rstd), workspace.data(), N, C);
    }
    a = LayerActivations{};  // this layer's saved tensors are no longer needed,
    residual_[l].reset();    // nor its input (the embedding's backward needs only the tokens)
  });
}

void GPT::embed_backward() {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    Tensor workspace =
        make_cuda_workspace(kernels::embedding_backward_workspace_bytes(B_ * T_), "embedding.backward.workspace");
    kernels::embedding_backward<T>(kernel_stream(device_), grad_for_write(kWte).data_as<T>(),
                                   grad_for_write(kWpe).data_as<T>(), dresidual_.data_as<T>(),
                                   tokens_->data_as<std::int32_t>(), workspace.data(), B_, T_, config_.dim);
    workspace.reset();
    dresidual_.reset();
  });
}

void GPT::end() {
  for (LayerActivations& a : acts_) a = LayerActivations{};
  residual_.clear();
  lnf_.reset();
  lnf_mean_.reset();
  lnf_rstd_.reset();
  logits_.reset();
  dresidual_.reset();
  tokens_ = targets_ = nullptr;
}

void GPT::release_layer_activations(std::size_t layer) { acts_[layer] = LayerActivations{}; }

void GPT::release_selective(std::size_t layer) {
  acts_[layer].att.reset();
  acts_[layer].fch_gelu.reset();
}

void GPT::recompute_selective(std::size_t l) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim, NH = config_.heads;
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C),
               H = static_cast<std::int64_t>(NH);
    const std::string h = indexed("h", l, ".");
    LayerActivations& a = acts_[l];
    if (options_.attention == AttentionKind::naive) {
      a.att = make({B, H, Tn, Tn}, MemoryCategory::activations, h + "attn.probs");
      // attention_forward also writes the scores and the output; both are already known: workspace.
      Tensor preatt = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores");
      Tensor atty = make({B, Tn, Ci}, MemoryCategory::workspace, h + "attn.out.recomputed");
      kernels::attention_forward<T>(s, atty.data_as<T>(), preatt.data_as<T>(), a.att.data_as<T>(), a.qkv.data_as<T>(),
                                    B_, T_, C, NH, NH);  // K/V heads = H (qkv is [B, T, 3C])
    }
    a.fch_gelu = make({B, Tn, 4 * Ci}, MemoryCategory::activations, h + "mlp.gelu.out");
    kernels::gelu_forward<T>(s, a.fch_gelu.data_as<T>(), a.fch.data_as<T>(), N * 4 * C);
  });
}

double GPT::loss(const Tensor& tokens, const Tensor& targets) {
  begin(tokens, targets);
  embed_forward();
  for (std::size_t l = 0; l < config_.layers; ++l) {
    layer_forward(l);
    release_layer_activations(l);
    residual_[l].reset();
  }
  const double value = head_forward();
  end();
  return value;
}

// ---------------------------------------------------------------------------------------------
// host copies
// ---------------------------------------------------------------------------------------------

// Concatenates one member (value or grad) of every parameter into a host vector, widened to fp32.
static std::vector<float> gather(Device& device, DType dtype, const std::vector<Parameter>& params,
                                 Tensor Parameter::*member, std::size_t total) {
  std::vector<float> out(total);
  with_storage_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> stored;
    std::size_t offset = 0;
    for (const Parameter& p : params) {
      const Tensor& t = p.*member;
      const auto n = static_cast<std::size_t>(t.numel());
      stored.resize(n);
      copy_device_to_host(device, stored.data(), t.data(), n * sizeof(T));
      for (std::size_t i = 0; i < n; ++i) out[offset + i] = kernels::load(stored[i]);  // exact
      offset += n;
    }
  });
  return out;
}

std::vector<float> GPT::parameter_values() const {
  return gather(device_, dtype_, params_, &Parameter::value, num_parameters());
}

std::vector<float> GPT::gradient_values() const {
  return gather(device_, dtype_, params_, &Parameter::grad, num_parameters());
}

void GPT::set_parameter_values(const std::vector<float>& values) {
  if (values.size() != num_parameters()) throw std::invalid_argument("set_parameter_values: wrong number of values");
  store_parameter_values(values.data());
}

void GPT::store_parameter_values(const float* values) {
  if (values == nullptr) return;  // meta: no values
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> stored;
    std::size_t offset = 0;
    for (Parameter& p : params_) {
      const auto n = static_cast<std::size_t>(p.value.numel());
      stored.resize(n);
      for (std::size_t i = 0; i < n; ++i) stored[i] = kernels::store<T>(values[offset + i]);  // rounded once (RNE)
      copy_host_to_device(device_, p.value.data(), stored.data(), n * sizeof(T));
      offset += n;
    }
  });
}

}  // namespace trainmem
