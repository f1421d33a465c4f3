#include "suites/checkpointing/recompute.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "common/model/saved_activations.h"

namespace trainmem {

RecomputePolicy RecomputePolicy::parse(const std::string& text) {
  RecomputePolicy p;
  if (const std::optional<Kind> kind = kRecomputeWords.find(text)) {
    p.kind = *kind;
    return p;
  }
  if (text.rfind("every:", 0) == 0) {
    try {
      std::size_t used = 0;
      const long k = std::stol(text.substr(6), &used);
      if (used == text.size() - 6 && k >= 1) {
        p.kind = Kind::every;
        p.every = static_cast<std::size_t>(k);
        return p;
      }
    } catch (const std::exception&) {
    }
  }
  throw std::invalid_argument("--recompute takes " + kRecomputeWords.one_of() + " or every:K (K >= 1), not '" + text + "'");
}

std::string RecomputePolicy::to_string() const {
  return kind == Kind::every ? "every:" + std::to_string(every) : std::string(kRecomputeWords.name(kind));
}

bool RecomputePolicy::recomputes(std::size_t layer) const {
  switch (kind) {
    case Kind::none: return false;
    case Kind::full: return true;
    case Kind::every: return layer % every == 0;
    case Kind::selective: return true;
    case Kind::sqrt: return true;
  }
  return false;
}

std::vector<bool> RecomputePolicy::recomputed_layers(std::size_t layers) const {
  std::vector<bool> out(layers);
  for (std::size_t l = 0; l < layers; ++l) out[l] = recomputes(l);
  return out;
}

std::size_t RecomputePolicy::sqrt_segment(std::size_t layers) {
  std::size_t k = 1;
  while (k * k < layers) ++k;  // ceil(sqrt(L)), exactly
  return k;
}

void RecomputeStrategy::after_layer_forward(StepContext& ctx, std::size_t layer) {
  if (policy_.selective()) {
    ctx.model.release_selective(layer);
  } else if (policy_.kind == RecomputePolicy::Kind::sqrt) {
    ctx.model.release_layer_activations(layer);
    const std::size_t k = RecomputePolicy::sqrt_segment(ctx.model.config().layers);
    if (layer % k != 0) ctx.model.release_layer_input(layer);  // not a segment's first layer
  } else if (policy_.recomputes(layer)) {
    ctx.model.release_layer_activations(layer);
  }
}

void RecomputeStrategy::before_layer_backward(StepContext& ctx, std::size_t layer) {
  if (policy_.selective()) {
    ctx.model.recompute_selective(layer);
  } else if (policy_.kind == RecomputePolicy::Kind::sqrt) {
    // Backward reaches a segment at its last layer: rebuild the segment from its checkpoint,
    // each layer's output being the next one's input (the last one's output is not needed).
    const std::size_t L = ctx.model.config().layers, k = RecomputePolicy::sqrt_segment(L);
    const std::size_t first = layer / k * k, last = std::min(first + k, L) - 1;
    if (layer != last) return;
    for (std::size_t l = first; l <= last; ++l) ctx.model.recompute_layer(l, /*remake_output=*/l < last);
  } else if (policy_.recomputes(layer)) {
    ctx.model.recompute_layer(layer);
  }
}

std::size_t predicted_activation_peak(const ModelConfig& c, std::size_t B, std::size_t T, const RecomputePolicy& policy,
                                      DType dtype, AttentionKind attention) {
  // Each saved tensor is a block of round_size(bytes): the model's formula (saved_activations.h).
  const SavedActivations saved = saved_activations(c, B, T, dtype, attention);
  const std::size_t L = c.layers, x = saved.residual_block(), layer = saved.layer_blocks(), head = saved.head_blocks();
  // What a recomputed layer gives up between its forward and its backward.
  const std::size_t dropped = policy.selective() ? saved.selective_blocks() : layer;
  const std::vector<bool> recomputed = policy.recomputed_layers(L);
  const bool sqrt = policy.kind == RecomputePolicy::Kind::sqrt;
  const std::size_t k = RecomputePolicy::sqrt_segment(L);

  // Forward: x0, then per layer its saved tensors and x_{l+1}; a recomputed layer drops its
  // tensors at once (sqrt: and its input x_l, unless it starts a segment).
  std::size_t live = x, peak = x;
  for (std::size_t l = 0; l < L; ++l) {
    live += layer + x;
    peak = std::max(peak, live);
    if (recomputed[l]) live -= dropped;
    if (sqrt && l % k != 0) live -= x;
  }
  live += head;
  peak = std::max(peak, live);
  // Backward: the head and x_L go first; layer l is recomputed (if dropped), then it and x_l go.
  // sqrt: at a segment's last layer, the whole segment comes back (its inner inputs too).
  live -= head + x;
  for (std::size_t l = L; l-- > 0;) {
    if (sqrt) {
      const std::size_t first = l / k * k, last = std::min(first + k, L) - 1;
      if (l == last)
        for (std::size_t j = first; j <= last; ++j) {
          live += layer + (j < last ? x : 0);
          peak = std::max(peak, live);
        }
    } else if (recomputed[l]) {
      live += dropped;
      peak = std::max(peak, live);
    }
    live -= layer + x;
  }
  return peak;
}

}  // namespace trainmem
