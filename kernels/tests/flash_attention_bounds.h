// How far a 16-bit flash attention may be from the exact one: a bound per output element, derived
// from the unit roundoffs (u of the 16-bit type: 2^-8 bf16, 2^-11 fp16; u32 = 2^-24) and the sizes
// T and D, evaluated on the inputs (host code only: the CPU and CUDA tests both use it).
//
// Notation: for query row i of a head, s_ij = scale q_i.k_j, p_ij = softmax_j(s_ij) over the visible
// keys, gamma_n(n) = n u32 / (1 - n u32): the relative error of an fp32 sum or product chain of n
// roundings (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.4, 4.2).
//
// Forward. Both the fp32 reference and the kernel compute s_ij in fp32 from the same 16-bit q, k
// (products exact in fp32): each is off by at most sigma_ij = gamma_n(D + 2) scale sum_d |q_id k_jd|,
// which moves exp(s_ij) by 1.05 sigma_ij relative (sigma < 0.05). The kernel may round the
// unnormalized p to 16 bits before P V (u), and the exps and the per-tile rescalings add
// gamma_n(3 (T/32 + 3)). So each weight is off by at most rho_i = u + 2.1 max_j sigma_ij + that,
// relative. A weighted mean with weights perturbed by at most rho moves by at most
// 2 rho / (1 - rho) sum_j p_ij |v_jd|; the fp32 sums over T keys add 2 gamma_n(T + 2) of the same
// magnitude, and out is rounded once (u |out|):
//   |out - exact| <= (2 rho_i / (1 - rho_i) + 2 gamma_n(T + 2)) M_id (1 + 4u) + u |out_ref|,
//   M_id = sum_j p_ij |v_jd|.
// (1 + 4u) covers the second-order terms, products of two relative errors each below 2u.
// lse = log sum_j exp(s_ij) is fp32 (the kernels sum the unrounded p): off by at most
//   lambda_i = 2.1 max_j sigma_ij + 2 gamma_n(T + 2) + gamma_n(3 (T/32 + 3)) + 2 u32 |lse_i|.
//
// Backward, from an out rounded to 16 bits (o16) and an lse, each within its bound above (the
// reference's, or a kernel's own forward's):
//   dv_j = sum_i p_ij do_i;  dp_ij = do_i.v_j;  D_i = do_i.o16_i;  ds_ij = p_ij (dp_ij - D_i);
//   dq_i = scale sum_j ds_ij k_j;  dk_j = scale sum_i ds_ij q_i.
// The rebuilt p is off by rho_i + 2.1 lambda_i (lse within lambda_i); dp by
// eps_dp = 2 gamma_n(D) sum_d |do_id v_jd| (both sides); D_i by eps_D = sum_d |do_id| (out's bound)_id
// + 2 gamma_n(D + T + 2) sum_d |do_id o_id| + gamma_n(T + 2) sum_j p_ij |dp_ij| (the reference sums
// p dp instead). ds may be rounded to 16 bits (u). So
//   |ds_ij - exact| <= Dds_ij = (1 + 4u) p_ij ((rho_i + 2.1 lambda_i + u) |dp_ij - D_i| + eps_dp + eps_D)
// and each gradient is a sum over T of ds (or p) times a 16-bit value, in fp32, rounded once:
//   |dv_jd - exact| <= (1 + 4u) sum_i (rho_i + 2.1 lambda_i + 2 gamma_n(T + 2)) p_ij |do_id| + u |dv_ref|
//   |dq_id - exact| <= (1 + 4u) scale sum_j (Dds_ij + 2 gamma_n(T + 2) |ds_ij|) |k_jd| + u |dq_ref|
//   |dk_jd - exact| <= (1 + 4u) scale sum_i (Dds_ij + 2 gamma_n(T + 2) |ds_ij|) |q_id| + u |dk_ref|
// fp16 has subnormals below 2^-14: there rounding is off by up to a = 2^-25 absolute instead of u
// relative (bf16's start below 1e-38: a = 0). Each 16-bit rounding adds its a: a for each output;
// 2 a sum_j |v_jd| to out (p <= 1 before the division by l >= 1); a sum_i |do_id| to dv; scale a
// sum_j |k_jd| to dq and scale a sum_i |q_id| to dk (ds rounded).
// The fp32 reference is within these bounds' fp32 parts of the exact values, so comparing a kernel
// with it uses the bound as is (its fp32 parts are counted for both sides above).
// Grouped K/V heads (shape.Hkv, kernels/attention_heads.h): query head h reads K/V head
// g = h / group, and dk_g, dv_g sum the terms of all the group's query heads, so their fp32 sums
// run over group * T terms: 2 gamma_n(group T + 2) in place of 2 gamma_n(T + 2) in dk and dv (the
// same for group = 1). A kernel that rounds each query head's dk and dv to 16 bits before adding
// the group (cuDNN's GQA backward may) is off by up to u_head sum_i |term| more, for which
// `per_head_u` = u is passed (0: summed in fp32, the default).
// Every sum here is evaluated in double on the inputs (O(T^2 D) per head).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/flash_attention.h"

namespace trainmem::kernels::flash_test {

// Per-element bounds on |result - reference|; dq as [B, T, C], dk, dv as [B, T, Hkv*D] (the parts
// of dqkv).
struct FlashBounds {
  std::vector<double> out, lse, dq, dk, dv;
};

// qkv [B, T, (H + 2 Hkv) D], dout and out_ref [B, T, C], lse_ref [B, H, T]: the widened 16-bit inputs
// and the fp32 reference's outputs; dq_ref, dk_ref, dv_ref its gradients ([B, T, C], [B, T, Hkv*D]
// twice). u: the 16-bit type's unit roundoff, a: its absolute rounding error below the normal
// range (2^-25 fp16, 0 bf16).
inline FlashBounds flash_attention_bounds(const std::vector<float>& qkv, const std::vector<float>& dout,
                                          const std::vector<float>& out_ref, const std::vector<float>& lse_ref,
                                          const std::vector<float>& dq_ref, const std::vector<float>& dk_ref,
                                          const std::vector<float>& dv_ref, const AttentionShape& s, double u,
                                          double a, double per_head_u = 0.0) {
  const std::size_t B = s.B, T = s.T, H = s.H, D = s.D, C = s.C();
  const std::size_t W = s.qkv_width(), Ckv = s.kv_heads() * D, group = s.group();
  const double u32 = 0x1p-24, scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto gamma_n = [&](double n) { return n * u32 / (1 - n * u32); };
  const double exp_chain = gamma_n(3.0 * (static_cast<double>(T) / 32.0 + 3.0));
  const double g_T = gamma_n(static_cast<double>(T) + 2), g_D = gamma_n(static_cast<double>(D));
  const double g_kv = gamma_n(static_cast<double>(group * T) + 2);  // dk, dv: sums over the group's heads
  const double second_order = 1 + 4 * u;

  FlashBounds r;
  r.out.assign(B * T * C, 0.0);
  r.lse.assign(B * H * T, 0.0);
  r.dq.assign(B * T * C, 0.0);
  r.dk.assign(B * T * Ckv, 0.0);
  r.dv.assign(B * T * Ckv, 0.0);
  std::vector<double> p(T), dp(T), ds_err(T), ds_abs(T), m(D), m32(D);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / group;  // its K/V head
      auto q = [&](std::size_t t, std::size_t d) { return static_cast<double>(qkv[(b * T + t) * W + h * D + d]); };
      auto k = [&](std::size_t t, std::size_t d) { return static_cast<double>(qkv[(b * T + t) * W + C + g * D + d]); };
      auto v = [&](std::size_t t, std::size_t d) {
        return static_cast<double>(qkv[(b * T + t) * W + C + Ckv + g * D + d]);
      };
      auto at = [&](std::size_t t, std::size_t d) { return (b * T + t) * C + h * D + d; };
      auto at_kv = [&](std::size_t t, std::size_t d) { return (b * T + t) * Ckv + g * D + d; };
      for (std::size_t i = 0; i < T; ++i) {
        const std::size_t visible = s.causal ? i + 1 : T;
        // scores, their fp32 error, and the exact probabilities
        double max_score = -INFINITY, max_sigma = 0;
        for (std::size_t j = 0; j < visible; ++j) {
          double dot = 0, dot_abs = 0;
          for (std::size_t d = 0; d < D; ++d) {
            dot += q(i, d) * k(j, d);
            dot_abs += std::fabs(q(i, d) * k(j, d));
          }
          p[j] = scale * dot;
          max_score = std::max(max_score, p[j]);
          max_sigma = std::max(max_sigma, gamma_n(static_cast<double>(D) + 2) * scale * dot_abs);
        }
        double sum = 0;
        for (std::size_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - max_score));
        for (std::size_t j = 0; j < visible; ++j) p[j] /= sum;
        const std::size_t row = (b * H + h) * T + i;
        const double rho = u + 2.1 * max_sigma + exp_chain;
        const double lambda = 2.1 * max_sigma + 2 * g_T + exp_chain + 2 * u32 * std::fabs(lse_ref[row]);
        r.lse[row] = lambda;
        // out: M_id = sum_j p_ij |v_jd|
        double eps_d = 0, do_o = 0;
        for (std::size_t d = 0; d < D; ++d) {
          double mag = 0, v_abs = 0;
          for (std::size_t j = 0; j < visible; ++j) {
            mag += p[j] * std::fabs(v(j, d));
            v_abs += std::fabs(v(j, d));
          }
          r.out[at(i, d)] = (2 * rho / (1 - rho) + 2 * g_T) * mag * second_order + 2 * a * v_abs +
                            u * std::fabs(out_ref[at(i, d)]) + a;
          const double dod = std::fabs(dout[at(i, d)]);
          do_o += dod * std::fabs(out_ref[at(i, d)]);
          eps_d += dod * r.out[at(i, d)];
        }
        // backward: dp, D_i, ds and their errors
        double D_exact = 0, p_dp = 0;
        for (std::size_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (std::size_t d = 0; d < D; ++d) dot += dout[at(i, d)] * v(j, d);
          dp[j] = dot;
          D_exact += p[j] * dot;
          p_dp += p[j] * std::fabs(dot);
        }
        eps_d += 2 * gamma_n(static_cast<double>(D + T) + 2) * do_o + g_T * p_dp;
        const double rho_b = rho + 2.1 * lambda;
        for (std::size_t j = 0; j < visible; ++j) {
          double dot_abs = 0;
          for (std::size_t d = 0; d < D; ++d) dot_abs += std::fabs(dout[at(i, d)] * v(j, d));
          const double eps_dp = 2 * g_D * dot_abs;
          ds_abs[j] = p[j] * std::fabs(dp[j] - D_exact);
          ds_err[j] = second_order * ((rho_b + u) * ds_abs[j] + p[j] * (eps_dp + eps_d));
        }
        for (std::size_t d = 0; d < D; ++d) {
          double dq = 0;
          for (std::size_t j = 0; j < visible; ++j) {
            const double w = ds_err[j] + 2 * g_T * ds_abs[j] + a;
            dq += w * std::fabs(k(j, d));
            const double w_kv = ds_err[j] + (2 * g_kv + per_head_u) * ds_abs[j] + a;
            r.dk[at_kv(j, d)] += second_order * scale * w_kv * std::fabs(q(i, d));
            r.dv[at_kv(j, d)] +=
                (second_order * (rho_b + 2 * g_kv + per_head_u) * p[j] + a) * std::fabs(dout[at(i, d)]);
          }
          r.dq[at(i, d)] = second_order * scale * dq;
        }
      }
    }
  for (std::size_t e = 0; e < r.dq.size(); ++e) r.dq[e] += u * std::fabs(dq_ref[e]) + a;
  const double head_roundings = per_head_u > 0 ? static_cast<double>(group) * a : 0.0;  // their a each
  for (std::size_t e = 0; e < r.dk.size(); ++e) {
    r.dk[e] += u * std::fabs(dk_ref[e]) + a + head_roundings;
    r.dv[e] += u * std::fabs(dv_ref[e]) + a + head_roundings;
  }
  return r;
}

// |got - ref| <= bound, element by element (NaN never passes); on failure, how many and the first ones.
inline ::testing::AssertionResult within_bounds(const std::string& what, const std::vector<float>& got,
                                                const std::vector<float>& ref, const std::vector<double>& bound) {
  if (got.size() != ref.size() || got.size() != bound.size())
    return ::testing::AssertionFailure() << what << ": sizes " << got.size() << ", " << ref.size() << ", " << bound.size();
  std::size_t wrong = 0;
  double worst_ratio = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double diff = std::fabs(static_cast<double>(got[e]) - ref[e]);
    if (diff <= bound[e]) continue;  // false for NaN
    if (!std::isnan(diff)) worst_ratio = std::max(worst_ratio, diff / bound[e]);
    if (wrong < 5) first << "\n    [" << e << "] got " << got[e] << "  ref " << ref[e] << "  |diff| " << diff << "  bound " << bound[e];
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << wrong << " of " << got.size()
                                       << " elements beyond the derived bound (worst |diff|/bound " << worst_ratio
                                       << "); first ones:" << first.str();
}

}  // namespace trainmem::kernels::flash_test
