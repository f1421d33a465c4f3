#include "common/model/model.h"

#include <cmath>
#include <random>

#include "common/device/device_ops.h"
#include "common/model/storage_type.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/dtype.h"
#include "kernels/embedding.h"
#include "kernels/fused_attention.h"
#include "kernels/matmul.h"

namespace trainmem {

// Each op runs in the model's storage type T -- float, kernels::bf16 or kernels::fp16
// (with_storage_type, common/model/storage_type.h) -- and names it to the kernels, which read and
// write that type and compute in fp32 inside: no fp32 copy of a 16-bit tensor is ever made.

// Built with +=: GCC 12 warns falsely about "h" + std::to_string(l) + ".".
std::string indexed_name(const char* prefix, std::size_t index, const char* suffix) {
  std::string s = prefix;
  s += std::to_string(index);
  s += suffix;
  return s;
}

Tensor Model::make(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name) {
  return Tensor(device_.allocator(), std::move(shape), dtype_, category, name);
}

Tensor Model::make_f32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name) {
  return Tensor(device_.allocator(), std::move(shape), DType::f32, category, name);
}

Tensor Model::make_i32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name) {
  return Tensor(device_.allocator(), std::move(shape), DType::i32, category, name);
}

Tensor Model::make_bytes(std::size_t bytes, const std::string& name) {
  // Scratch of a byte size, as 4-byte elements (the allocator sees the bytes, rounded up to 512 anyway).
  return Tensor(device_.allocator(), {static_cast<std::int64_t>((bytes + 3) / 4)}, DType::i32,
                MemoryCategory::workspace, name);
}

Tensor Model::make_cuda_workspace(std::size_t bytes, const std::string& name) {
  return device_.cuda_pattern() ? make_bytes(bytes, name) : Tensor{};
}

// The config, checked before anything is built from it (the parameter table divides by its heads).
static ModelConfig validated(ModelConfig config) {
  config.validate();
  return config;
}

Model::Model(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options)
    : device_(device), config_(validated(std::move(config))), table_(config_), options_(options),
      dtype_(storage_dtype(options.precision)) {
  check_attention_runs(options_.attention, device_.cuda_pattern(), dtype_ != DType::f32);
  const auto L = static_cast<float>(config_.layers);
  std::mt19937_64 rng(seed);
  std::vector<float> all_values;
  const float residual_std = 0.02f / std::sqrt(2.0f * L);
  for (const ParameterInfo& s : table_.all()) {
    Parameter p{s.name, s.shape, Tensor(), Tensor(), {}};
    if (!options_.values_on_host) p.value = make(s.shape, MemoryCategory::parameters, s.name);
    if (device_.computes()) {  // meta: no values to draw (a 1.5B model's would be 6 GB of host memory)
      std::vector<float> host(s.numel());  // zeros
      std::normal_distribution<float> normal(0.0f, s.init == ParameterInit::residual ? residual_std : 0.02f);
      // The vocabulary's padding rows stay zero (and draw nothing: the real rows get the same values
      // as in an unpadded model).
      const std::size_t drawn = host.size() - static_cast<std::size_t>(s.padding_rows) * (host.size() / static_cast<std::size_t>(s.shape[0]));
      for (std::size_t i = 0; i < drawn; ++i)
        host[i] = s.init == ParameterInit::ones ? 1.0f : s.init == ParameterInit::zeros ? 0.0f : normal(rng);
      all_values.insert(all_values.end(), host.begin(), host.end());
    }
    params_.push_back(std::move(p));
    // zeroed, right after its value (persistent gradients); a sharding engine makes its own
    if (!options_.values_on_host) grad_for_write(params_.size() - 1);
  }
  store_parameter_values(device_.computes() ? all_values.data() : nullptr);  // rounds to the storage type
}

void Model::zero_grad() {
  // A sharding strategy (ZeRO-2/3, FSDP) may have released a gradient: nothing to zero then.
  for (Parameter& p : params_)
    if (p.grad.data() != nullptr) zero_device_memory(device_, p.grad.data(), p.grad.nbytes());
}

void Model::release_gradients() {
  for (Parameter& p : params_) p.grad.reset();
}

Tensor& Model::grad_for_write(std::size_t index) {
  Parameter& p = params_[index];
  if (p.grad.data() == nullptr) {  // none since the last release: made now, at its first write
    p.grad = make(p.value.shape(), MemoryCategory::gradients, p.name + ".grad");
    zero_device_memory(device_, p.grad.data(), p.grad.nbytes());  // the backward accumulates into it
  }
  return p.grad;
}

// ---------------------------------------------------------------------------------------------
// the micro-step
// ---------------------------------------------------------------------------------------------

void Model::begin(const Tensor& tokens, const Tensor& targets) {
  if (tokens.shape().size() != 2 || tokens.shape() != targets.shape())
    throw std::invalid_argument("Model::begin: tokens and targets must both be [B, T]");
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

void Model::end() {
  for (std::size_t l = 0; l < config_.layers; ++l) release_layer_activations(l);
  residual_.clear();
  head_ = HeadActivations{};
  dresidual_.reset();
  tokens_ = targets_ = nullptr;
}

double Model::loss(const Tensor& tokens, const Tensor& targets) {
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

// x0 = wte[tokens] (+ wpe[t] where the family has a position table; kernels/embedding.h).
void Model::embed_forward() {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               C = static_cast<std::int64_t>(config_.dim);
    const std::optional<std::size_t> wpe = position_table_index();
    residual_[0] = make({B, Tn, C}, MemoryCategory::activations, "x0");
    kernels::embedding_forward<T>(kernel_stream(device_), residual_[0].data_as<T>(), tokens_->data_as<std::int32_t>(),
                                  param(ParameterTable::kWte).data_as<T>(), wpe ? param(*wpe).data_as<T>() : nullptr,
                                  B_, T_, config_.dim);
  });
}

void Model::embed_backward() {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const std::optional<std::size_t> wpe = position_table_index();
    Tensor workspace =
        make_cuda_workspace(kernels::embedding_backward_workspace_bytes(B_ * T_), "embedding.backward.workspace");
    kernels::embedding_backward<T>(kernel_stream(device_), grad_for_write(ParameterTable::kWte).data_as<T>(),
                                   wpe ? grad_for_write(*wpe).data_as<T>() : nullptr, dresidual_.data_as<T>(),
                                   tokens_->data_as<std::int32_t>(), workspace.data(), B_, T_, config_.dim);
    workspace.reset();
    dresidual_.reset();
  });
}

// logits = final_norm(x_L) @ head^T, then the per-position cross-entropy, averaged on the host (and in
// training its gradient, over the logits).
double Model::head_forward(std::optional<float> dloss) {
  double loss = 0;
  final_norm_forward();
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const std::size_t N = B_ * T_, C = config_.dim, V = config_.vocab, Vp = padded_vocab(V);
    // Vp logits a row (the padded head: model_config.h); the cross-entropy reads the first V.
    head_.logits = make({static_cast<std::int64_t>(B_), static_cast<std::int64_t>(T_), static_cast<std::int64_t>(Vp)},
                        MemoryCategory::activations, "logits");
    linear_forward(head_.logits, head_.norm, param(head_weight_index()), nullptr, N, C, Vp);
    Tensor losses = make_f32({static_cast<std::int64_t>(B_), static_cast<std::int64_t>(T_)}, MemoryCategory::workspace,
                             "losses");
    if (dloss) {
      // dlogits overwrite the logits (they are not needed any more): no second [B,T,Vp] tensor. The
      // padded columns' dlogits are 0, so the head's padding rows get a gradient of exactly 0.
      kernels::cross_entropy_forward_backward<T>(s, f32(losses), head_.logits.data_as<T>(), head_.logits.data_as<T>(),
                                                 targets_->data_as<std::int32_t>(), *dloss, N, V, Vp);
      head_.logits_are_gradient = true;
    } else {
      kernels::cross_entropy_forward<T>(s, f32(losses), head_.logits.data_as<T>(), targets_->data_as<std::int32_t>(),
                                        N, V, Vp);
    }
    if (!device_.computes()) return;  // meta: no loss to read (and no host copy of B x T losses)
    std::vector<float> host(N);
    copy_device_to_host(device_, host.data(), losses.data(), losses.nbytes());
    double sum = 0;
    for (float v : host) sum += v;
    loss = sum / static_cast<double>(N);
  });
  return loss + auxiliary_loss(dloss);  // (a mixture of experts' load-balancing loss; 0 for the others)
}

void Model::head_backward() {
  if (!head_.logits_are_gradient)
    throw std::logic_error("Model::head_backward: the forward made no gradient (call head_forward(dloss))");
  const std::size_t N = B_ * T_, C = config_.dim, Vp = padded_vocab(config_.vocab);
  const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_), Ci = static_cast<std::int64_t>(C);
  Tensor dnorm = make({B, Tn, Ci}, MemoryCategory::workspace, head_.norm.name() + ".grad");  // lnf.grad, norm.grad
  const std::size_t head = head_weight_index();
  linear_backward(&dnorm, grad_for_write(head), nullptr, head_.logits, head_.norm, param(head), N, C, Vp);
  head_.logits.reset();
  // The residual stream's gradient starts here and flows down through every layer.
  dresidual_ = make({B, Tn, Ci}, MemoryCategory::workspace, "residual.grad");
  zero_device_memory(device_, dresidual_.data(), dresidual_.nbytes());
  final_norm_backward(dnorm);
  head_ = HeadActivations{};
  residual_[config_.layers].reset();
}

// ---------------------------------------------------------------------------------------------
// shared ops
// ---------------------------------------------------------------------------------------------

// The linear layer (kernels/matmul.h) in the storage type: fp32 accumulation inside; on a GPU, 16
// bits go to the tensor cores (cuBLASLt).
void Model::linear_forward(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor* bias, std::size_t N,
                           std::size_t C, std::size_t OC) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    kernels::matmul_forward<T>(kernel_stream(device_), y.data_as<T>(), x.data_as<T>(), weight.data_as<T>(),
                               bias ? bias->data_as<T>() : nullptr, N, C, OC);
  });
}

void Model::linear_backward(Tensor* dinp, Tensor& dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                            const Tensor& weight, std::size_t N, std::size_t C, std::size_t OC) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    kernels::matmul_backward<T>(kernel_stream(device_), dinp ? dinp->data_as<T>() : nullptr, dweight.data_as<T>(),
                                dbias ? dbias->data_as<T>() : nullptr, dout.data_as<T>(), inp.data_as<T>(),
                                weight.data_as<T>(), N, C, OC);
  });
}

kernels::AttentionShape Model::attention_shape() const {
  kernels::AttentionShape shape;
  shape.B = B_;
  shape.T = T_;
  shape.H = config_.heads;
  shape.Hkv = config_.num_kv_heads();  // = H for a GPT: multi-head attention (kernels/attention_heads.h)
  shape.D = config_.head_dim();
  shape.causal = true;
  return shape;
}

// The O(T)-memory kernel the model's attention kind names (kernels/fused_attention.h).
kernels::FusedAttentionKernel Model::fused_kernel() const {
  return options_.attention == AttentionKind::cudnn ? kernels::FusedAttentionKernel::cudnn
                                                    : kernels::FusedAttentionKernel::flash;
}

// The workspace a flash or cuDNN call takes where it runs (kernels/fused_attention.h), allocated
// so that the allocator sees it; none where it takes none.
template <typename T>
Tensor Model::attention_workspace(const kernels::Stream& s, bool backward, const kernels::AttentionShape& shape,
                                  const std::string& h) {
  const std::size_t bytes =
      kernels::fused_attention_workspace_bytes<T>(s, device_.cuda_pattern(), fused_kernel(), backward, shape);
  if (bytes == 0) return Tensor{};
  const char* name = fused_kernel() == kernels::FusedAttentionKernel::cudnn ? "attn.cudnn.workspace" : "attn.flash.workspace";
  return make_bytes(bytes, h + name);
}

// naive: out, scores (workspace) and probabilities (saved) -- kernels/attention.h.
// flash / cudnn: out and the log-sum-exp per row (saved, fp32) -- kernels/flash_attention.h.
void Model::attention_forward(AttentionActivations& a, const std::string& h) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               HD = static_cast<std::int64_t>(config_.attention_dim()), H = static_cast<std::int64_t>(config_.heads);
    if (options_.attention == AttentionKind::naive) {
      a.att = make({B, H, Tn, Tn}, MemoryCategory::activations, h + "attn.probs");
      a.atty = make({B, Tn, HD}, MemoryCategory::activations, h + "attn.out");
      // The scores are needed only to compute the probabilities: workspace, freed at once.
      Tensor preatt = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores");
      kernels::attention_forward<T>(s, a.atty.data_as<T>(), preatt.data_as<T>(), a.att.data_as<T>(), a.qkv.data_as<T>(),
                                    B_, T_, config_.attention_dim(), config_.heads, config_.num_kv_heads());
      return;
    }
    a.atty = make({B, Tn, HD}, MemoryCategory::activations, h + "attn.out");
    a.lse = make_f32({B, H, Tn}, MemoryCategory::activations, h + "attn.lse");
    const kernels::AttentionShape shape = attention_shape();
    Tensor workspace = attention_workspace<T>(s, false, shape, h);
    kernels::fused_attention_forward<T>(s, device_.cuda_pattern(), fused_kernel(), a.atty.data_as<T>(), f32(a.lse),
                                        a.qkv.data_as<T>(), workspace.data(), shape);
  });
}

void Model::attention_recompute_probabilities(AttentionActivations& a, const std::string& h) {
  if (options_.attention != AttentionKind::naive) return;  // flash/cudnn keep no probabilities
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               HD = static_cast<std::int64_t>(config_.attention_dim()), H = static_cast<std::int64_t>(config_.heads);
    a.att = make({B, H, Tn, Tn}, MemoryCategory::activations, h + "attn.probs");
    // attention_forward also writes the scores and the output; both are already known: workspace.
    Tensor preatt = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores");
    Tensor atty = make({B, Tn, HD}, MemoryCategory::workspace, h + "attn.out.recomputed");
    kernels::attention_forward<T>(kernel_stream(device_), atty.data_as<T>(), preatt.data_as<T>(), a.att.data_as<T>(),
                                  a.qkv.data_as<T>(), B_, T_, config_.attention_dim(), config_.heads, config_.num_kv_heads());
  });
}

void Model::attention_backward(Tensor& dqkv, const Tensor& datty, AttentionActivations& a, const std::string& h) {
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    const auto s = kernel_stream(device_);
    const auto B = static_cast<std::int64_t>(B_), Tn = static_cast<std::int64_t>(T_),
               H = static_cast<std::int64_t>(config_.heads);
    if (options_.attention == AttentionKind::naive) {
      // One B*H*T^2 buffer: the probabilities' gradient, then in place the scores' (kernels/attention.h)
      Tensor dscores = make({B, H, Tn, Tn}, MemoryCategory::workspace, h + "attn.scores.grad");
      kernels::attention_backward<T>(s, dqkv.data_as<T>(), dscores.data_as<T>(), datty.data_as<T>(), a.qkv.data_as<T>(),
                                     a.att.data_as<T>(), B_, T_, config_.attention_dim(), config_.heads, config_.num_kv_heads());
      return;
    }
    const kernels::AttentionShape shape = attention_shape();
    Tensor workspace = attention_workspace<T>(s, true, shape, h);
    kernels::fused_attention_backward<T>(s, device_.cuda_pattern(), fused_kernel(), dqkv.data_as<T>(), datty.data_as<T>(),
                                         a.qkv.data_as<T>(), a.atty.data_as<T>(), f32(a.lse), workspace.data(), shape);
  });
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

std::vector<float> Model::parameter_values() const {
  return gather(device_, dtype_, params_, &Parameter::value, num_parameters());
}

std::vector<float> Model::gradient_values() const {
  return gather(device_, dtype_, params_, &Parameter::grad, num_parameters());
}

void Model::set_parameter_values(const std::vector<float>& values) {
  if (values.size() != num_parameters()) throw std::invalid_argument("set_parameter_values: wrong number of values");
  store_parameter_values(values.data());
}

void Model::store_parameter_values(const float* values) {
  if (values == nullptr) return;  // meta: no values
  with_storage_type(dtype_, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> stored;
    std::size_t offset = 0;
    for (Parameter& p : params_) {
      const std::size_t n = p.numel();
      stored.resize(n);
      for (std::size_t i = 0; i < n; ++i) stored[i] = kernels::store<T>(values[offset + i]);  // rounded once (RNE)
      if (p.value.data() != nullptr) {
        copy_host_to_device(device_, p.value.data(), stored.data(), n * sizeof(T));
      } else {  // values_on_host, until a sharding engine takes it
        const auto* bytes = reinterpret_cast<const std::byte*>(stored.data());
        p.host_value.assign(bytes, bytes + n * sizeof(T));
      }
      offset += n;
    }
  });
}

}  // namespace trainmem
