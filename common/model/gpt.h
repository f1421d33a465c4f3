// A GPT-2-style decoder, forward and backward written by hand, layer by layer.
//
//   x0      = wte[tokens] + wpe                                   (embedding)
//   layer l: a = x_l + attn_proj(attention(qkv(ln1(x_l))))        (residual 2)
//            x_{l+1} = a + fc_proj(gelu(fc(ln2(a))))              (residual 3)
//   logits  = lnf(x_L) @ wte^T                                    (tied LM head, Vp columns)
//   loss    = mean over the B*T positions of cross-entropy(logits[:, :V], targets)
//
// wte has Vp = padded_vocab(V) rows (a multiple of 64, for the GPU's GEMM kernels; model_config.h):
// the logits are [B,T,Vp] and the cross-entropy ignores the Vp - V padded columns (no probability,
// a gradient of exactly 0), so the padding rows of wte stay zero and the loss is the unpadded one.
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
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/device/device.h"
#include "common/model/attention_kind.h"
#include "common/model/model_config.h"
#include "common/model/parameter_table.h"
#include "common/model/precision.h"
#include "common/tensor/tensor.h"
#include "kernels/flash_attention.h"

namespace trainmem {

// One parameter tensor and its gradient, e.g. "h3.attn.qkv.weight" [3C, C].
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
};

// What one layer's forward saves for its backward (B*T rows of C channels unless noted).
struct LayerActivations {
  Tensor ln1, ln1_mean, ln1_rstd;  // ln1 output [B,T,C]; mean, rstd [B,T]
  Tensor qkv;                      // [B,T,3C]
  Tensor att;                      // softmax probabilities [B,NH,T,T] (naive attention only)
  Tensor lse;                      // log-sum-exp per query row [B,NH,T], fp32 (flash, cudnn only)
  Tensor atty;                     // attention output before the projection [B,T,C]
  Tensor residual2;                // x_l + attention branch [B,T,C]
  Tensor ln2, ln2_mean, ln2_rstd;  // [B,T,C]; [B,T]; [B,T]
  Tensor fch;                      // fc output, GELU input [B,T,4C]
  Tensor fch_gelu;                 // GELU output [B,T,4C]
  bool present() const { return qkv.data() != nullptr; }
};

// How the model is stored and computed (the techniques that change the model itself).
struct ModelOptions {
  Precision precision = Precision::fp32;
  AttentionKind attention = AttentionKind::naive;
};

class GPT {
 public:
  // Allocates and initializes the parameters (GPT-2's init: N(0, 0.02), residual projections
  // scaled by 1/sqrt(2L), biases 0, layernorm weights 1; drawn in fp32 and rounded to the
  // storage type) and zeroed gradients.
  GPT(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options = {});

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
  void layer_forward(std::size_t layer);
  double head_forward();              // the mean loss (copied to the host)
  void head_backward(float dloss);    // dloss: scale of each position's loss, 1/(B*T*accum_steps)
  void layer_backward(std::size_t layer);
  void embed_backward();
  void end();                         // frees what is left of this micro-step (the residual stream)

  // For strategies that trade memory for compute:
  void release_layer_activations(std::size_t layer);  // keeps x_layer, the layer's input
  // Makes the layer's saved tensors again from x_layer (the same kernels in the same order, so
  // bit-identical); x_{layer+1} only when asked (segment recompute needs it as the next input).
  void recompute_layer(std::size_t layer, bool remake_output = false);
  // Drops x_layer, the layer's input, after its forward (sqrt checkpointing keeps it only for
  // the first layer of each segment); recompute_layer(layer - 1, true) makes it again.
  void release_layer_input(std::size_t layer) { residual_[layer].reset(); }
  // Selective recompute (Korthikanti et al. 2022): drops only the attention probabilities
  // (B*H*T^2) and the GELU output (4BTC), which are large and cheap to rebuild from the kept qkv
  // and fc output; recompute_selective rebuilds them with the same kernels. (With flash or cudnn
  // attention there are no probabilities to drop: only the GELU output goes.)
  void release_selective(std::size_t layer);
  void recompute_selective(std::size_t layer);
  const LayerActivations& layer_activations(std::size_t layer) const { return acts_[layer]; }

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

 private:
  // `values`: num_parameters() floats in parameter order, rounded to the storage type (nullptr on
  // the meta device: nothing to store).
  void store_parameter_values(const float* values);
  void forward_layer(std::size_t layer, bool produce_output);
  // Attention of one layer: atty from qkv, saving what its backward needs (att or lse).
  void attention_forward(LayerActivations& a, const std::string& h);
  void attention_backward(Tensor& dqkv, const Tensor& datty, LayerActivations& a, const std::string& h);
  kernels::AttentionShape attention_shape() const;
  kernels::Half16 half16() const;  // the 16-bit storage type, for the CUDA kernels that take one  // of the current micro-batch (causal)
  Tensor make_bytes(std::size_t bytes, const std::string& name);  // workspace for a library
  // Scratch a CUDA kernel asks of its caller (a host formula beside the kernel), made on the CUDA
  // pattern only (a named rule of Device::cuda_pattern; the CPU kernels need none): empty elsewhere.
  Tensor make_cuda_workspace(std::size_t bytes, const std::string& name);
  // A tensor in the model's storage type (f32 only where stated: layernorm statistics, losses).
  Tensor make(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name);
  Tensor make_f32(std::vector<std::int64_t> shape, MemoryCategory category, const std::string& name);
  // The linear layer (kernels/matmul.h) in the storage type: tensor cores in 16 bits on a GPU.
  void linear_forward(Tensor& y, const Tensor& x, const Tensor& weight, const Tensor* bias, std::size_t N,
                      std::size_t C, std::size_t OC);
  void linear_backward(Tensor* dinp, Tensor& dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                       const Tensor& weight, std::size_t N, std::size_t C, std::size_t OC);
  Tensor& p(std::size_t layer, LayerParameter which) { return params_[ParameterTable::index(layer, which)].value; }
  Tensor& g(std::size_t layer, LayerParameter which) { return grad_for_write(ParameterTable::index(layer, which)); }

  Device& device_;
  ModelConfig config_;
  ModelOptions options_;
  DType dtype_;
  std::vector<Parameter> params_;  // in parameter_table.h's order

  // This micro-step
  std::size_t B_ = 0, T_ = 0;
  const Tensor* tokens_ = nullptr;
  const Tensor* targets_ = nullptr;
  std::vector<Tensor> residual_;  // x_0 .. x_L: the residual stream, each layer's input
  std::vector<LayerActivations> acts_;
  Tensor lnf_, lnf_mean_, lnf_rstd_, logits_;  // head activations
  Tensor dresidual_;                           // gradient of the residual stream [B,T,C]
};

}  // namespace trainmem
