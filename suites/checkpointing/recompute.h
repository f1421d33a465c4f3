// Activation checkpointing: trade compute for memory by not keeping a layer's activations from
// forward to backward, and recomputing them from the layer's input just before its backward.
//
//   --recompute none       keep everything (the baseline)
//   --recompute full       keep only each layer's input; recompute every layer in backward
//   --recompute every:K    recompute layers 0, K, 2K, ...; keep the others
//   --recompute selective  every layer drops only its attention probabilities and its MLP's
//                          nonlinearity output (GPT's GELU, Llama's SwiGLU)
//                          (memory-heavy, cheap to rebuild: no matmul) and rebuilds them
//   --recompute sqrt       Chen et al. 2016: segments of k = ceil(sqrt(L)) layers; only each
//                          segment's input is kept (about sqrt(L) checkpoints), and the whole
//                          segment is recomputed before its backward
//
// Recomputing runs the same kernels on the same inputs in the same order, so the gradients are
// bit-identical to `none` on the CPU (tested).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/cli/enum_table.h"
#include "common/model/model.h"
#include "common/train/strategy.h"

namespace trainmem {

struct RecomputePolicy {
  enum class Kind { none, full, every, selective, sqrt };
  Kind kind = Kind::none;
  std::size_t every = 1;  // for Kind::every

  static RecomputePolicy parse(const std::string& text);  // throws std::invalid_argument with the accepted forms
  std::string to_string() const;
  bool recomputes(std::size_t layer) const;
  std::vector<bool> recomputed_layers(std::size_t layers) const;
  bool selective() const { return kind == Kind::selective; }
  // sqrt: the segment length k = ceil(sqrt(L)); layer l belongs to segment l / k, whose input
  // x_{k * (l / k)} is the checkpoint.
  static std::size_t sqrt_segment(std::size_t layers);
};

// The policies --recompute names by a word alone; every:K, which carries its K, is read by
// RecomputePolicy::parse.
inline constexpr auto kRecomputeWords = cli::enum_table<RecomputePolicy::Kind>(
    "--recompute", {{RecomputePolicy::Kind::none, "none"},
                    {RecomputePolicy::Kind::full, "full"},
                    {RecomputePolicy::Kind::selective, "selective"},
                    {RecomputePolicy::Kind::sqrt, "sqrt"}});

class RecomputeStrategy : public Strategy {
 public:
  explicit RecomputeStrategy(RecomputePolicy policy) : policy_(policy) {}
  std::string name() const override { return "recompute:" + policy_.to_string(); }
  void after_layer_forward(StepContext& ctx, std::size_t layer) override;
  void before_layer_backward(StepContext& ctx, std::size_t layer) override;

 private:
  RecomputePolicy policy_;
};

// The peak of the `activations` category during one training step, predicted exactly from the
// model's saved tensors (common/model/saved_activations.h, either family): each saved tensor is a
// block of round_size(bytes) (exact while every activation tensor is <= 1 MiB, i.e. in the small
// pool, which always splits to the rounded size; larger blocks can be handed out whole, which the
// estimator models). Besides the layers' tensors: the residual stream x_l (one per layer input,
// and the final one) and the head's.
//
// The step is simulated tensor group by tensor group (forward, head, then each layer's backward
// with its recompute) and the largest live total returned.
std::size_t predicted_activation_peak(const ModelConfig& config, std::size_t B, std::size_t T,
                                      const RecomputePolicy& policy, DType dtype = DType::f32,
                                      AttentionKind attention = AttentionKind::naive);

}  // namespace trainmem
