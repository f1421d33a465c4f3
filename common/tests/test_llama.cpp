// The Llama model: the gradient check that keeps every technique honest on it (the model's
// analytic gradients, float, the real code path, agree with central finite differences of the
// loss computed in double by an independent forward pass written here from the definitions, not
// from the kernels), and its memory in and out of a step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/device/device.h"
#include "common/model/llama.h"
#include "common/tests/cpu_device.h"
#include "common/tests/model_step.h"

namespace trainmem {
namespace {

using testing_support::Batch;
using testing_support::cpu_device;
using testing_support::random_batch;

using Vec = std::vector<double>;

// out[n, o] = sum_c in[n, c] w[o, c]   (a linear layer without bias)
Vec linear(const Vec& in, const double* w, std::size_t N, std::size_t C, std::size_t OC) {
  Vec out(N * OC, 0.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t o = 0; o < OC; ++o)
      for (std::size_t c = 0; c < C; ++c) out[n * OC + o] += in[n * C + c] * w[o * C + c];
  return out;
}

// out = x / sqrt(mean(x^2) + eps) * w, row by row
Vec rmsnorm(const Vec& x, const double* w, std::size_t N, std::size_t C, double eps) {
  Vec out(N * C);
  for (std::size_t n = 0; n < N; ++n) {
    double ms = 0;
    for (std::size_t c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (std::size_t c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * r * w[c];
  }
  return out;
}

// The forward in double precision on the host, parameters laid out as parameter_table.h says.
double llama_reference_loss(const ModelConfig& cfg, const Vec& params, const std::vector<std::int32_t>& tokens,
                            const std::vector<std::int32_t>& targets, std::size_t B, std::size_t T) {
  const std::size_t C = cfg.dim, V = cfg.vocab, Vp = padded_vocab(V), H = cfg.heads, Hkv = cfg.kv_heads,
                    D = C / H, F = cfg.ffn_dim, N = B * T, QKV = (H + 2 * Hkv) * D;
  std::size_t offset = 0;
  auto take = [&](std::size_t n) {
    const double* ptr = params.data() + offset;
    offset += n;
    return ptr;
  };
  const double* wte = take(Vp * C);
  Vec x(N * C);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) x[n * C + c] = wte[static_cast<std::size_t>(tokens[n]) * C + c];
  for (std::size_t l = 0; l < cfg.layers; ++l) {
    const double *attn_norm = take(C), *wqkv = take(QKV * C), *wo = take(C * C), *mlp_norm = take(C),
                 *wgate = take(F * C), *wup = take(F * C), *wdown = take(C * F);
    Vec qkv = linear(rmsnorm(x, attn_norm, N, C, cfg.norm_eps), wqkv, N, C, QKV);
    // RoPE, rotate-half: element i pairs with i + D/2, turned by t * theta^(-2i/D); q's H heads
    // and k's Hkv heads (which start at column H*D), not v's.
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t head = 0; head < H + Hkv; ++head)
        for (std::size_t i = 0; i < D / 2; ++i) {
          double* v = &qkv[n * QKV + head * D];
          const double angle = static_cast<double>(n % T) * std::pow(cfg.rope_theta, -2.0 * i / D);
          const double a = v[i], b = v[i + D / 2];
          v[i] = a * std::cos(angle) - b * std::sin(angle);
          v[i + D / 2] = a * std::sin(angle) + b * std::cos(angle);
        }
    // Causal attention; query head h reads K/V head h / (H / Hkv).
    Vec atty(N * C, 0.0);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t t = 0; t < T; ++t) {
          const std::size_t g = h / (H / Hkv);
          const double* q = &qkv[(b * T + t) * QKV + h * D];
          Vec score(t + 1);
          double top = -1e300, sum = 0;
          for (std::size_t u = 0; u <= t; ++u) {
            const double* k = &qkv[(b * T + u) * QKV + (H + g) * D];
            score[u] = 0;
            for (std::size_t d = 0; d < D; ++d) score[u] += q[d] * k[d] / std::sqrt(static_cast<double>(D));
            top = std::max(top, score[u]);
          }
          for (double& s : score) sum += (s = std::exp(s - top));
          for (std::size_t u = 0; u <= t; ++u) {
            const double* v = &qkv[(b * T + u) * QKV + (H + Hkv + g) * D];
            for (std::size_t d = 0; d < D; ++d) atty[(b * T + t) * C + h * D + d] += score[u] / sum * v[d];
          }
        }
    const Vec proj = linear(atty, wo, N, C, C);
    for (std::size_t i = 0; i < N * C; ++i) x[i] += proj[i];  // x is now residual2
    const Vec n2 = rmsnorm(x, mlp_norm, N, C, cfg.norm_eps);
    const Vec gate = linear(n2, wgate, N, C, F), up = linear(n2, wup, N, C, F);
    Vec swiglu(N * F);
    for (std::size_t i = 0; i < N * F; ++i) swiglu[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const Vec down = linear(swiglu, wdown, N, F, C);
    for (std::size_t i = 0; i < N * C; ++i) x[i] += down[i];
  }
  const double* norm = take(C);
  const double* head = take(Vp * C);  // untied; its first V rows make the unpadded logits
  const Vec logits = linear(rmsnorm(x, norm, N, C, cfg.norm_eps), head, N, C, V);
  double total = 0;
  for (std::size_t n = 0; n < N; ++n) {
    const double* row = &logits[n * V];
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - top);
    total += top + std::log(sum) - row[targets[n]];
  }
  EXPECT_EQ(offset, params.size()) << "the reference read every parameter once";
  return total / static_cast<double>(N);
}

// Grouped-query attention (4 query heads share 2 K/V heads), an F that is not a multiple of C,
// theta and eps away from their defaults, a vocabulary that is padded.
ModelConfig small_llama() {
  ModelConfig cfg = model_preset("llama-tiny");
  cfg.seq = 8;
  cfg.dim = 16;
  cfg.heads = 4;
  cfg.kv_heads = 2;
  cfg.ffn_dim = 24;
  cfg.vocab = 23;
  cfg.rope_theta = 500.0;  // angles that turn well within 8 positions
  cfg.norm_eps = 1e-3;
  return cfg;
}

TEST(Llama, AnalyticGradientsMatchDoublePrecisionFiniteDifferences) {
  const ModelConfig cfg = small_llama();
  const std::size_t B = 2, T = 7;  // T < seq: a shorter sequence than the context is allowed
  auto device = cpu_device();
  Llama model(*device, cfg, 42);
  // Random values everywhere (norm weights too); model_step.h has the tolerance.
  testing_support::expect_gradients_match_reference(model, B, T, [&](const Vec& p, const Batch& b) {
    return llama_reference_loss(cfg, p, b.host_tokens, b.host_targets, B, T);
  });
}

TEST(Llama, ActivationsAreFreedByBackwardAndTheStepEndsWhereItBegan) {
  auto device = cpu_device();
  Llama model(*device, model_preset("llama-tiny"), 1);
  testing_support::expect_a_step_ends_where_it_began(model);  // on 2 x 64 tokens
}

// make_model builds the family the config names; a family's class refuses the other's config.
TEST(Llama, MakeModelBuildsTheConfigsFamily) {
  auto device = cpu_device();
  const std::unique_ptr<Model> llama = make_model(*device, model_preset("llama-tiny"), 1);
  EXPECT_NE(dynamic_cast<Llama*>(llama.get()), nullptr);
  EXPECT_EQ(llama->parameters().back().name, "head.weight");
  EXPECT_THROW(Llama(*device, model_preset("tiny"), 1), std::invalid_argument);
}

}  // namespace
}  // namespace trainmem
