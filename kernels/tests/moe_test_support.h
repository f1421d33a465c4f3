// What the mixture-of-experts tests (test_moe_cpu.cpp, test_moe_cuda.cu) share: the shapes, the
// inputs (seeded, never zero), plain double references of kernels/moe.h's formulas together with
// each output's "size" (the same formula on absolute values, which error bounds scale with), the
// error counts derived below, and a per-element comparison. Host code only.
//
// Error counts. u is the compute type's unit roundoff (2^-24 for fp32, 2^-53 for double); a
// rounding is at most u relative; a sum of m terms in ANY order is within (m - 1) u sum|terms| of
// its exact value, so one count covers the CPU's sequential sums and the GPU's trees alike, and a
// fused multiply-add only removes roundings. Products and quotients add their factors' relative
// errors. So an output computed in A is within count * u * size of the exact value, size being
// the formula evaluated on absolute values. Each count below is first order and rounded up by one
// u, which covers the second-order terms (all below 2^-10 u here, also the product of the final
// rounding to T with the compute error: u(T) * count * u <= u).
//   exp:      exp_rel = 2 on the CPU (std::exp, within 1 ulp = 2u relative), 4 on CUDA (expf, 2 ulps)
//   sigmoid:  e = exp(-|g|) (its argument exact) exp_rel;  1 + e  exp_rel/2 + 1;  r = 1/(1 + e)
//             exp_rel/2 + 2;  s and 1 - s (r or e r)  1.5 exp_rel + 3   (CPU 6, CUDA 9)
//   softmax:  y = x - m  1 (relative to |y| <= Y, the row's range): exp(y) (Y + exp_rel);
//             the sum of E positive terms  Y + exp_rel + E - 1;  p = exp / sum  2 (Y + exp_rel) + E,
//             so probs_count = 2 (Y + exp_rel) + E + 1, relative to p (size = p)
//   weights:  renormalized, p_j / sum_j p_j: 2 probs_count + k (+1); else p_j: probs_count; then
//             rounded to T (u(T) relative)
//   router backward: S = sum_j p_j (k - 1), w_i = p_i / S (k), sum_i dw_i w_i (2k, relative to
//             D1 = sum |dw_i| w_i), dw_j - that (2k + 1, relative to |dw_j| + D1), term_j = that / S
//             (3k + 2, relative to M_j = (|dw_j| + D1) / S; without renormalizing term_j = dw_j exact,
//             M_j = |dw_j|), dp_e = aux_e + terms (3k + 3, relative to Mdp_e = |aux_e| + sum M_j),
//             p_e dp_e (3k + 4), sum_e (3k + E + 3, relative to Q = sum_e p_e Mdp_e), dp_e - that
//             (3k + E + 4, relative to Mdp_e + Q), times p_e: 3k + E + 6 with the round-up, relative to
//             size = p_e (Mdp_e + Q)
//   combine:  w_j eo_j (1), s sh (sigmoid + 1), their sum (k more), + residual (1): k + sigmoid + 3;
//             without the shared term k + 2; size = |residual| + sum_j |w_j eo_j| + s |sh|
//   combine backward: dweights, a dot of C: C + 1 (size sum_c |dout eo|); dexpert_out = w dout: 2;
//             dshared = s dout: sigmoid + 2; dshared_gate = (s (1 - s)) dot: 2 sigmoid + C + 4
//             (size s (1 - s) sum_c |dout sh|)
//   dispatch backward: a sum of k: k;  shared gate forward: a dot of C: C + 1;  shared gate
//             backward: dx = old + g w: 3 (size |old| + |g w|); dweight = old + sum_n g x: N + 2
//             (size |old| + sum_n |g x|)
// The double references below round too, by the same counts in units of 2^-53: the tests add that
// (moe_compute_u below).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/moe.h"
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels::moe_test {

struct MoeShape {
  std::size_t N, E, k, C;
};
inline std::string shape_name(const MoeShape& s) {
  return "N=" + std::to_string(s.N) + " E=" + std::to_string(s.E) + " k=" + std::to_string(s.k) +
         " C=" + std::to_string(s.C);
}
// k = 1 and 2 of 8 experts (Mixtral's 8, top 2), 4 of 60 (Qwen1.5-MoE); prime token counts, odd
// widths; the last one past one thread's share of the CPU kernels (kernels/cpu/moe.cpp: 32768
// elements) in every kernel.
inline const std::vector<MoeShape> kMoeShapes = {{37, 8, 1, 19}, {101, 8, 2, 33}, {53, 60, 4, 17}, {1031, 60, 4, 65}};

// The compute type's unit roundoff plus the double reference's (moe_test_support.h's counts hold
// for both: the comparison adds them).
template <typename T>
constexpr double moe_compute_u() {
  return (std::is_same_v<T, double> ? 0x1p-53 : 0x1p-24) + 0x1p-53;
}

// ---------------------------------------------------------------------------------------- error counts

constexpr double kMoeCpuExp = 2, kMoeGpuExp = 4;  // exp's error in units of u (the file's comment)
inline double moe_sigmoid_count(double exp_rel) { return 1.5 * exp_rel + 3; }
inline double moe_probs_count(double Y, std::size_t E, double exp_rel) { return 2 * (Y + exp_rel) + double(E) + 1; }
inline double moe_weights_count(double Y, std::size_t E, std::size_t k, double exp_rel, bool renormalize) {
  const double p = moe_probs_count(Y, E, exp_rel);
  return renormalize ? 2 * p + double(k) + 1 : p;
}
inline double moe_router_backward_count(std::size_t E, std::size_t k) { return 3.0 * k + double(E) + 6; }
inline double moe_combine_count(std::size_t k, bool shared, double exp_rel) {
  return shared ? double(k) + moe_sigmoid_count(exp_rel) + 3 : double(k) + 2;
}

// ---------------------------------------------------------------------------------------- inputs

// Router logits with gaps: row n holds the E levels -3 + spacing * (i + jitter), i = 0..E-1 in a
// random order, spacing = 6 / E, jitter in [0, 0.3), all shifted by one value in [-2, 2] per row.
// Any two logits of a row differ by at least 0.7 spacing before the rounding to T (bf16 moves each
// by at most 2^-6 here: still >= 0.039 apart for E = 60), so the top-k is never a near tie, not
// for any kernel's rounding nor for a central difference's step; never zero.
template <typename T>
std::vector<T> gapped_logits(std::size_t N, std::size_t E, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> jitter(0.0, 0.3), shift(-2.0, 2.0);
  const double spacing = 6.0 / double(E);
  std::vector<T> v(N * E);
  std::vector<std::size_t> level(E);
  for (std::size_t n = 0; n < N; ++n) {
    std::iota(level.begin(), level.end(), std::size_t{0});
    std::shuffle(level.begin(), level.end(), rng);
    const double row_shift = shift(rng);
    for (std::size_t e = 0; e < E; ++e) {
      do {
        v[n * E + e] = store<T>(static_cast<compute_t<T>>(row_shift - 3 + spacing * (double(level[e]) + jitter(rng))));
      } while (load(v[n * E + e]) == 0);
    }
  }
  return v;
}

// Logits with exact ties: each one of -1.5, -0.5, 0.5, 1.5 (exact in every type), so equal logits
// give equal probabilities bit for bit and the lower expert index must win; unequal ones are 1 apart.
template <typename T>
std::vector<T> tied_logits(std::size_t N, std::size_t E, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(0, 3);
  std::vector<T> v(N * E);
  for (T& x : v) x = store<T>(static_cast<compute_t<T>>(-1.5 + level(rng)));
  return v;
}

// k distinct experts per token, in random order (as a router would give them).
inline std::vector<std::int32_t> random_routing(std::size_t N, std::size_t E, std::size_t k, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> experts(N * k), all(E);
  for (std::size_t n = 0; n < N; ++n) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), experts.begin() + static_cast<std::ptrdiff_t>(n * k));
  }
  return experts;
}

// The inputs of the dispatch, combine and shared-gate kernels for one shape: a routing and its
// plan (cpu::moe_plan), weights in [0.05, 1], activations and gradients in [-1, 1], shared gate
// logits in [-4, 4] (empty without a shared expert).
// dgrouped (dispatch's backward) is expert_out's shape; dx_start and dweight_start are where the
// shared gate's accumulated gradients start.
template <typename T>
struct MoeCase {
  MoeShape shape;
  bool shared;
  std::vector<std::int32_t> experts, rows, counts;
  std::vector<compute_t<T>> weights;
  std::vector<T> x, residual, expert_out, shared_out, shared_gate, dout, gate_weight, dlogits, dgrouped, dx_start,
      dweight_start;
};

template <typename T>
MoeCase<T> moe_case(const MoeShape& s, bool shared, std::uint64_t seed) {
  using dtype_test::random_values;
  MoeCase<T> c{s, shared, random_routing(s.N, s.E, s.k, seed), std::vector<std::int32_t>(s.N * s.k),
               std::vector<std::int32_t>(s.E), random_values<compute_t<T>>(s.N * s.k, seed + 1, 0.05, 1.0),
               random_values<T>(s.N * s.C, seed + 2, -1.0, 1.0), random_values<T>(s.N * s.C, seed + 3, -1.0, 1.0),
               random_values<T>(s.N * s.k * s.C, seed + 4, -1.0, 1.0),
               shared ? random_values<T>(s.N * s.C, seed + 5, -1.0, 1.0) : std::vector<T>(),
               shared ? random_values<T>(s.N, seed + 6, -4.0, 4.0) : std::vector<T>(),
               random_values<T>(s.N * s.C, seed + 7, -1.0, 1.0), random_values<T>(s.C, seed + 8, -1.0, 1.0),
               random_values<T>(s.N, seed + 9, -1.0, 1.0), random_values<T>(s.N * s.k * s.C, seed + 10, -1.0, 1.0),
               random_values<T>(s.N * s.C, seed + 11, -1.0, 1.0), random_values<T>(s.C, seed + 12, -1.0, 1.0)};
  cpu::moe_plan(c.rows.data(), c.counts.data(), c.experts.data(), s.N, s.E, s.k);
  return c;
}

// The same case in fp32: every tensor widened (exactly), the routing and weights as they are.
template <typename T>
MoeCase<float> widen_case(const MoeCase<T>& c) {
  using dtype_test::widen;
  return {c.shape,          c.shared,           c.experts,          c.rows,           c.counts,
          std::vector<float>(c.weights.begin(), c.weights.end()),   widen(c.x),       widen(c.residual),
          widen(c.expert_out), widen(c.shared_out), widen(c.shared_gate), widen(c.dout), widen(c.gate_weight),
          widen(c.dlogits), widen(c.dgrouped),  widen(c.dx_start),  widen(c.dweight_start)};
}

// nullptr for an empty vector (no shared expert).
template <typename V>
const V* data_or_null(const std::vector<V>& v) {
  return v.empty() ? nullptr : v.data();
}
template <typename V>
V* data_or_null(std::vector<V>& v) {
  return v.empty() ? nullptr : v.data();
}

// ---------------------------------------------------------------------------------------- the CPU kernels

// Each CPU kernel once on a case (out of place), its outputs returned.
template <typename T>
struct RouterOutputs {
  std::vector<compute_t<T>> probs;
  std::vector<std::int32_t> experts;
  std::vector<compute_t<T>> weights;
};
template <typename T>
RouterOutputs<T> cpu_router_forward(const std::vector<T>& logits, const MoeShape& s, bool renormalize) {
  RouterOutputs<T> r{std::vector<compute_t<T>>(s.N * s.E), std::vector<std::int32_t>(s.N * s.k),
                     std::vector<compute_t<T>>(s.N * s.k)};
  cpu::moe_router_forward(r.probs.data(), r.experts.data(), r.weights.data(), logits.data(), s.N, s.E, s.k,
                          renormalize);
  return r;
}
// aux empty: no load-balancing gradient.
template <typename T>
std::vector<T> cpu_router_backward(const std::vector<compute_t<T>>& dweights, const std::vector<compute_t<T>>& aux,
                                   const RouterOutputs<T>& fwd, const MoeShape& s, bool renormalize) {
  std::vector<T> dlogits(s.N * s.E);
  cpu::moe_router_backward(dlogits.data(), dweights.data(), data_or_null(aux), fwd.probs.data(), fwd.experts.data(),
                           s.N, s.E, s.k, renormalize);
  return dlogits;
}
template <typename T>
std::vector<T> cpu_dispatch(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  std::vector<T> grouped(s.N * s.k * s.C);
  cpu::moe_dispatch(grouped.data(), c.x.data(), c.rows.data(), s.N, s.k, s.C);
  return grouped;
}
template <typename T>
std::vector<T> cpu_dispatch_backward(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  std::vector<T> dx(s.N * s.C);
  cpu::moe_dispatch_backward(dx.data(), c.dgrouped.data(), c.rows.data(), s.N, s.k, s.C);
  return dx;
}
template <typename T>
std::vector<T> cpu_combine(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  std::vector<T> out(s.N * s.C);
  cpu::moe_combine(out.data(), c.residual.data(), c.expert_out.data(), c.weights.data(), c.rows.data(),
                   data_or_null(c.shared_out), data_or_null(c.shared_gate), s.N, s.k, s.C);
  return out;
}
template <typename T>
struct CombineGrads {
  std::vector<T> dexpert_out;
  std::vector<compute_t<T>> dweights;
  std::vector<T> dshared, dshared_gate;  // empty without a shared expert
};
template <typename T>
CombineGrads<T> cpu_combine_backward(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  CombineGrads<T> g{std::vector<T>(s.N * s.k * s.C), std::vector<compute_t<T>>(s.N * s.k),
                    std::vector<T>(c.shared ? s.N * s.C : 0), std::vector<T>(c.shared ? s.N : 0)};
  cpu::moe_combine_backward(g.dexpert_out.data(), g.dweights.data(), data_or_null(g.dshared),
                            data_or_null(g.dshared_gate), c.dout.data(), c.expert_out.data(), c.weights.data(),
                            c.rows.data(), data_or_null(c.shared_out), data_or_null(c.shared_gate), s.N, s.k, s.C);
  return g;
}
template <typename T>
std::vector<T> cpu_shared_gate_forward(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  std::vector<T> logits(s.N);
  cpu::moe_shared_gate_forward(logits.data(), c.x.data(), c.gate_weight.data(), s.N, s.C);
  return logits;
}
// From dx_start and dweight_start.
template <typename T>
struct SharedGateGrads {
  std::vector<T> dx, dweight;
};
template <typename T>
SharedGateGrads<T> cpu_shared_gate_backward(const MoeCase<T>& c) {
  const MoeShape& s = c.shape;
  SharedGateGrads<T> g{c.dx_start, c.dweight_start};
  cpu::moe_shared_gate_backward(g.dx.data(), g.dweight.data(), c.dlogits.data(), c.x.data(), c.gate_weight.data(), s.N,
                                s.C);
  return g;
}

// ---------------------------------------------------------------------------------------- references

// An output's exact value (in double) and its size (the formula on absolute values).
struct MoeRef {
  std::vector<double> value, size;
};

inline double moe_sigmoid_ref(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// The router, from moe.h's formulas: softmax, a stable sort by probability (ties: the lower
// index first), the weights unrounded. range[n] = max - min of row n (Y of the counts).
struct RouterRef {
  std::vector<double> probs, weights, range;
  std::vector<std::int32_t> experts;
};
inline RouterRef router_reference(const std::vector<double>& logits, std::size_t N, std::size_t E, std::size_t k,
                                  bool renormalize) {
  RouterRef r{std::vector<double>(N * E), std::vector<double>(N * k), std::vector<double>(N),
              std::vector<std::int32_t>(N * k)};
  std::vector<std::int32_t> order(E);
  for (std::size_t n = 0; n < N; ++n) {
    const double* x = &logits[n * E];
    const double m = *std::max_element(x, x + E), lo = *std::min_element(x, x + E);
    r.range[n] = m - lo;
    double sum = 0;
    for (std::size_t e = 0; e < E; ++e) sum += std::exp(x[e] - m);
    double* p = &r.probs[n * E];
    for (std::size_t e = 0; e < E; ++e) p[e] = std::exp(x[e] - m) / sum;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
    double selected = 0;
    for (std::size_t j = 0; j < k; ++j) selected += p[order[j]];
    for (std::size_t j = 0; j < k; ++j) {
      r.experts[n * k + j] = order[j];
      r.weights[n * k + j] = renormalize ? p[order[j]] / selected : p[order[j]];
    }
  }
  return r;
}

// dlogits from probs, experts, dweights and aux (empty: none), with the sizes of the file's comment.
inline MoeRef router_backward_reference(const std::vector<double>& probs, const std::vector<std::int32_t>& experts,
                                        const std::vector<double>& dweights, const std::vector<double>& aux,
                                        std::size_t N, std::size_t E, std::size_t k, bool renormalize) {
  MoeRef r{std::vector<double>(N * E), std::vector<double>(N * E)};
  std::vector<double> dp(E), size_dp(E);
  for (std::size_t n = 0; n < N; ++n) {
    const double* p = &probs[n * E];
    const std::int32_t* chosen = &experts[n * k];
    const double* dw = &dweights[n * k];
    for (std::size_t e = 0; e < E; ++e) {
      dp[e] = aux.empty() ? 0.0 : aux[e];
      size_dp[e] = std::fabs(dp[e]);
    }
    double S = 0, dot = 0, D1 = 0;
    for (std::size_t j = 0; j < k; ++j) S += p[chosen[j]];
    for (std::size_t i = 0; i < k; ++i) {
      dot += dw[i] * p[chosen[i]] / S;
      D1 += std::fabs(dw[i]) * p[chosen[i]] / S;
    }
    for (std::size_t j = 0; j < k; ++j) {
      dp[chosen[j]] += renormalize ? (dw[j] - dot) / S : dw[j];
      size_dp[chosen[j]] += renormalize ? (std::fabs(dw[j]) + D1) / S : std::fabs(dw[j]);
    }
    double p_dp = 0, Q = 0;
    for (std::size_t e = 0; e < E; ++e) {
      p_dp += p[e] * dp[e];
      Q += p[e] * size_dp[e];
    }
    for (std::size_t e = 0; e < E; ++e) {
      r.value[n * E + e] = p[e] * (dp[e] - p_dp);
      r.size[n * E + e] = p[e] * (size_dp[e] + Q);
    }
  }
  return r;
}

// out = residual + sum_j w_j eo[rows[n,j]] + s shared_out (shared_* empty: none).
inline MoeRef combine_reference(const std::vector<double>& residual, const std::vector<double>& expert_out,
                                const std::vector<double>& weights, const std::vector<std::int32_t>& rows,
                                const std::vector<double>& shared_out, const std::vector<double>& shared_gate,
                                std::size_t N, std::size_t k, std::size_t C) {
  MoeRef r{std::vector<double>(N * C), std::vector<double>(N * C)};
  for (std::size_t n = 0; n < N; ++n) {
    const double s = shared_out.empty() ? 0.0 : moe_sigmoid_ref(shared_gate[n]);
    for (std::size_t c = 0; c < C; ++c) {
      double y = residual[n * C + c], size = std::fabs(y);
      for (std::size_t j = 0; j < k; ++j) {
        const double t = weights[n * k + j] * expert_out[static_cast<std::size_t>(rows[n * k + j]) * C + c];
        y += t;
        size += std::fabs(t);
      }
      if (!shared_out.empty()) {
        y += s * shared_out[n * C + c];
        size += s * std::fabs(shared_out[n * C + c]);
      }
      r.value[n * C + c] = y;
      r.size[n * C + c] = size;
    }
  }
  return r;
}

struct CombineBackwardRef {
  MoeRef dexpert_out, dweights, dshared, dshared_gate;
};
inline CombineBackwardRef combine_backward_reference(const std::vector<double>& dout,
                                                     const std::vector<double>& expert_out,
                                                     const std::vector<double>& weights,
                                                     const std::vector<std::int32_t>& rows,
                                                     const std::vector<double>& shared_out,
                                                     const std::vector<double>& shared_gate, std::size_t N,
                                                     std::size_t k, std::size_t C) {
  const bool shared = !shared_out.empty();
  CombineBackwardRef r{{std::vector<double>(N * k * C), std::vector<double>(N * k * C)},
                       {std::vector<double>(N * k), std::vector<double>(N * k)},
                       {std::vector<double>(shared ? N * C : 0), std::vector<double>(shared ? N * C : 0)},
                       {std::vector<double>(shared ? N : 0), std::vector<double>(shared ? N : 0)}};
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t row = static_cast<std::size_t>(rows[n * k + j]);
      const double w = weights[n * k + j];
      double dot = 0, size = 0;
      for (std::size_t c = 0; c < C; ++c) {
        dot += dout[n * C + c] * expert_out[row * C + c];
        size += std::fabs(dout[n * C + c] * expert_out[row * C + c]);
        r.dexpert_out.value[row * C + c] = w * dout[n * C + c];
        r.dexpert_out.size[row * C + c] = std::fabs(w * dout[n * C + c]);
      }
      r.dweights.value[n * k + j] = dot;
      r.dweights.size[n * k + j] = size;
    }
    if (shared) {
      const double s = moe_sigmoid_ref(shared_gate[n]);
      double dot = 0, size = 0;
      for (std::size_t c = 0; c < C; ++c) {
        dot += dout[n * C + c] * shared_out[n * C + c];
        size += std::fabs(dout[n * C + c] * shared_out[n * C + c]);
        r.dshared.value[n * C + c] = s * dout[n * C + c];
        r.dshared.size[n * C + c] = std::fabs(s * dout[n * C + c]);
      }
      // 1 - s = sigma(-g), without the cancellation of 1 - sigma(g) (g = 20: 1 - s = 2e-9)
      const double s_one_minus_s = s * moe_sigmoid_ref(-shared_gate[n]);
      r.dshared_gate.value[n] = s_one_minus_s * dot;
      r.dshared_gate.size[n] = s_one_minus_s * size;
    }
  }
  return r;
}

inline MoeRef dispatch_backward_reference(const std::vector<double>& dgrouped, const std::vector<std::int32_t>& rows,
                                          std::size_t N, std::size_t k, std::size_t C) {
  MoeRef r{std::vector<double>(N * C), std::vector<double>(N * C)};
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t j = 0; j < k; ++j) {
        const double g = dgrouped[static_cast<std::size_t>(rows[n * k + j]) * C + c];
        r.value[n * C + c] += g;
        r.size[n * C + c] += std::fabs(g);
      }
  return r;
}

inline MoeRef shared_gate_forward_reference(const std::vector<double>& x, const std::vector<double>& weight,
                                            std::size_t N, std::size_t C) {
  MoeRef r{std::vector<double>(N), std::vector<double>(N)};
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) {
      r.value[n] += x[n * C + c] * weight[c];
      r.size[n] += std::fabs(x[n * C + c] * weight[c]);
    }
  return r;
}

// dx, dweight after the accumulation from their start values.
struct SharedGateBackwardRef {
  MoeRef dx, dweight;
};
inline SharedGateBackwardRef shared_gate_backward_reference(const std::vector<double>& dx0,
                                                            const std::vector<double>& dweight0,
                                                            const std::vector<double>& dlogits,
                                                            const std::vector<double>& x,
                                                            const std::vector<double>& weight, std::size_t N,
                                                            std::size_t C) {
  SharedGateBackwardRef r{{std::vector<double>(N * C), std::vector<double>(N * C)},
                          {std::vector<double>(C), std::vector<double>(C)}};
  for (std::size_t c = 0; c < C; ++c) {
    r.dweight.value[c] = dweight0[c];
    r.dweight.size[c] = std::fabs(dweight0[c]);
  }
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t c = 0; c < C; ++c) {
      r.dx.value[n * C + c] = dx0[n * C + c] + dlogits[n] * weight[c];
      r.dx.size[n * C + c] = std::fabs(dx0[n * C + c]) + std::fabs(dlogits[n] * weight[c]);
      r.dweight.value[c] += dlogits[n] * x[n * C + c];
      r.dweight.size[c] += std::fabs(dlogits[n] * x[n * C + c]);
    }
  return r;
}

// ---------------------------------------------------------------------------------------- the cases

// The router's cases, the same in both tests: every shape of kMoeShapes, renormalized and not,
// each with a second choice (`second`: the forward's tied logits instead of gapped ones, the
// backward's load-balancing gradient); each case's seeds start at its own `seed`.
struct RouterCase {
  MoeShape shape;
  bool renormalize, second;
  std::uint64_t seed;
};
inline std::vector<RouterCase> router_cases(std::uint64_t seed) {
  std::vector<RouterCase> cases;
  for (const MoeShape& s : kMoeShapes)
    for (const bool renormalize : {true, false})
      for (const bool second : {false, true}) cases.push_back({s, renormalize, second, seed += 10});
  return cases;
}
// e.g. "N=37 E=8 k=1 C=19 renormalized tied logits" (second_name: what `second` means here).
inline std::string case_name(const RouterCase& r, const std::string& second_name) {
  return shape_name(r.shape) + (r.renormalize ? " renormalized" : "") + (r.second ? " " + second_name : "");
}
template <typename T>
std::vector<T> router_logits(const RouterCase& r) {
  return r.second ? tied_logits<T>(r.shape.N, r.shape.E, r.seed) : gapped_logits<T>(r.shape.N, r.shape.E, r.seed);
}

// A router backward's inputs (the CPU forward of gapped logits, dweights in [-1, 1], the
// load-balancing gradient in [-0.5, 0.5] or none) and its double reference.
template <typename T>
struct RouterBackwardCase {
  RouterOutputs<T> fwd;
  std::vector<compute_t<T>> dweights, aux;
  MoeRef ref;
};
template <typename T>
RouterBackwardCase<T> router_backward_case(const RouterCase& r) {
  using dtype_test::random_values;
  using dtype_test::to_double;
  using A = compute_t<T>;
  const MoeShape& s = r.shape;
  RouterBackwardCase<T> c{cpu_router_forward(gapped_logits<T>(s.N, s.E, r.seed), s, r.renormalize),
                          random_values<A>(s.N * s.k, r.seed + 1, -1.0, 1.0),
                          r.second ? random_values<A>(s.E, r.seed + 2, -0.5, 0.5) : std::vector<A>(),
                          {}};
  c.ref = router_backward_reference(to_double(c.fwd.probs), c.fwd.experts, to_double(c.dweights), to_double(c.aux),
                                    s.N, s.E, s.k, r.renormalize);
  return c;
}

// The dispatch, combine and shared-gate kernels' cases: one per shape of kMoeShapes and choice
// of `shared` (without, with a shared expert), seeds 20 apart from `seed`.
template <typename T>
std::vector<MoeCase<T>> moe_cases(std::initializer_list<bool> shared, std::uint64_t seed) {
  std::vector<MoeCase<T>> cases;
  for (const MoeShape& s : kMoeShapes)
    for (const bool with_shared : shared) cases.push_back(moe_case<T>(s, with_shared, seed += 20));
  return cases;
}
template <typename T>
std::string case_name(const MoeCase<T>& c) {
  return shape_name(c.shape) + (c.shared ? " shared" : "");
}

// ---------------------------------------------------------------------------------------- comparison

using dtype_test::within_bounds;  // the per-element comparison the tests make

// The rounding of a computed value to T: u(T) relative, and up to 2^-25 absolute for fp16's
// subnormals (values below 2^-14 are multiples of 2^-24). float and double: nothing more.
template <typename T>
double moe_rounding(double value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    (void)value;
    return 0.0;
  } else {
    return dtype_test::unit_roundoff<T>() * std::fabs(value) + (std::is_same_v<T, fp16> ? 0x1p-25 : 0.0);
  }
}

}  // namespace trainmem::kernels::moe_test
