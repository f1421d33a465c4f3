#include "suites/checkpointing/recompute.h"

#include <algorithm>
#include <stdexcept>

#include "common/allocator/allocator_config.h"

namespace trainmem {

RecomputePolicy RecomputePolicy::parse(const std::string& text) {
  RecomputePolicy p;
  if (text == "none") return p;
  if (text == "full") {
    p.kind = Kind::full;
    return p;
  }
  if (text == "selective") {
    p.kind = Kind::selective;
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
  throw std::invalid_argument("--recompute must be none, full, selective or every:K (K >= 1), not '" + text + "'");
}

std::string RecomputePolicy::to_string() const {
  switch (kind) {
    case Kind::none: return "none";
    case Kind::full: return "full";
    case Kind::every: return "every:" + std::to_string(every);
    case Kind::selective: return "selective";
  }
  return "?";
}

bool RecomputePolicy::recomputes(std::size_t layer) const {
  switch (kind) {
    case Kind::none: return false;
    case Kind::full: return true;
    case Kind::every: return layer % every == 0;
    case Kind::selective: return true;
  }
  return false;
}

std::vector<bool> RecomputePolicy::recomputed_layers(std::size_t layers) const {
  std::vector<bool> out(layers);
  for (std::size_t l = 0; l < layers; ++l) out[l] = recomputes(l);
  return out;
}

void RecomputeStrategy::after_layer_forward(StepContext& ctx, std::size_t layer) {
  if (policy_.selective()) ctx.model.release_selective(layer);
  else if (policy_.recomputes(layer)) ctx.model.release_layer_activations(layer);
}

void RecomputeStrategy::before_layer_backward(StepContext& ctx, std::size_t layer) {
  if (policy_.selective()) ctx.model.recompute_selective(layer);
  else if (policy_.recomputes(layer)) ctx.model.recompute_layer(layer);
}

std::size_t predicted_activation_peak(const GPTConfig& c, std::size_t B, std::size_t T, const RecomputePolicy& policy) {
  const std::size_t C = c.dim, H = c.heads, L = c.layers, V = c.vocab, f = sizeof(float);
  auto block = [](std::size_t bytes) { return round_size(bytes); };
  const std::size_t btc = block(B * T * C * f), bt = block(B * T * f);
  const std::size_t x = btc;  // one entry of the residual stream
  const std::size_t layer = btc /*ln1*/ + 2 * bt + block(3 * B * T * C * f) /*qkv*/ + block(B * H * T * T * f) /*att*/ +
                            btc /*atty*/ + btc /*residual2*/ + btc /*ln2*/ + 2 * bt + 2 * block(4 * B * T * C * f);
  const std::size_t head = btc + 2 * bt + block(B * T * V * f);
  // What a recomputed layer gives up between its forward and its backward.
  const std::size_t dropped = policy.selective() ? block(B * H * T * T * f) /*att*/ + block(4 * B * T * C * f) /*gelu*/
                                                 : layer;
  const std::vector<bool> recomputed = policy.recomputed_layers(L);

  // Forward: x0, then per layer its saved tensors (dropped at once if recomputed) and x_{l+1}.
  std::size_t live = x, peak = x;
  std::vector<bool> kept(L);
  for (std::size_t l = 0; l < L; ++l) {
    live += layer + x;
    peak = std::max(peak, live);
    if (recomputed[l]) live -= dropped;
    kept[l] = !recomputed[l];
  }
  live += head;
  peak = std::max(peak, live);
  // Backward: the head and x_L go first; layer l is recomputed (if dropped), then it and x_l go.
  live -= head + x;
  for (std::size_t l = L; l-- > 0;) {
    if (recomputed[l]) {
      live += dropped;
      peak = std::max(peak, live);
    }
    live -= layer + x;
  }
  return peak;
}

}  // namespace trainmem
