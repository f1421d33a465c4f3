// The Llama model: the gradient check that keeps every technique honest on it (the model's
// analytic gradients, float, the real code path, agree with central finite differences of the
// loss computed in double by an independent forward pass written here from the definitions, not
// from the kernels), and its memory in and out of a step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

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

// theta^(-2i/D), and with Llama 3.1's scaling as transformers' _compute_llama3_parameters writes it:
// wavelengths above L0 / low_freq_factor divided by the factor, below L0 / high_freq_factor kept,
// and between them blended, (1 - s) f / factor + s f with s = (L0 / wavelength - low) / (high - low).
double reference_frequency(const kernels::RopeFrequencies& rope, std::size_t i, std::size_t D) {
  const double f = std::pow(rope.theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  if (rope.factor == 1) return f;
  const double wavelength = 2 * std::numbers::pi / f, L0 = rope.original_context;
  const double s = (L0 / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  if (wavelength > L0 / rope.low_freq_factor) return f / rope.factor;
  if (wavelength < L0 / rope.high_freq_factor) return f;
  return (1 - s) * f / rope.factor + s * f;
}

// The forward in double precision on the host, parameters laid out as parameter_table.h says.
double llama_reference_loss(const ModelConfig& cfg, const Vec& params, const std::vector<std::int32_t>& tokens,
                            const std::vector<std::int32_t>& targets, std::size_t B, std::size_t T) {
  // D: C / H, or the config's head dimension (then attention's output is H*D wide, not C).
  const std::size_t C = cfg.dim, V = cfg.vocab, Vp = padded_vocab(V), H = cfg.heads, Hkv = cfg.kv_heads,
                    D = cfg.head_dim_set ? cfg.head_dim_set : C / H, HD = H * D, F = cfg.ffn_dim, N = B * T,
                    QKV = (H + 2 * Hkv) * D;
  std::size_t offset = 0;
  auto take = [&](std::size_t n) {
    const double* ptr = params.data() + offset;
    offset += n;
    return ptr;
  };
  const double* wte = take(Vp * C);
  // A mixture of experts' routing over all layers, for the load-balancing loss: c_e, sum p_e.
  const std::size_t E = cfg.experts, K = cfg.experts_per_token, Fe = cfg.expert_ffn_dim, Fs = cfg.shared_expert_ffn_dim;
  Vec expert_count(E, 0.0), expert_probability(E, 0.0);
  Vec x(N * C);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) x[n * C + c] = wte[static_cast<std::size_t>(tokens[n]) * C + c];
  for (std::size_t l = 0; l < cfg.layers; ++l) {
    const double *attn_norm = take(C), *wqkv = take(QKV * C), *bqkv = cfg.qkv_bias ? take(QKV) : nullptr,
                 *wo = take(C * HD), *mlp_norm = take(C);
    Vec qkv = linear(rmsnorm(x, attn_norm, N, C, cfg.norm_eps), wqkv, N, C, QKV);
    if (bqkv)  // Qwen2's biases, added before RoPE
      for (std::size_t n = 0; n < N; ++n)
        for (std::size_t o = 0; o < QKV; ++o) qkv[n * QKV + o] += bqkv[o];
    // RoPE, rotate-half: element i pairs with i + D/2, turned by t * theta^(-2i/D); q's H heads
    // and k's Hkv heads (which start at column H*D), not v's.
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t head = 0; head < H + Hkv; ++head)
        for (std::size_t i = 0; i < D / 2; ++i) {
          double* v = &qkv[n * QKV + head * D];
          const double angle = static_cast<double>(n % T) * reference_frequency(cfg.rope, i, D);
          const double a = v[i], b = v[i + D / 2];
          v[i] = a * std::cos(angle) - b * std::sin(angle);
          v[i + D / 2] = a * std::sin(angle) + b * std::cos(angle);
        }
    // Causal attention; query head h reads K/V head h / (H / Hkv).
    Vec atty(N * HD, 0.0);
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
            for (std::size_t d = 0; d < D; ++d) atty[(b * T + t) * HD + h * D + d] += score[u] / sum * v[d];
          }
        }
    const Vec proj = linear(atty, wo, N, HD, C);
    for (std::size_t i = 0; i < N * C; ++i) x[i] += proj[i];  // x is now residual2
    const Vec n2 = rmsnorm(x, mlp_norm, N, C, cfg.norm_eps);
    // down(silu(gate(in)) * up(in)) of `rows` rows of width C, hidden width `width`
    auto swiglu_mlp = [&](const Vec& in, std::size_t rows, std::size_t width, const double* wgate, const double* wup,
                          const double* wdown) {
      const Vec gate = linear(in, wgate, rows, C, width), up = linear(in, wup, rows, C, width);
      Vec swiglu(rows * width);
      for (std::size_t i = 0; i < rows * width; ++i) swiglu[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
      return linear(swiglu, wdown, rows, width, C);
    };
    if (E == 0) {
      const double *wgate = take(F * C), *wup = take(F * C), *wdown = take(C * F);
      const Vec down = swiglu_mlp(n2, N, F, wgate, wup, wdown);
      for (std::size_t i = 0; i < N * C; ++i) x[i] += down[i];
      continue;
    }
    // A mixture of experts, token by token: p = softmax(n Wr^T), its k largest (ties: the lower
    // expert), weights p (divided by their sum where the config renormalizes), the experts' outputs
    // summed with them; and the shared expert, times sigmoid(n . w_sg).
    const double* router = take(E * C);
    std::vector<const double*> expert(3 * E);
    for (std::size_t e = 0; e < E; ++e) {
      expert[3 * e] = take(Fe * C);
      expert[3 * e + 1] = take(Fe * C);
      expert[3 * e + 2] = take(C * Fe);
    }
    const double *sgate = Fs ? take(Fs * C) : nullptr, *sup = Fs ? take(Fs * C) : nullptr,
                 *sdown = Fs ? take(C * Fs) : nullptr, *wsg = Fs ? take(C) : nullptr;
    const Vec logits = linear(n2, router, N, C, E);
    const Vec shared = Fs ? swiglu_mlp(n2, N, Fs, sgate, sup, sdown) : Vec{};
    for (std::size_t n = 0; n < N; ++n) {
      Vec prob(E);
      const double top = *std::max_element(&logits[n * E], &logits[n * E] + E);
      double sum = 0;
      for (std::size_t e = 0; e < E; ++e) sum += (prob[e] = std::exp(logits[n * E + e] - top));
      for (double& v : prob) v /= sum;
      std::vector<std::size_t> order(E);
      for (std::size_t e = 0; e < E; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return prob[a] > prob[b]; });
      double chosen = 0;
      for (std::size_t j = 0; j < K; ++j) chosen += prob[order[j]];
      const Vec row(n2.begin() + static_cast<std::ptrdiff_t>(n * C), n2.begin() + static_cast<std::ptrdiff_t>((n + 1) * C));
      for (std::size_t j = 0; j < K; ++j) {
        const std::size_t e = order[j];
        const double weight = cfg.normalize_top_k ? prob[e] / chosen : prob[e];
        const Vec y = swiglu_mlp(row, 1, Fe, expert[3 * e], expert[3 * e + 1], expert[3 * e + 2]);
        for (std::size_t c = 0; c < C; ++c) x[n * C + c] += weight * y[c];
        expert_count[e] += 1;
      }
      for (std::size_t e = 0; e < E; ++e) expert_probability[e] += prob[e];
      if (Fs) {
        double g = 0;
        for (std::size_t c = 0; c < C; ++c) g += row[c] * wsg[c];
        for (std::size_t c = 0; c < C; ++c) x[n * C + c] += shared[n * C + c] / (1 + std::exp(-g));
      }
    }
  }
  const double* norm = take(C);
  const double* head = cfg.tied_head ? wte : take(Vp * C);  // its first V rows make the unpadded logits
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
  // The load-balancing loss: coef * E * sum_e (c_e / (L N)) (sum p_e / (L N)).
  double aux = 0;
  const double rows = static_cast<double>(cfg.layers * N);
  for (std::size_t e = 0; e < E; ++e) aux += expert_count[e] / rows * expert_probability[e] / rows;
  return total / static_cast<double>(N) + cfg.router_aux_loss_coef * static_cast<double>(E) * aux;
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
  cfg.rope.theta = 500.0;  // angles that turn well within 8 positions
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

// The shapes Hugging Face configs give the family (model_config.h): a head tied to wte (Llama 3.2,
// Qwen2.5 0.5B-3B), biases on q, k, v (Qwen2), a head dimension that is not C / H (Mistral NeMo), and
// all three at once. The same check: the reference reads the parameters as the table lays them out.
struct LlamaVariant {
  const char* name;
  bool tied_head, qkv_bias;
  std::size_t head_dim;  // 0: C / H
  bool llama3_rope = false;
  MixtureShape experts = {};          // a mixture of experts (none: the dense MLP)
  double router_aux_loss_coef = 0;    // and its load-balancing loss
};
// A variant with a mixture of experts: E, k, Fe, Fs, renormalized, the load-balancing loss's coefficient.
LlamaVariant mixture(LlamaVariant v, MixtureShape experts, double aux) {
  v.experts = experts;
  v.router_aux_loss_coef = aux;
  return v;
}
void PrintTo(const LlamaVariant& v, std::ostream* os) { *os << v.name; }  // (gtest's name for the case)
class LlamaVariants : public testing::TestWithParam<LlamaVariant> {};

TEST_P(LlamaVariants, AnalyticGradientsMatchDoublePrecisionFiniteDifferences) {
  ModelConfig cfg = small_llama();
  cfg.tied_head = GetParam().tied_head;
  cfg.qkv_bias = GetParam().qkv_bias;
  cfg.head_dim_set = GetParam().head_dim;
  if (GetParam().llama3_rope)  // with D = 8 and theta 500: pair 0 kept, pair 1 blended, pairs 2 and 3 divided
    cfg.rope = kernels::RopeFrequencies::llama3(cfg.rope.theta, 8, 1, 4, 64);
  cfg.set_mixture(GetParam().experts);
  cfg.router_aux_loss_coef = GetParam().router_aux_loss_coef;
  const std::size_t B = 2, T = 7;
  auto device = cpu_device();
  Llama model(*device, cfg, 7);
  testing_support::expect_gradients_match_reference(model, B, T, [&](const Vec& p, const Batch& b) {
    return llama_reference_loss(cfg, p, b.host_tokens, b.host_targets, B, T);
  });
}

INSTANTIATE_TEST_SUITE_P(Llama, LlamaVariants,
                         testing::Values(LlamaVariant{"TiedHead", true, false, 0}, LlamaVariant{"QkvBias", false, true, 0},
                                         LlamaVariant{"HeadDim6", false, false, 6},  // H*D = 24 != C = 16
                                         LlamaVariant{"AllThree", true, true, 2},    // H*D = 8 < C
                                         LlamaVariant{"Llama3RopeScaling", true, false, 8, true},
                                         // Mixtral's block (4 experts of 12, top 2, renormalized) with its
                                         // load-balancing loss (a large coefficient, so that its gradient shows);
                                         // Qwen2-MoE's (top 2 of 4 not renormalized, a shared expert of 20,
                                         // q/k/v biases); and top 1 (Switch's).
                                         mixture(LlamaVariant{"MixtureOfExperts", false, false, 0}, {4, 2, 12, 0, true}, 0.5),
                                         mixture(LlamaVariant{"SharedExpert", false, true, 0}, {4, 2, 12, 20, false}, 0.1),
                                         mixture(LlamaVariant{"TopOneExpert", true, false, 0}, {3, 1, 10, 0, true}, 0)),
                         [](const testing::TestParamInfo<LlamaVariant>& info) { return std::string(info.param.name); });

// A mixture of experts' memory does not follow its routing (llama_moe.cpp: always N k grouped rows,
// every expert's gradient made): a step as the initial weights route, a step where every token goes
// to experts 0 and 1 (a zero router: equal probabilities, ties to the lower experts: the worst
// imbalance top-2 allows) and the meta device's step (which routes nothing) end with the same
// allocator statistics, to the byte: peaks, segments, allocation counts, every category.
struct MoeStep {
  nlohmann::json stats;
  std::vector<std::int32_t> layer0_counts;  // each expert's rows in layer 0
};
MoeStep moe_step(const ModelConfig& cfg, const std::string& device_choice, bool zero_router) {
  DeviceOptions options;
  options.choice = device_choice;
  options.device_memory = std::size_t{1} << 30;
  auto device = Device::open(options);
  Llama model(*device, cfg, 3);
  if (zero_router) {
    std::vector<float> values = model.parameter_values();
    std::size_t offset = 0;
    for (const Parameter& p : model.parameters()) {
      if (p.name.find("mlp.router.weight") != std::string::npos)
        std::fill(values.begin() + static_cast<std::ptrdiff_t>(offset), values.begin() + static_cast<std::ptrdiff_t>(offset + p.numel()), 0.0f);
      offset += p.numel();
    }
    model.set_parameter_values(values);
  }
  const Batch batch = random_batch(*device, 2, 32, cfg.vocab, 9);
  MoeStep step;
  model.begin(batch.tokens, batch.targets);
  model.embed_forward();
  for (std::size_t l = 0; l < cfg.layers; ++l) model.layer_forward(l);
  step.layer0_counts = model.layer_activations(0).expert_counts;
  model.head_forward(1.0f / 64);
  model.head_backward();
  for (std::size_t l = cfg.layers; l-- > 0;) model.layer_backward(l);
  model.embed_backward();
  model.end();
  step.stats = device->allocator().stats().to_json();
  return step;
}

TEST(LlamaMixtureOfExperts, MemoryIsTheSameForEveryRoutingAndOnTheMetaDevice) {
  ModelConfig cfg = model_preset("llama-small-moe");  // 8 experts, top 2, a shared expert
  cfg.router_aux_loss_coef = 0.01;
  const MoeStep spread = moe_step(cfg, "cpu", false), skewed = moe_step(cfg, "cpu", true), meta = moe_step(cfg, "meta", false);
  const std::size_t N = 2 * 32;
  std::vector<std::int32_t> all_to_two(cfg.experts, 0);
  all_to_two[0] = all_to_two[1] = static_cast<std::int32_t>(N);
  EXPECT_EQ(skewed.layer0_counts, all_to_two) << "a zero router sends every token to experts 0 and 1";
  EXPECT_GT(std::count_if(spread.layer0_counts.begin(), spread.layer0_counts.end(), [](std::int32_t c) { return c > 0; }), 2)
      << "the initial router spreads the tokens over more than two experts";
  EXPECT_EQ(spread.stats, skewed.stats) << "the same memory for both routings";
  EXPECT_EQ(spread.stats, meta.stats) << "the meta device's step is the CPU's";
}

// A tied head is one tensor: no head.weight, wte's gradient gathers the head's and the embedding's.
TEST(Llama, ATiedHeadIsWteAndHasNoParameterOfItsOwn) {
  ModelConfig cfg = model_preset("llama-tiny");
  const std::size_t untied = cfg.num_parameters();
  cfg.tied_head = true;
  EXPECT_EQ(untied - cfg.num_parameters(), padded_vocab(cfg.vocab) * cfg.dim);
  auto device = cpu_device();
  Llama model(*device, cfg, 1);
  EXPECT_EQ(model.parameters().back().name, "norm.weight");
  for (const Parameter& p : model.parameters()) EXPECT_NE(p.name, "head.weight");
  testing_support::expect_a_step_ends_where_it_began(model);
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
