// Grouped-query attention (GQA, kernels/attention_heads.h) on the CPU: the naive kernel
// (kernels/attention.h), the flash attention and the materialized reference
// (kernels/flash_attention.h) with Hkv K/V heads shared by groups of H/Hkv query heads, in double,
// float, bf16 and fp16, on fresh random inputs (seeded, never zero):
//   1. GQA = multi-head attention on the K/V heads repeated out (each K/V head copied to the query
//      heads of its group, as repeat_interleave does; the copies are this test's, the kernels read
//      K/V in place). Every query head's arithmetic is the same in both, so out, lse, the naive
//      kernel's scores and probabilities, dq and dscores are equal BIT FOR BIT; dk and dv of a K/V
//      head equal the sum over its group of the repeated heads' dk, dv within the bound derived at
//      sum_order_bound (the same terms, added in another order and rounded once instead of once
//      per head). Hkv in {1, 2, H}, H in {4, 8}, causal and not (the naive kernel: causal only);
//      Hkv = H given explicitly is bit for bit the default shape (Hkv = 0).
//   2. The three kernels agree with GQA: in double within 1e-12 of the reference (the criterion of
//      test_flash_attention_cpu.cpp), in float within 1e-5 (float's accuracy, ibid.), in bf16 and
//      fp16 each within the per-element bounds of flash_attention_bounds.h of the fp32 reference.
//   3. The double reference's GQA backward is the derivative of its forward (central differences).
//   4. A K/V head count that does not divide H is refused (std::invalid_argument), by every kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/attention_test_support.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/flash_attention_bounds.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;
using attention_test::grouped_shape;
using attention_test::part;

// The storage types, double first (the CPU reference's checking type).
using GqaTypes = ::testing::Types<double, float, bf16, fp16>;

template <typename T>
class AttentionGqaCpu : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionGqaCpu, GqaTypes, DtypeNames);

enum class Kernel { naive, flash, reference };
const char* kernel_name(Kernel k) {
  return k == Kernel::naive ? "naive" : k == Kernel::flash ? "flash" : "reference";
}

std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " Hkv=" + std::to_string(s.kv_heads()) + " D=" + std::to_string(s.D) + (s.causal ? " causal" : " full");
}

// The shapes of part 1: H = 4 and 8, Hkv = 1, 2, H; T = 37 and tiles 16 x 8 (three query tiles,
// five key tiles, the last ones short) for flash.
std::vector<AttentionShape> gqa_shapes() {
  std::vector<AttentionShape> out;
  for (bool causal : {true, false})
    for (std::size_t H : {4u, 8u})
      for (std::size_t Hkv : {std::size_t{1}, std::size_t{2}, H})
        out.push_back(grouped_shape(2, 37, H, Hkv, 8, causal));
  return out;
}
constexpr std::size_t kBlockQ = 16, kBlockK = 8;

// The same attention with every K/V head repeated for each query head of its group: shape with
// Hkv = 0 (= H), and qkv [B, T, 3C] whose k and v head h are the GQA K/V head h / group.
AttentionShape repeated_shape(const AttentionShape& s) {
  AttentionShape full = s;
  full.Hkv = 0;
  return full;
}
template <typename T>
std::vector<T> repeat_kv(const std::vector<T>& qkv, const AttentionShape& s) {
  const std::size_t C = s.C(), D = s.D, W = s.qkv_width(), Ckv = s.kv_heads() * D;
  std::vector<T> full(s.B * s.T * 3 * C);
  for (std::size_t row = 0; row < s.B * s.T; ++row) {
    const T* src = &qkv[row * W];
    T* dst = &full[row * 3 * C];
    for (std::size_t i = 0; i < C; ++i) dst[i] = src[i];  // q as is
    for (std::size_t h = 0; h < s.H; ++h)
      for (std::size_t d = 0; d < D; ++d) {
        const std::size_t g = h / s.group();
        dst[C + h * D + d] = src[C + g * D + d];             // k
        dst[2 * C + h * D + d] = src[C + Ckv + g * D + d];  // v
      }
  }
  return full;
}

// The repeated version's dk or dv (part 1 or 2 of its dqkv, [B, T, C]) summed over each group, in
// double, as [B, T, Hkv * D]; and the sum of their magnitudes (for the rounding of each).
struct GroupSum {
  std::vector<double> sum, abs_sum;
};
template <typename T>
GroupSum group_sum(const std::vector<T>& full_part, const AttentionShape& s) {
  const std::size_t D = s.D, C = s.C(), Ckv = s.kv_heads() * D;
  GroupSum r{std::vector<double>(s.B * s.T * Ckv, 0.0), std::vector<double>(s.B * s.T * Ckv, 0.0)};
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    for (std::size_t h = 0; h < s.H; ++h)
      for (std::size_t d = 0; d < D; ++d) {
        const double x = load(full_part[row * C + h * D + d]);
        r.sum[row * Ckv + (h / s.group()) * D + d] += x;
        r.abs_sum[row * Ckv + (h / s.group()) * D + d] += std::fabs(x);
      }
  return r;
}

// The outputs of one kernel's forward, then backward (from that forward's own outputs).
template <typename T>
struct Outputs {
  std::vector<T> out, preatt, att, dqkv, dscores;  // preatt, att, dscores: the naive kernel only
  std::vector<compute_t<T>> lse;                   // flash and reference only
};
template <typename T>
Outputs<T> run(Kernel kernel, const AttentionShape& s, const std::vector<T>& qkv, const std::vector<T>& dout) {
  Outputs<T> r;
  r.out.resize(s.B * s.T * s.C());
  r.dqkv.resize(qkv.size());
  if (kernel == Kernel::naive) {
    const std::size_t scores = s.B * s.H * s.T * s.T;
    r.preatt.resize(scores);
    r.att.resize(scores);
    r.dscores.resize(scores);
    cpu::attention_forward(r.out.data(), r.preatt.data(), r.att.data(), qkv.data(), s.B, s.T, s.C(), s.H, s.Hkv);
    cpu::attention_backward(r.dqkv.data(), r.dscores.data(), dout.data(), qkv.data(), r.att.data(), s.B, s.T, s.C(),
                            s.H, s.Hkv);
    return r;
  }
  r.lse.resize(s.B * s.H * s.T);
  if (kernel == Kernel::flash) {
    cpu::flash_attention_forward(r.out.data(), r.lse.data(), qkv.data(), s, kBlockQ, kBlockK);
    cpu::flash_attention_backward(r.dqkv.data(), dout.data(), qkv.data(), r.out.data(), r.lse.data(), s, kBlockQ,
                                  kBlockK);
  } else {
    cpu::attention_reference_forward(r.out.data(), r.lse.data(), qkv.data(), s);
    cpu::attention_reference_backward(r.dqkv.data(), dout.data(), qkv.data(), s);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// The bound of part 1 on |dk_gqa - sum_h dk_h| (and dv), per element of a K/V head.
//
// Both sides add the same terms x_i (one per query head h of the group and query row t: for dk,
// x = fl(scale dS_h[t,u]) q_h[t,d] or, on BLAS, dS_h[t,u] q_h[t,d] scaled once; for dv,
// P_h[t,u] dO_h[t,d]), computed from bit-identical dS_h, P_h (part 1 checks the naive kernel's
// dscores and probabilities bit for bit; flash and the reference rebuild P, dS from the same
// bits), n = group * T of them, in the compute type F (unit roundoff u_F). Any order of a sum of
// n terms, with up to two more roundings for the scale and the product, is within
// gamma(n + 2) sum_i |x_i| of the exact sum of those terms (gamma(n) = n u_F / (1 - n u_F);
// Higham, eq. 3.4, 4.2), GQA summing all n at once, the repeated heads T each: so the two differ
// by at most 2 gamma(n + 2) sum_i |x_i|. In a 16-bit T each stored value is rounded once more:
// u_T |dk_gqa| on one side and u_T |dk_h| per head on the other (plus 2^-25 each below fp16's
// normal range). The test's own sum of the heads is in double (error below 2^-53 of it).
// sum_i |x_i| is bounded from the exact softmax on the inputs (double): with
// A_tu = sum_d |dO_td| |v_ud| (>= |dP_tu|), Abar_t = sum_u p_tu A_tu (>= |D_t| = |dO_t . o_t| and
// >= |sum_u p_tu dP_tu|), |dS_tu| <= p_tu (A_tu + Abar_t); the computed p, dP, D, dS are each
// within a relative 2^-7 of these (fp32 errors below 1e-5 at these sizes, and the naive kernel's
// 16-bit att within u_T <= 2^-8), so |x_i| <= 2 times the exact magnitude:
//   sum_i |x_i| <= 2 scale sum_{h,t} p_tu (A_tu + Abar_t) |q_htd|     (dk)
//   sum_i |x_i| <= 2 sum_{h,t} p_tu |dO_htd|                         (dv)
struct KvMagnitudes {
  std::vector<double> dk, dv;  // [B, T, Hkv * D]
};
KvMagnitudes kv_magnitudes(const std::vector<double>& qkv, const std::vector<double>& dout, const AttentionShape& s) {
  const std::size_t T = s.T, D = s.D, C = s.C(), W = s.qkv_width(), Ckv = s.kv_heads() * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  KvMagnitudes m{std::vector<double>(s.B * T * Ckv, 0.0), std::vector<double>(s.B * T * Ckv, 0.0)};
  std::vector<double> p(T), A(T);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.H; ++h) {
      const std::size_t g = h / s.group();
      auto q = [&](std::size_t t, std::size_t d) { return qkv[(b * T + t) * W + h * D + d]; };
      auto k = [&](std::size_t t, std::size_t d) { return qkv[(b * T + t) * W + C + g * D + d]; };
      auto v = [&](std::size_t t, std::size_t d) { return qkv[(b * T + t) * W + C + Ckv + g * D + d]; };
      auto dO = [&](std::size_t t, std::size_t d) { return dout[(b * T + t) * C + h * D + d]; };
      for (std::size_t t = 0; t < T; ++t) {
        const std::size_t visible = s.causal ? t + 1 : T;
        double max = -std::numeric_limits<double>::infinity(), sum = 0, Abar = 0;
        for (std::size_t u = 0; u < visible; ++u) {
          double dot = 0;
          for (std::size_t d = 0; d < D; ++d) dot += q(t, d) * k(u, d);
          p[u] = scale * dot;
          max = std::max(max, p[u]);
        }
        for (std::size_t u = 0; u < visible; ++u) sum += (p[u] = std::exp(p[u] - max));
        for (std::size_t u = 0; u < visible; ++u) {
          p[u] /= sum;
          A[u] = 0;
          for (std::size_t d = 0; d < D; ++d) A[u] += std::fabs(dO(t, d) * v(u, d));
          Abar += p[u] * A[u];
        }
        for (std::size_t u = 0; u < visible; ++u)
          for (std::size_t d = 0; d < D; ++d) {
            const std::size_t e = (b * T + u) * Ckv + g * D + d;
            m.dk[e] += 2 * scale * p[u] * (A[u] + Abar) * std::fabs(q(t, d));
            m.dv[e] += 2 * p[u] * std::fabs(dO(t, d));
          }
      }
    }
  return m;
}

template <typename T>
std::vector<double> sum_order_bound(const std::vector<double>& magnitude, const std::vector<T>& gqa,
                                    const GroupSum& heads, const AttentionShape& s) {
  using F = compute_t<T>;
  const double u_F = unit_roundoff<F>(), n = static_cast<double>(s.group() * s.T) + 2;
  const double gamma = n * u_F / (1 - n * u_F);
  const bool sixteen = !std::is_same_v<T, F>;
  const double u_T = sixteen ? unit_roundoff<T>() : 0.0;
  const double a = std::is_same_v<T, fp16> ? 0x1p-25 * static_cast<double>(s.group() + 1) : 0.0;
  std::vector<double> bound(magnitude.size());
  for (std::size_t e = 0; e < bound.size(); ++e)
    bound[e] = 2 * gamma * magnitude[e] + u_T * (std::fabs(static_cast<double>(load(gqa[e]))) + heads.abs_sum[e]) +
               a + 0x1p-52 * heads.abs_sum[e];
  return bound;
}

template <typename T>
::testing::AssertionResult within(const std::string& what, const std::vector<T>& got, const std::vector<double>& want,
                                  const std::vector<double>& bound) {
  std::size_t wrong = 0;
  double worst = 0;
  std::string first;
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double diff = std::fabs(static_cast<double>(load(got[e])) - want[e]);
    if (diff <= bound[e]) continue;  // false for NaN
    worst = std::max(worst, diff / bound[e]);
    if (wrong++ < 5)
      first += "\n    [" + std::to_string(e) + "] got " + std::to_string(load(got[e])) + " want " +
               std::to_string(want[e]) + " bound " + std::to_string(bound[e]);
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name<T>() << "): " << wrong << " of " << got.size()
                                       << " beyond the bound (worst |diff|/bound " << worst << ")" << first;
}

// ---------------------------------------------------------------------------------------------
// 1. GQA = the repeated heads.

TYPED_TEST(AttentionGqaCpu, EqualsMultiHeadAttentionOnRepeatedKvHeads) {
  using T = TypeParam;
  std::uint64_t seed = 10;
  for (const AttentionShape& s : gqa_shapes())
    for (Kernel kernel : {Kernel::naive, Kernel::flash, Kernel::reference}) {
      if (kernel == Kernel::naive && !s.causal) continue;  // the naive kernel is causal
      SCOPED_TRACE(std::string(kernel_name(kernel)) + " " + describe(s));
      const AttentionShape full = repeated_shape(s);
      const std::vector<T> qkv = random_values<T>(s.B * s.T * s.qkv_width(), ++seed, -2.0, 2.0);
      const std::vector<T> dout = random_values<T>(s.B * s.T * s.C(), ++seed, -1.0, 1.0);
      const Outputs<T> gqa = run(kernel, s, qkv, dout);
      const Outputs<T> rep = run(kernel, full, repeat_kv(qkv, s), dout);

      EXPECT_TRUE(same_bits("out", gqa.out, rep.out));
      EXPECT_TRUE(same_bits("lse", gqa.lse, rep.lse));
      EXPECT_TRUE(same_bits("preatt", gqa.preatt, rep.preatt));
      EXPECT_TRUE(same_bits("att", gqa.att, rep.att));
      EXPECT_TRUE(same_bits("dscores", gqa.dscores, rep.dscores));
      EXPECT_TRUE(same_bits("dq", part(gqa.dqkv, s, 0), part(rep.dqkv, full, 0)));
      if (s.group() == 1) {  // Hkv = H explicitly: the default shape, bit for bit
        EXPECT_TRUE(same_bits("dqkv (Hkv = H)", gqa.dqkv, rep.dqkv));
        continue;
      }
      const KvMagnitudes mag = kv_magnitudes(to_double(qkv), to_double(dout), s);
      const std::vector<T> dk = part(gqa.dqkv, s, 1), dv = part(gqa.dqkv, s, 2);
      const GroupSum dk_heads = group_sum(part(rep.dqkv, full, 1), s), dv_heads = group_sum(part(rep.dqkv, full, 2), s);
      EXPECT_TRUE(within("dk = sum of the group's dk", dk, dk_heads.sum, sum_order_bound(mag.dk, dk, dk_heads, s)));
      EXPECT_TRUE(within("dv = sum of the group's dv", dv, dv_heads.sum, sum_order_bound(mag.dv, dv, dv_heads, s)));
    }
}

// ---------------------------------------------------------------------------------------------
// 2. The kernels agree.

// max |got - want| / max |want| (infinite if got has a NaN)
template <typename G>
double rel_err(const std::vector<G>& got, const std::vector<G>& want) {
  double worst = 0, largest = 1e-300;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(load(got[i])) - static_cast<double>(load(want[i])));
    worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(worst, diff);
    largest = std::max(largest, std::fabs(static_cast<double>(load(want[i]))));
  }
  return worst / largest;
}

TYPED_TEST(AttentionGqaCpu, NaiveFlashAndReferenceAgree) {
  using T = TypeParam;
  std::uint64_t seed = 300;
  for (const AttentionShape& s : gqa_shapes()) {
    if (s.group() == 1) continue;  // multi-head attention: test_flash_attention*_cpu
    SCOPED_TRACE(describe(s));
    const std::vector<T> qkv = random_values<T>(s.B * s.T * s.qkv_width(), ++seed, -2.0, 2.0);
    const std::vector<T> dout = random_values<T>(s.B * s.T * s.C(), ++seed, -1.0, 1.0);
    if constexpr (std::is_same_v<T, compute_t<T>>) {
      // double: 1e-12; float: 1e-5, both relative to the largest reference value
      const double tol = std::is_same_v<T, double> ? 1e-12 : 1e-5;
      const Outputs<T> ref = run(Kernel::reference, s, qkv, dout);
      for (Kernel kernel : {Kernel::flash, Kernel::naive}) {
        if (kernel == Kernel::naive && !s.causal) continue;
        SCOPED_TRACE(kernel_name(kernel));
        const Outputs<T> got = run(kernel, s, qkv, dout);
        EXPECT_LT(rel_err(got.out, ref.out), tol) << "out";
        if (kernel == Kernel::flash) {
          EXPECT_LT(rel_err(got.lse, ref.lse), tol) << "lse";
        }
        for (int which = 0; which < 3; ++which)
          EXPECT_LT(rel_err(part(got.dqkv, s, which), part(ref.dqkv, s, which)), tol) << "d" << "qkv"[which];
      }
    } else {
      // 16 bits: each kernel in T within the derived per-element bounds of the fp32 reference on
      // the same (widened) inputs; flash's backward from the reference's out (rounded) and lse, as
      // in test_flash_attention_bounds_cpu.cpp; the naive one from its own probabilities.
      const attention_test::Fp32Reference ref = attention_test::fp32_reference_for<T>(widen(qkv), widen(dout), s);
      const std::vector<T> out16 = narrow<T>(ref.out);
      for (Kernel kernel : {Kernel::reference, Kernel::flash, Kernel::naive}) {
        if (kernel == Kernel::naive && !s.causal) continue;
        SCOPED_TRACE(kernel_name(kernel));
        Outputs<T> got = run(kernel, s, qkv, dout);
        if (kernel == Kernel::flash)
          cpu::flash_attention_backward(got.dqkv.data(), dout.data(), qkv.data(), out16.data(), ref.lse.data(), s,
                                        kBlockQ, kBlockK);
        EXPECT_TRUE(flash_test::within_bounds("out", widen(got.out), ref.out, ref.bound.out));
        if (!got.lse.empty()) {
          EXPECT_TRUE(flash_test::within_bounds("lse", got.lse, ref.lse, ref.bound.lse));
        }
        attention_test::expect_gradients_within_bounds(widen(got.dqkv), ref, ref.bound, s);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 3. The double reference's backward is its derivative, with grouped K/V heads
// (attention_test_support.h: central differences, and why 1e-8 of the largest gradient).

TEST(AttentionGqaCpuDouble, ReferenceBackwardIsItsDerivative) {
  for (bool causal : {true, false})
    for (std::size_t Hkv : {1u, 2u}) {
      const AttentionShape s = grouped_shape(2, 5, 4, Hkv, 3, causal);
      SCOPED_TRACE(describe(s));
      std::vector<double> qkv = random_values<double>(s.B * s.T * s.qkv_width(), 40 + Hkv, -2.0, 2.0);
      const std::vector<double> r = random_values<double>(s.B * s.T * s.C(), 50 + Hkv, -1.0, 1.0);
      const gradient_check::DerivativeCheck c = attention_test::reference_backward_check(qkv, r, s);
      EXPECT_GT(c.largest, 0.01) << "a gradient worth checking";
      EXPECT_LT(c.worst / c.largest, 1e-8) << "|finite difference - analytic| = " << c.worst;
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Refusals: Hkv must divide H (and not exceed it).

TEST(AttentionGqaCpuDouble, RefusesKvHeadsThatDoNotDivideTheQueryHeads) {
  for (std::size_t Hkv : {3u, 8u}) {
    const AttentionShape s = grouped_shape(1, 4, 4, Hkv, 2, true);
    SCOPED_TRACE(describe(s));
    const std::size_t W = (s.H + 2 * Hkv) * s.D;
    std::vector<double> qkv(s.B * s.T * W, 0.5), dqkv(qkv.size()), out(s.B * s.T * s.C()), lse(s.B * s.H * s.T),
        scores(s.B * s.H * s.T * s.T), att(scores.size());
    EXPECT_THROW(cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s), std::invalid_argument);
    EXPECT_THROW(cpu::attention_reference_backward(dqkv.data(), out.data(), qkv.data(), s), std::invalid_argument);
    EXPECT_THROW(cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s), std::invalid_argument);
    EXPECT_THROW(cpu::flash_attention_backward(dqkv.data(), out.data(), qkv.data(), out.data(), lse.data(), s),
                 std::invalid_argument);
    EXPECT_THROW(cpu::attention_forward(out.data(), scores.data(), att.data(), qkv.data(), s.B, s.T, s.C(), s.H, Hkv),
                 std::invalid_argument);
    EXPECT_THROW(cpu::attention_backward(dqkv.data(), scores.data(), out.data(), qkv.data(), att.data(), s.B, s.T,
                                         s.C(), s.H, Hkv),
                 std::invalid_argument);
    const Stream meta{Backend::meta};
    EXPECT_THROW(kernels::attention_forward<double>(meta, out.data(), scores.data(), att.data(), qkv.data(), s.B, s.T,
                                                    s.C(), s.H, Hkv),
                 std::invalid_argument)
        << "the dispatcher refuses it on the meta device too";
  }
}

}  // namespace
}  // namespace trainmem::kernels
