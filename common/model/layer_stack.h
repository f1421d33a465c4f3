// A model as a stack of L layers of one family's block: what GPT (gpt.h) and Llama (llama.h) add
// to Model (model.h) in the same way, written once.
//
// It holds each layer's saved tensors as one struct (the family's Activations), names a layer's
// parameters by the family's enum (parameter_table.h: p(l, W::qkv_weight)), and does a layer's
// bookkeeping around the family's block:
//
//   layer_forward(l):  clear layer l's saved tensors, then block_forward (the family's)
//   layer_backward(l): refuse if they are gone (a recompute strategy's bug), block_backward (the
//                      family's), then free what is left of them and x_l, the layer's input
//
// and the last step of each residual branch, project_and_add. The family writes its block and
// what selective recompute drops; everything a layer allocates is allocated by the family's code,
// in the family's order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/device/device_ops.h"
#include "common/model/model.h"
#include "common/model/storage_type.h"
#include "kernels/residual.h"

namespace trainmem {

// Activations: what one layer's forward saves for its backward, an AttentionActivations with the
// family's own tensors beside, and release_mlp_nonlinearity(), which frees what selective recompute
// drops beside the probabilities. LayerParameterName: the family's enum of one layer's parameters
// (LayerParameter, LlamaLayerParameter).
template <typename Activations, typename LayerParameterName>
class LayerStack : public Model {
 public:
  void layer_backward(std::size_t layer) final {
    Activations& a = acts_[layer];
    if (a.qkv.data() == nullptr)  // qkv: saved by every family's forward, until its backward
      throw std::logic_error(family_ + "::layer_backward(" + std::to_string(layer) +
                             "): the layer's activations are gone; a recompute strategy must call layer_forward first");
    block_backward(layer, a);
    a = Activations{};         // this layer's saved tensors are no longer needed,
    residual_[layer].reset();  // nor its input (the embedding's backward needs only the tokens)
  }
  void release_layer_activations(std::size_t layer) final { acts_[layer] = Activations{}; }
  // Selective recompute (model.h): the attention probabilities and the MLP's nonlinearity output,
  // which the family frees (Activations::release_mlp_nonlinearity) and makes again (recompute_mlp_nonlinearity).
  void release_selective(std::size_t layer) final {
    acts_[layer].att.reset();
    acts_[layer].release_mlp_nonlinearity();
  }
  void recompute_selective(std::size_t layer) final {
    attention_recompute_probabilities(acts_[layer], indexed_name("h", layer, "."));
    recompute_mlp_nonlinearity(layer, acts_[layer]);
  }
  const Activations& layer_activations(std::size_t layer) const { return acts_[layer]; }

 protected:
  using W = LayerParameterName;  // a layer's parameters by name: p(l, W::qkv_weight)

  // `family` is the class's name in errors ("GPT"). A config of another arch is refused (once
  // Model has built its parameters from it).
  LayerStack(Device& device, ModelConfig config, std::uint64_t seed, ModelOptions options, Arch arch,
             std::string family)
      : Model(device, std::move(config), seed, options), family_(std::move(family)) {
    if (config_.arch != arch)
      throw std::invalid_argument(family_ + ": the config is a " + to_string(config_.arch) + " model");
    acts_.resize(config_.layers);
  }

  // The family's block forward from x_l (residual_[layer]): saves its tensors in `a` (empty on
  // entry), and writes x_{l+1} when produce_output.
  virtual void block_forward(std::size_t layer, Activations& a, bool produce_output) = 0;
  // The family's block backward: dresidual_ holds d x_{l+1} on entry and d x_l on exit. Each saved
  // tensor and each gradient buffer is freed as soon as it has been read for the last time, before
  // the next buffer is allocated (as PyTorch's autograd releases a node's saved tensors once the
  // node has run): the layer's backward never holds what it is done with.
  virtual void block_backward(std::size_t layer, Activations& a) = 0;
  // What a.release_mlp_nonlinearity() freed, again from the tensors the forward saved before it,
  // with the same kernel.
  virtual void recompute_mlp_nonlinearity(std::size_t layer, Activations& a) = 0;

  // The shape of a tensor with a row of `width` per token, [B, T, width]; without a width, of one
  // value per token, [B, T] (a norm's statistics).
  std::vector<std::int64_t> per_token(std::size_t width) const {
    return {static_cast<std::int64_t>(B_), static_cast<std::int64_t>(T_), static_cast<std::int64_t>(width)};
  }
  std::vector<std::int64_t> per_token() const { return {static_cast<std::int64_t>(B_), static_cast<std::int64_t>(T_)}; }

  Tensor& p(std::size_t layer, W which) { return param(table_.index(layer, which)); }
  Tensor& g(std::size_t layer, W which) { return grad_for_write(table_.index(layer, which)); }

  // The end of a residual branch: out = skip + branch @ weight^T (+ bias), branch [B,T,branch_width],
  // out [B,T,C] made by the caller (it is saved: residual2, x_{l+1}). The projection is workspace,
  // `name`, freed at once.
  void project_and_add(Tensor& out, const Tensor& skip, const Tensor& branch, const Tensor& weight, const Tensor* bias,
                       std::size_t branch_width, const std::string& name) {
    with_storage_type(dtype_, [&](auto tag) {
      using T = decltype(tag);
      const std::size_t N = B_ * T_, C = config_.dim;
      Tensor proj = make(per_token(C), MemoryCategory::workspace, name);
      linear_forward(proj, branch, weight, bias, N, branch_width, C);
      kernels::residual_forward<T>(kernel_stream(device_), out.data_as<T>(), skip.data_as<T>(), proj.data_as<T>(), N * C);
    });
  }

  std::vector<Activations> acts_;  // one a layer, while its forward's tensors live

 private:
  void forward_layer(std::size_t layer, bool produce_output) final {
    acts_[layer] = Activations{};
    block_forward(layer, acts_[layer], produce_output);
  }

  std::string family_;
};

}  // namespace trainmem
