// A decoder-only transformer, forward and backward written by hand, layer by layer: what both
// model families (model_config.h) share. Each family writes its own blocks (gpt.h, llama.h); the
// trainer, the optimizer and every technique see only this interface.
//
//   x0      = wte[tokens] (+ wpe[t], GPT's position table)     (embed_forward)
//   layer l: x_{l+1} = block_l(x_l)                            (family: layer_forward)
//   logits  = final_norm(x_L) @ head^T                         (Vp columns; GPT's head is wte)
//   loss    = mean over the B*T positions of cross-entropy(logits[:, :V], targets)
//
// The head's rows are Vp = padded_vocab(V) (a multiple of 64, for the GPU's GEMM kernels;
// model_config.h): the logits are [B,T,Vp] and the cross-entropy ignores the Vp - V padded columns
// (no probability, a gradient of exactly 0), so the padding rows stay zero and the loss is the
// unpadded one.
//
// --precision bf16|fp16 stores weights, weight gradients, activations and activation gradients
// in 16 bits (common/model/precision.h); the kernels read and write 16 bits and compute in fp32
// inside (kernels/dtype.h), so no fp32 copy of a 16-bit tensor is ever allocated. The fp32 master
// weights belong to the optimizer.
//
// Every tensor lives in the device's caching allocator under a category: weights `parameters`,
// their gradients `gradients`, tensors saved in forward for backward `activations`, and tensors
// that live only inside one op or one backward step (activation gradients, attention scores,
// scratch) `workspace`. A layer's activations are a struct of named tensors, created by its
// forward and freed by its backward, so a strategy can drop them after forward and recompute them
// before backward (activation checkpointing) without the model knowing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/device/device.h"
#include "common/model/attention_kind.h"
#include "common/model/model_config.h"
#include "common/model/parameter_table.h"
#include "common/model/precision.h"
#include "common/tensor/tensor.h"
#include "kernels/flash_attention.h"
#include "kernels/fused_attention.h"

namespace trainmem {

// One parameter tensor and its gradient, e.g. "h3.attn.qkv.weight" [3C, C].
struct Parameter {
  std::string name;
  std::vector<std::int64_t> shape;  // the value's, also while it is on the host
  Tensor value;
  Tensor grad;
  // ModelOptions::values_on_host: the value, in the storage type, until a sharding engine takes it
  // (common/sharding/flat_unit.h); empty otherwise, and always on the meta device.
  std::vector<std::byte> host_value;
  std::size_t numel() const {
    std::size_t n = 1;
    for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

// How the model is stored and computed (the techniques that change the model itself).
struct ModelOptions {
  Precision precision = Precision::fp32;
  AttentionKind attention = AttentionKind::naive;
  // For a sharded run: the parameters' values are made in host memory and no gradients at all,
  // for a sharding engine to take into its units (Parameter::host_value), as deepspeed.zero.Init
  // and FSDP's meta-device init build the model: the whole model is never on the device (a 70B
  // model could not be). Until an engine has taken them, the model cannot run.
  bool values_on_host = false;
};

// What attention saves for its backward, in either family (B*T rows unless noted).
struct AttentionActivations {
  Tensor qkv;   // [B,T,(H+2Hkv)D]: q, k, v heads (kernels/attention_heads.h); Llama's q, k rotated
  Tensor att;   // softmax probabilities [B,H,T,T] (naive attention only)
  Tensor lse;   // log-sum-exp per query row [B,H,T], fp32 (flash, cudnn only)
  Tensor atty;  // attention output before the projection [B,T,C]
};

// The head's saved tensors: the final norm's output and statistics, and the logits.
struct HeadActivations {
  Tensor norm;        // [B,T,C]
  Tensor norm_mean;   // [B,T] fp32 (GPT's layernorm only)
  Tensor norm_rstd;   // [B,T] fp32
  Tensor logits;      // [B,T,Vp]; their gradient after a training forward (head_forward(dloss))
  bool logits_are_gradient = false;
};

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  DType dtype() const { return dtype_; }  // of weights, gradients and activations
  Device& device() { return device_; }
  std::vector<Parameter>& parameters() { return params_; }
  std::size_t num_parameters() const { return config_.num_parameters(); }

  // --- one training micro-step, in the order the trainer calls the pieces
  // tokens and targets: int32 [B, T] on the device (category data), T <= config.seq.
  void begin(const Tensor& tokens, const Tensor& targets);
  void embed_forward();
  void layer_forward(std::size_t layer) { forward_layer(layer, /*produce_output=*/true); }
  // The mean loss (copied to the host). Training passes dloss, the scale of each position's loss
  // (1/(B*T*accum_steps), times the loss scale): the cross-entropy then also writes the logits'
  // gradient over them (kernels/cross_entropy.h: one pass), which head_backward takes from there.
  double head_forward(std::optional<float> dloss = std::nullopt);
  void head_backward();  // after head_forward(dloss)
  virtual void layer_backward(std::size_t layer) = 0;
  void embed_backward();
  void end();                         // frees what is left of this micro-step (the residual stream)

  // For strategies that trade memory for compute:
  virtual void release_layer_activations(std::size_t layer) = 0;  // keeps x_layer, the layer's input
  // Makes the layer's saved tensors again from x_layer (the same kernels in the same order, so
  // bit-identical); x_{layer+1} only when asked (segment recompute needs it as the next input).
  void recompute_layer(std::size_t layer, bool remake_output = false) { forward_layer(layer, remake_output); }
  // Drops x_layer, the layer's input, after its forward (sqrt checkpointing keeps it only for
  // the first layer of each segment); recompute_layer(layer - 1, true) makes it again.
  void release_layer_input(std::size_t layer) { residual_[layer].reset(); }
  // Selective recompute (Korthikanti et al. 2022): drops only the tensors that are large and cheap
  // to rebuild from the kept ones -- the attention probabilities (B*H*T^2) and the MLP's
  // nonlinearity output (GPT's GELU 4BTC, Llama's SwiGLU BTF); recompute_selective rebuilds them
  // with the same kernels. (With flash or cudnn attention there are no probabilities to drop.)
  virtual void release_selective(std::size_t layer) = 0;
  virtual void recompute_selective(std::size_t layer) = 0;

  void zero_grad();
  // Gradients on demand (suites/gradient_memory): release_gradients() frees every gradient
  // (PyTorch's zero_grad(set_to_none=True)); the backward then makes each one again, zeroed, at
  // its first write (grad_for_write), as autograd allocates .grad at its first accumulation.
  void release_gradients();
  Tensor& grad_for_write(std::size_t index);
  // Evaluation helper: forward only, returns the mean loss and frees everything it made.
  double loss(const Tensor& tokens, const Tensor& targets);

  // Host copies of all parameter values / gradients (widened to fp32), concatenated in
  // parameters() order. set_parameter_values rounds to the storage type; with 16-bit storage it
  // must be called before an optimizer copies the weights into its fp32 master weights.
  std::vector<float> parameter_values() const;
  std::vector<float> gradient_values() const;
  void set_parameter_values(const std::vector<float>& values);

 protected:
  // Allocates and initializes the parameters the table lists (GPT-2's init, for both families:
  // N(0, 0.02), residual projections scaled by 1/sqrt(2L), biases 0, norm weights 1; drawn in
  // fp32 and rounded to the storage type) and zeroed gradients.
  Model(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options);

  // The family's layer: saves its activations, and writes x_{l+1} when produce_output.
  virtual void forward_layer(std::size_t layer, bool produce_output) = 0;
  // The family's final norm: head_.norm (and its statistics) from x_L; backward accumulates
  // into dresidual_ from dnorm, the norm output's gradient. Parameters: the head's weight row count
  // is Vp; head_weight_index() is the head's parameter (GPT: wte, tied).
  virtual void final_norm_forward() = 0;
  virtual void final_norm_backward(const Tensor& dnorm) = 0;
  virtual std::size_t head_weight_index() const = 0;
  // The family's table of learned positions (GPT's wpe), added to the token's row; none for Llama,
  // whose positions enter through RoPE in every layer.
  virtual std::optional<std::size_t> position_table_index() const { return std::nullopt; }
  // A loss the family adds to the cross-entropy (a mixture of experts' load-balancing loss), its
  // value; with dloss (training), it also readies its gradient for the layers' backward. None: 0.
  virtual double auxiliary_loss(std::optional<float> /*dloss*/) { return 0; }

  // A tensor in the model's storage type (f32 only where stated: norm statistics, losses).
  Tensor make(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name);
  Tensor make_f32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name);
  Tensor make_i32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name);  // indices
  Tensor make_bytes(std::size_t bytes, const std::string& name);  // workspace for a library
  // Scratch a CUDA kernel asks of its caller (a host formula beside the kernel), made on the CUDA
  // pattern only (a named rule of Device::cuda_pattern; the CPU kernels need none): empty elsewhere.
  Tensor make_cuda_workspace(std::size_t bytes, const std::string& name);
  // The linear layer (kernels/matmul.h) in the storage type: tensor cores in 16 bits on a GPU.
  // bias and dbias may be null (Llama has none).
  void linear_forward(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor* bias, std::size_t N,
                      std::size_t C, std::size_t OC);
  void linear_backward(Tensor* dinp, Tensor& dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, std::size_t N, std::size_t C, std::size_t OC);
  // Attention of one layer: a.atty from a.qkv, saving what its backward needs (a.att or a.lse),
  // with the config's H query heads and Hkv K/V heads (grouped-query attention when Hkv < H).
  void attention_forward(AttentionActivations& a, const std::string& h);
  // Selective recompute: a.att again from a.qkv (naive attention; nothing to do otherwise).
  void attention_recompute_probabilities(AttentionActivations& a, const std::string& h);
  // dqkv written from d(attention output).
  void attention_backward(Tensor& dqkv, const Tensor& datty, AttentionActivations& a, const std::string& h);
  std::size_t qkv_dim() const { return (config_.heads + 2 * config_.num_kv_heads()) * config_.head_dim(); }

  Tensor& param(std::size_t index) { return params_[index].value; }
  static float* f32(Tensor& t) { return t.data_as<float>(); }  // fp32-only tensors (norm statistics, losses)
  static std::int32_t* i32(Tensor& t) { return t.data_as<std::int32_t>(); }  // int32 tensors (indices)

  Device& device_;
  ModelConfig config_;
  ParameterTable table_;  // config_'s parameters: names, shapes, indices (parameter_table.h)
  ModelOptions options_;
  DType dtype_;
  std::vector<Parameter> params_;  // in parameter_table.h's order

  // This micro-step
  std::size_t B_ = 0, T_ = 0;
  const Tensor* tokens_ = nullptr;
  const Tensor* targets_ = nullptr;
  std::vector<Tensor> residual_;  // x_0 .. x_L: the residual stream, each layer's input
  HeadActivations head_;
  Tensor dresidual_;              // gradient of the residual stream [B,T,C]

 private:
  kernels::AttentionShape attention_shape() const;
  kernels::FusedAttentionKernel fused_kernel() const;  // flash or cudnn (kernels/fused_attention.h)
  template <typename T>
  Tensor attention_workspace(const kernels::Stream& s, bool backward, const kernels::AttentionShape& shape,
                             const std::string& h);
  // `values`: num_parameters() floats in parameter order, rounded to the storage type (nullptr on
  // the meta device: nothing to store).
  void store_parameter_values(const float* values);
};

// "h3." for layer 3's tensors, "x4" for the residual stream entering layer 4.
std::string indexed_name(const char* prefix, std::size_t index, const char* suffix = "");

// The model of config.arch (gpt.h or llama.h).
std::unique_ptr<Model> make_model(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

}  // namespace trainmem
