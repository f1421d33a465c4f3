// The CPU reference kernels checked against their definitions, in double precision:
// for each op, loss = sum(out * r) with random r; the backward's gradients must equal central
// finite differences of that loss to 1e-6 (relative to the largest gradient). The float
// instantiations must agree with the double ones to float accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gradient_check.h"

namespace trainmem::kernels {
namespace {

using Vec = std::vector<double>;

// Uniform in [-scale, scale], never zero.
Vec random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  return dtype_test::random_values<double>(n, seed, -scale, scale);
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with central differences of loss(x) at every element of x.
void expect_gradient(Vec& x, const Vec& analytic, const std::function<double()>& loss, const char* what) {
  const gradient_check::DerivativeCheck c = gradient_check::central_differences(x, analytic, loss);
  const double worst = c.worst, largest = std::max(c.largest, 1e-12);
  EXPECT_LT(worst / largest, 1e-6) << what << ": largest |finite difference - analytic| = " << worst
                                    << " (largest gradient " << largest << ")";
}

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

void expect_close(const std::vector<float>& f, const Vec& d, double tol, const char* what) {
  ASSERT_EQ(f.size(), d.size());
  double worst = 0, largest = 1e-12;
  for (std::size_t i = 0; i < f.size(); ++i) {
    worst = std::max(worst, std::abs(f[i] - d[i]));
    largest = std::max(largest, std::abs(d[i]));
  }
  EXPECT_LT(worst / largest, tol) << what;
}

TEST(KernelsCpu, GeluBackwardIsItsDerivative) {
  const std::size_t n = 257;
  Vec x = random_vec(n, 1, 3.0), r = random_vec(n, 2), out(n), dx(n);
  auto loss = [&] {
    cpu::gelu_forward(out.data(), x.data(), n);
    return dot(out, r);
  };
  cpu::gelu_backward(dx.data(), x.data(), r.data(), n);
  expect_gradient(x, dx, loss, "gelu");
  std::vector<float> fo(n);
  cpu::gelu_forward(fo.data(), to_float(x).data(), n);
  loss();
  expect_close(fo, out, 1e-6, "gelu float vs double");
}

// The fp32 GELU (sigmoid form with the vectorized exp, kernels/cpu/elementwise.cpp) against the
// exact function (the double kernel: std::exp, double arithmetic) on a grid of 240,001 points of
// [-12, 12]. Forward: the exp's argument -2u carries the rounding of u (a few ulps of |u|), which
// exp turns into a relative error of about |2u| ulps; measured worst 6.4 ulps * (1 + |u|), so
//   |gelu32 - gelu| <= 8 * 2^-24 * (1 + |u|) * |gelu|        (beyond x = -10, where exp(-2u)
//   is clamped at exp(88), gelu32 = x / (1 + exp(88)): within |x| 2^-126 of the exact value)
// Backward: gelu' crosses zero near x = -0.75, so its bound is absolute (measured 2.2e-7):
//   |gelu'32 - gelu'| <= 2^-21
// For comparison, the tanh form in fp32 (tanhf) was 4.3e-7 from gelu and 5.6e-7 from gelu'
// (for x << 0, 1 + tanh u cancels).
TEST(KernelsCpu, GeluInFp32IsWithinItsBoundOfTheExactFunction) {
  const std::size_t n = 240001;
  std::vector<float> x(n), out(n), dx(n), ones(n, 1.0f);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(-12.0 + 1e-4 * static_cast<double>(i));
  cpu::gelu_forward(out.data(), x.data(), n);
  cpu::gelu_backward(dx.data(), x.data(), ones.data(), n);
  const Vec xd(x.begin(), x.end()), onesd(n, 1.0);
  Vec outd(n), dxd(n);
  cpu::gelu_forward(outd.data(), xd.data(), n);
  cpu::gelu_backward(dxd.data(), xd.data(), onesd.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    const double u = 0.7978845608028654 * (xd[i] + 0.044715 * xd[i] * xd[i] * xd[i]);
    const double bound = xd[i] < -10 ? std::abs(xd[i]) * 0x1p-126 : 8 * 0x1p-24 * (1 + std::abs(u)) * std::abs(outd[i]);
    ASSERT_LE(std::abs(out[i] - outd[i]), bound) << "gelu at x = " << x[i];
    ASSERT_LE(std::abs(dx[i] - dxd[i]), 0x1p-21) << "gelu' at x = " << x[i];
  }
}

TEST(KernelsCpu, ResidualAddsElementwise) {
  Vec a = random_vec(100, 3), b = random_vec(100, 4), out(100);
  cpu::residual_forward(out.data(), a.data(), b.data(), 100);
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
}

TEST(KernelsCpu, LayerNormBackwardIsItsDerivative) {
  const std::size_t N = 5, C = 24;
  Vec x = random_vec(N * C, 5, 2.0), w = random_vec(C, 6), bias = random_vec(C, 7), r = random_vec(N * C, 8);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    return dot(out, r);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  expect_gradient(x, dx, loss, "layernorm dx");
  expect_gradient(w, dw, loss, "layernorm dweight");
  expect_gradient(bias, db, loss, "layernorm dbias");
  // dx accumulates: a second backward adds the same again.
  Vec dx2 = dx;
  cpu::layernorm_backward(dx2.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], 2 * dx[i], 1e-12);
}

TEST(KernelsCpu, MatmulBackwardIsItsDerivative) {
  const std::size_t N = 7, C = 12, OC = 9;
  Vec inp = random_vec(N * C, 9), w = random_vec(OC * C, 10), bias = random_vec(OC, 11), r = random_vec(N * OC, 12);
  Vec out(N * OC);
  auto loss = [&] {
    cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    return dot(out, r);
  };
  loss();
  // the forward against its definition
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t o = 0; o < OC; ++o) {
      double s = bias[o];
      for (std::size_t c = 0; c < C; ++c) s += inp[n * C + c] * w[o * C + c];
      EXPECT_NEAR(out[n * OC + o], s, 1e-12);
    }
  Vec dinp(N * C, 99.0), dw(OC * C, 0.0), db(OC, 0.0);  // dinp is written, so its old value must not matter
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), r.data(), inp.data(), w.data(), N, C, OC);
  expect_gradient(inp, dinp, loss, "matmul dinp");
  expect_gradient(w, dw, loss, "matmul dweight");
  expect_gradient(bias, db, loss, "matmul dbias");
}

TEST(KernelsCpu, EmbeddingBackwardScattersIntoTheRowsUsed) {
  const std::size_t B = 2, T = 5, C = 8, V = 11;
  const std::vector<std::int32_t> tokens = {3, 1, 3, 10, 0, 7, 7, 2, 3, 9};
  Vec wte = random_vec(V * C, 13), wpe = random_vec(T * C, 14), r = random_vec(B * T * C, 15), out(B * T * C);
  auto loss = [&] {
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, r);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  cpu::embedding_backward(dwte.data(), dwpe.data(), r.data(), tokens.data(), B, T, C);
  expect_gradient(wte, dwte, loss, "embedding dwte");
  expect_gradient(wpe, dwpe, loss, "embedding dwpe");
}

// Without a position table (Llama): out is exactly the token's row, and dwte its derivative.
TEST(KernelsCpu, EmbeddingWithoutPositionTableCopiesTheTokenRow) {
  const std::size_t B = 2, T = 5, C = 8, V = 11;
  const std::vector<std::int32_t> tokens = {3, 1, 3, 10, 0, 7, 7, 2, 3, 9};
  Vec wte = random_vec(V * C, 18), r = random_vec(B * T * C, 19), out(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), static_cast<const double*>(nullptr), B, T, C);
  for (std::size_t i = 0; i < B * T; ++i)
    for (std::size_t c = 0; c < C; ++c)
      ASSERT_EQ(out[i * C + c], wte[static_cast<std::size_t>(tokens[i]) * C + c]) << "position " << i;
  auto loss = [&] {
    cpu::embedding_forward(out.data(), tokens.data(), wte.data(), static_cast<const double*>(nullptr), B, T, C);
    return dot(out, r);
  };
  Vec dwte(V * C, 0.0);
  cpu::embedding_backward(dwte.data(), static_cast<double*>(nullptr), r.data(), tokens.data(), B, T, C);
  expect_gradient(wte, dwte, loss, "embedding dwte (no position table)");
}

TEST(KernelsCpu, AttentionBackwardIsItsDerivativeAndTheMaskHolds) {
  const std::size_t B = 2, T = 6, C = 8, NH = 2;
  Vec qkv = random_vec(B * T * 3 * C, 16), r = random_vec(B * T * C, 17);
  Vec out(B * T * C), preatt(B * NH * T * T), att(B * NH * T * T);
  auto loss = [&] {
    cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, r);
  };
  loss();
  for (std::size_t row = 0; row < B * NH * T; ++row) {
    const std::size_t t = row % T;
    double sum = 0;
    for (std::size_t u = 0; u < T; ++u) {
      sum += att[row * T + u];
      if (u > t) {
        EXPECT_EQ(att[row * T + u], 0.0) << "attention to the future";
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  Vec dqkv(B * T * 3 * C), dscores(B * NH * T * T);
  cpu::attention_backward(dqkv.data(), dscores.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  expect_gradient(qkv, dqkv, loss, "attention dqkv");
}

TEST(KernelsCpu, CrossEntropyIsTheNegativeLogLikelihoodAndItsGradient) {
  const std::size_t N = 6, V = 13;
  Vec logits = random_vec(N * V, 18, 4.0), losses(N);
  const std::vector<std::int32_t> targets = {0, 12, 5, 5, 7, 1};
  const double dloss = 1.0 / N;
  auto loss = [&] {
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, V);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss;  // the mean
  };
  loss();
  for (std::size_t n = 0; n < N; ++n) {
    double z = 0;
    for (std::size_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v]);
    EXPECT_NEAR(losses[n], -std::log(std::exp(logits[n * V + targets[n]]) / z), 1e-12);
  }
  // The fused call: the same losses, bit for bit, and their gradient.
  const Vec forward_losses = losses;
  Vec dlogits(N * V), fused_losses(N);
  cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V, V);
  EXPECT_EQ(fused_losses, forward_losses);
  expect_gradient(logits, dlogits, loss, "cross-entropy dlogits");
  // in place gives the same bits
  Vec inplace = logits;
  cpu::cross_entropy_forward_backward(fused_losses.data(), inplace.data(), inplace.data(), targets.data(), dloss, N, V,
                                      V);
  EXPECT_EQ(inplace, dlogits);
  EXPECT_EQ(fused_losses, forward_losses);
}

// A target outside the classes (a bad token file would give one; the data loader refuses them
// first) gives a NaN loss and no -1 in the gradient, never an access outside the row.
TEST(KernelsCpu, CrossEntropyOfATargetOutsideTheClassesIsNaN) {
  const std::size_t N = 3, V = 11;
  const std::vector<float> logits = to_float(random_vec(N * V, 22, 4.0));
  const std::vector<std::int32_t> targets = {4, -1, 11};
  std::vector<float> losses(N), fused(N), dlogits(N * V);
  cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, V);
  cpu::cross_entropy_forward_backward(fused.data(), dlogits.data(), logits.data(), targets.data(), 1.0f, N, V, V);
  EXPECT_TRUE(std::isfinite(losses[0]));
  for (std::size_t n = 1; n < N; ++n) {
    EXPECT_TRUE(std::isnan(losses[n])) << "row " << n;
    EXPECT_TRUE(std::isnan(fused[n])) << "row " << n;
    for (std::size_t v = 0; v < V; ++v) EXPECT_GT(dlogits[n * V + v], 0.0f) << "row " << n << " class " << v;
  }
}

// The model's head is padded (V = 77 classes in rows of Vp = 128 logits, as GPT-2's 50257 in rows
// of 50304): the loss and the gradient of the V classes are the unpadded computation's, bit for
// bit (the same arithmetic on the same V values); the padded columns are never read (here NaN,
// which would turn every loss into NaN) and their dlogits are exactly 0.
TEST(KernelsCpu, CrossEntropyOverPaddedRowsIsTheUnpaddedOne) {
  const std::size_t N = 5, V = 77, Vp = 128;
  const Vec packed = random_vec(N * V, 21, 4.0);
  Vec padded(N * Vp, std::nan(""));
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t v = 0; v < V; ++v) padded[n * Vp + v] = packed[n * V + v];
  const std::vector<std::int32_t> targets = {0, 76, 40, 40, 3};
  const double dloss = 1.0 / N;

  Vec losses(N), padded_losses(N);
  cpu::cross_entropy_forward(losses.data(), packed.data(), targets.data(), N, V, V);
  cpu::cross_entropy_forward(padded_losses.data(), padded.data(), targets.data(), N, V, Vp);
  for (std::size_t n = 0; n < N; ++n) EXPECT_EQ(padded_losses[n], losses[n]) << "row " << n;

  Vec dlogits(N * V), padded_dlogits(N * Vp, std::nan("")), inplace = padded, fused_losses(N);
  cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits.data(), packed.data(), targets.data(), dloss, N, V, V);
  cpu::cross_entropy_forward_backward(fused_losses.data(), padded_dlogits.data(), padded.data(), targets.data(), dloss,
                                      N, V, Vp);
  EXPECT_EQ(fused_losses, losses);
  cpu::cross_entropy_forward_backward(fused_losses.data(), inplace.data(), inplace.data(), targets.data(), dloss, N, V,
                                      Vp);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t v = 0; v < Vp; ++v) {
      const double expected = v < V ? dlogits[n * V + v] : 0.0;
      EXPECT_EQ(padded_dlogits[n * Vp + v], expected) << "row " << n << " column " << v;
      EXPECT_EQ(inplace[n * Vp + v], expected) << "in place: row " << n << " column " << v;
    }

  // A row too short for its classes is the caller's bug, refused before anything runs.
  EXPECT_THROW(cross_entropy_forward<float>(kCpuStream, nullptr, nullptr, nullptr, N, V, V - 1), std::logic_error);
  EXPECT_THROW(cross_entropy_forward_backward<float>(kCpuStream, nullptr, nullptr, nullptr, nullptr, 1.0f, N, V, V - 1),
               std::logic_error);
}

TEST(KernelsCpu, AdamWFollowsTheFormulaAndClippingScales) {
  const std::size_t n = 50;
  const Vec p0 = random_vec(n, 19), g = random_vec(n, 20);
  std::vector<float> p = to_float(p0), grad = to_float(g), m(n, 0.0f), v(n, 0.0f);
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  for (long step = 1; step <= 3; ++step) cpu::adamw_update(p.data(), grad.data(), m.data(), v.data(), n, h, step, 0.5f);
  // the same three steps written out in double
  for (std::size_t i = 0; i < n; ++i) {
    double pd = static_cast<float>(p0[i]), md = 0, vd = 0;
    const double gd = static_cast<float>(g[i]) * 0.5;
    for (int t = 1; t <= 3; ++t) {
      md = 0.9 * md + 0.1 * gd;
      vd = 0.95 * vd + 0.05 * gd * gd;
      const double mhat = md / (1 - std::pow(0.9, t)), vhat = vd / (1 - std::pow(0.95, t));
      pd -= 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * pd);
    }
    EXPECT_NEAR(p[i], pd, 1e-5) << i;
  }
  const std::vector<float> x = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(cpu::sum_of_squares(x.data(), 2), 25.0);
  EXPECT_FLOAT_EQ(clip_scale(5.0, 1.0), static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_scale(5.0, 0.0), 1.0f);  // clipping off
}

// The gradient's sum of squares over several of its blocks (kernels/cpu/optimizer.cpp) and a
// remainder, against a serial sum in long double. Each square of a float is exact in double (24
// bits squared fit in 53), so only the n - 1 additions round: |error| <= (n - 1) u sum, u = 2^-53.
TEST(KernelsCpu, SumOfSquaresIsWithinTheRoundingOfItsAdditions) {
  const std::size_t n = 5 * 65536 + 13;
  std::vector<float> x(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : x) v = u(rng);
  long double reference = 0;
  for (float v : x) reference += static_cast<long double>(v) * v;
  const double sum = cpu::sum_of_squares(x.data(), n);
  const double bound = static_cast<double>(n - 1) * 0x1p-53 * static_cast<double>(reference);
  EXPECT_NEAR(sum, static_cast<double>(reference), bound);
  EXPECT_EQ(cpu::sum_of_squares(x.data(), n), sum);  // the same bits again (the blocks' order is fixed)
}

}  // namespace
}  // namespace trainmem::kernels
