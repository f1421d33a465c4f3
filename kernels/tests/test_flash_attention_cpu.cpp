// The CPU flash attention checked link by link:
//   1. the materialized reference is the definition: its out and lse equal the formulas written
//      out here, and its backward equals central finite differences (double, tiny shape);
//   2. causal reference = the model's naive kernel (kernels/attention.h), forward and backward;
//   3. flash = reference, forward (out, lse) and backward (dq, dk, dv), causal and not, for
//      T that are not multiples of the tiles and block_q != block_k: to 1e-12 in double, to
//      float accuracy in float, and with scores large enough to overflow exp() unshifted;
//   4. causal flash never touches the tiles above the diagonal (poisoned with NaN, they leave
//      the rest of the result bit for bit unchanged).
// Errors are measured relative to the largest magnitude of the expected array.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/attention_test_support.h"
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels {
namespace {

using Vec = std::vector<double>;

// Uniform in [-scale, scale], never zero.
Vec random_vec(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  return dtype_test::random_values<double>(n, seed, -scale, scale);
}

std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// max |got - want| / max |want|  (infinite if got has a NaN)
template <typename G>
double rel_err(const std::vector<G>& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0, largest = 1e-300;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(double(got[i]) - want[i]);
    worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(worst, diff);
    largest = std::max(largest, std::abs(want[i]));
  }
  return worst / largest;
}

std::string describe(const AttentionShape& s, std::size_t bq = 0, std::size_t bk = 0) {
  std::string d = "B=";
  d += std::to_string(s.B);
  d += " T=";
  d += std::to_string(s.T);
  d += " H=";
  d += std::to_string(s.H);
  d += " D=";
  d += std::to_string(s.D);
  d += s.causal ? " causal" : " non-causal";
  if (bq) {
    d += " block_q=";
    d += std::to_string(bq);
    d += " block_k=";
    d += std::to_string(bk);
  }
  return d;
}

std::size_t qkv_size(const AttentionShape& s) { return s.B * s.T * 3 * s.C(); }
std::size_t out_size(const AttentionShape& s) { return s.B * s.T * s.C(); }
std::size_t lse_size(const AttentionShape& s) { return s.B * s.H * s.T; }

// The cases of the flash-versus-reference tests: T = 1, 7, 33, 70 (none a multiple of the
// tiles but 1), tiles 16x16, 16x32, 32x16; D = 8 everywhere, D = 64 at T = 70.
struct Case {
  AttentionShape shape;
  std::size_t block_q, block_k;
};
std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool causal : {true, false})
    for (std::size_t T : {1u, 7u, 33u, 70u})
      for (auto [bq, bk] : {std::pair<std::size_t, std::size_t>{16, 16}, {16, 32}, {32, 16}}) {
        out.push_back({{2, T, 2, 8, causal}, bq, bk});
        if (T == 70) out.push_back({{1, T, 2, 64, causal}, bq, bk});
      }
  return out;
}

// ---------------------------------------------------------------------------------------------
// 1. The reference is the definition.

TEST(FlashAttentionCpu, ReferenceForwardIsTheSoftmaxFormula) {
  for (bool causal : {true, false}) {
    const AttentionShape s{2, 5, 2, 3, causal};
    const Vec qkv = random_vec(qkv_size(s), 1, 2.0);
    Vec out(out_size(s)), lse(lse_size(s));
    cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
    const std::size_t C = s.C();
    for (std::size_t b = 0; b < s.B; ++b)
      for (std::size_t h = 0; h < s.H; ++h)
        for (std::size_t t = 0; t < s.T; ++t) {
          // score(u) = q_t . k_u / sqrt(D);  lse = log sum_u exp(score(u));
          // out = sum_u exp(score(u) - lse) v_u, over u <= t when causal
          const std::size_t keys = causal ? t + 1 : s.T;
          auto at = [&](std::size_t u, std::size_t which, std::size_t d) {
            return qkv[(b * s.T + u) * 3 * C + which * C + h * s.D + d];
          };
          Vec score(keys);
          double z = 0;
          for (std::size_t u = 0; u < keys; ++u) {
            for (std::size_t d = 0; d < s.D; ++d) score[u] += at(t, 0, d) * at(u, 1, d);
            score[u] /= std::sqrt(double(s.D));
            z += std::exp(score[u]);
          }
          EXPECT_NEAR(lse[(b * s.H + h) * s.T + t], std::log(z), 1e-13) << describe(s);
          for (std::size_t d = 0; d < s.D; ++d) {
            double o = 0;
            for (std::size_t u = 0; u < keys; ++u) o += std::exp(score[u]) / z * at(u, 2, d);
            EXPECT_NEAR(out[(b * s.T + t) * C + h * s.D + d], o, 1e-13) << describe(s);
          }
        }
  }
}

TEST(FlashAttentionCpu, ReferenceBackwardIsItsDerivative) {
  for (bool causal : {true, false}) {
    const AttentionShape s{2, 5, 2, 3, causal};
    Vec qkv = random_vec(qkv_size(s), 2, 2.0);
    const Vec r = random_vec(out_size(s), 3);
    const gradient_check::DerivativeCheck c = attention_test::reference_backward_check(qkv, r, s);
    EXPECT_GT(c.largest, 0.01) << "a gradient worth checking";
    EXPECT_LT(c.worst / c.largest, 1e-8) << describe(s) << ": |finite difference - analytic| = " << c.worst;
  }
}

// 2. Causal reference = the naive kernel the model uses (its backward takes the probabilities).
template <typename F>
void expect_reference_equals_naive_kernel(double tol) {
  const AttentionShape s{2, 13, 3, 8, true};
  const std::size_t N = s.B * s.H * s.T * s.T;
  const Vec qkv_d = random_vec(qkv_size(s), 4, 2.0), dout_d = random_vec(out_size(s), 5);
  const std::vector<F> qkv(qkv_d.begin(), qkv_d.end()), dout(dout_d.begin(), dout_d.end());
  std::vector<F> out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
  cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
  cpu::attention_reference_backward(dqkv.data(), dout.data(), qkv.data(), s);

  std::vector<F> naive_out(out_size(s)), preatt(N), att(N), naive_dqkv(qkv_size(s)), dscores(N);
  cpu::attention_forward(naive_out.data(), preatt.data(), att.data(), qkv.data(), s.B, s.T, s.C(), s.H);
  cpu::attention_backward(naive_dqkv.data(), dscores.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C(), s.H);
  EXPECT_LT(rel_err(out, Vec(naive_out.begin(), naive_out.end())), tol) << "out";
  EXPECT_LT(rel_err(dqkv, Vec(naive_dqkv.begin(), naive_dqkv.end())), tol) << "dqkv";
}

TEST(FlashAttentionCpu, CausalReferenceEqualsTheNaiveKernel) {
  expect_reference_equals_naive_kernel<double>(1e-13);
  expect_reference_equals_naive_kernel<float>(1e-5);
}

// ---------------------------------------------------------------------------------------------
// 3. Flash = reference.

struct Result {
  Vec out, lse, dqkv;
};
Result reference(const AttentionShape& s, const Vec& qkv, const Vec& dout) {
  Result r{Vec(out_size(s)), Vec(lse_size(s)), Vec(qkv_size(s))};
  cpu::attention_reference_forward(r.out.data(), r.lse.data(), qkv.data(), s);
  cpu::attention_reference_backward(r.dqkv.data(), dout.data(), qkv.data(), s);
  return r;
}

template <typename F>
void expect_flash_equals_reference(const Case& c, const Vec& qkv_d, const Vec& dout_d, double tol) {
  const AttentionShape& s = c.shape;
  const Result want = reference(s, qkv_d, dout_d);
  const std::vector<F> qkv(qkv_d.begin(), qkv_d.end()), dout(dout_d.begin(), dout_d.end());
  std::vector<F> out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
  cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, c.block_q, c.block_k);
  cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, c.block_q,
                                c.block_k);
  const std::string what = describe(s, c.block_q, c.block_k);
  EXPECT_LT(rel_err(out, want.out), tol) << "out, " << what;
  EXPECT_LT(rel_err(lse, want.lse), tol) << "lse, " << what;
  // dq, dk, dv: the three thirds of each row of dqkv, compared separately
  const std::size_t C = s.C();
  for (std::size_t third = 0; third < 3; ++third) {
    std::vector<F> got;
    Vec expected;
    for (std::size_t row = 0; row < s.B * s.T; ++row)
      for (std::size_t i = 0; i < C; ++i) {
        got.push_back(dqkv[row * 3 * C + third * C + i]);
        expected.push_back(want.dqkv[row * 3 * C + third * C + i]);
      }
    const char* name[] = {"dq", "dk", "dv"};
    EXPECT_LT(rel_err(got, expected), tol) << name[third] << ", " << what;
  }
}

TEST(FlashAttentionCpu, FlashEqualsReferenceInDouble) {
  std::uint32_t seed = 10;
  for (const Case& c : cases()) {
    const Vec qkv = random_vec(qkv_size(c.shape), seed++, 2.0), dout = random_vec(out_size(c.shape), seed++);
    expect_flash_equals_reference<double>(c, qkv, dout, 1e-12);
  }
}

// float flash against the double reference: float's accuracy (2^-24 = 6e-8 per rounding, some
// hundred roundings deep).
TEST(FlashAttentionCpu, FlashInFloatEqualsReferenceToFloatAccuracy) {
  std::uint32_t seed = 100;
  for (const Case& c : cases()) {
    const Vec qkv = random_vec(qkv_size(c.shape), seed++, 2.0), dout = random_vec(out_size(c.shape), seed++);
    // rounded to float first, so that only the arithmetic differs
    const std::vector<float> qkv_f = to_float(qkv), dout_f = to_float(dout);
    expect_flash_equals_reference<float>(c, Vec(qkv_f.begin(), qkv_f.end()), Vec(dout_f.begin(), dout_f.end()),
                                         1e-5);
  }
}

// Scores of several hundred: exp() of them overflows float (and double past 709). The running
// max keeps every exponent <= 0, so out, lse and the gradients stay finite and accurate.
TEST(FlashAttentionCpu, FlashIsStableForHugeScores) {
  for (bool causal : {true, false}) {
    const Case c{{1, 70, 2, 8, causal}, 16, 32};
    const Vec qkv = random_vec(qkv_size(c.shape), 7, 30.0), dout = random_vec(out_size(c.shape), 8);
    const std::vector<float> qkv_f = to_float(qkv), dout_f = to_float(dout);
    const Vec qkv_r(qkv_f.begin(), qkv_f.end()), dout_r(dout_f.begin(), dout_f.end());
    Vec lse(lse_size(c.shape)), out(out_size(c.shape));
    cpu::attention_reference_forward(out.data(), lse.data(), qkv_r.data(), c.shape);
    double max_lse = 0;
    for (double x : lse) max_lse = std::max(max_lse, x);
    EXPECT_GT(max_lse, 800) << "the scores must be huge for this test to mean something";
    expect_flash_equals_reference<double>(c, qkv_r, dout_r, 1e-12);
    // float: a score of ~1e3 carries a rounding of ~1e-4 (6e-8 relative), which exp() turns into
    // a relative error of ~1e-4 of the probabilities (measured: 5.5e-5)
    expect_flash_equals_reference<float>(c, qkv_r, dout_r, 5e-4);
  }
}

// The causal flash kernel against the model's naive kernel directly (same layout).
TEST(FlashAttentionCpu, CausalFlashEqualsTheNaiveKernel) {
  const AttentionShape s{2, 45, 2, 16, true};
  const std::size_t N = s.B * s.H * s.T * s.T;
  const Vec qkv = random_vec(qkv_size(s), 9, 2.0), dout = random_vec(out_size(s), 10);
  Vec out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
  cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, 16, 32);
  cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, 16, 32);
  Vec naive_out(out_size(s)), preatt(N), att(N), naive_dqkv(qkv_size(s)), dscores(N);
  cpu::attention_forward(naive_out.data(), preatt.data(), att.data(), qkv.data(), s.B, s.T, s.C(), s.H);
  cpu::attention_backward(naive_dqkv.data(), dscores.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.C(), s.H);
  EXPECT_LT(rel_err(out, naive_out), 1e-12);
  EXPECT_LT(rel_err(dqkv, naive_dqkv), 1e-12);
}

// ---------------------------------------------------------------------------------------------
// 4. Causal tiles above the diagonal are skipped. Poison them with NaN: any arithmetic on a
// poisoned value (even 0 * NaN) would spread NaN, so a result that stays bit for bit the same
// shows that those values were never used.

TEST(FlashAttentionCpu, CausalForwardNeverTouchesKeyTilesAfterTheQueryTile) {
  for (auto [bq, bk] : {std::pair<std::size_t, std::size_t>{16, 16}, {16, 32}, {32, 16}}) {
    const AttentionShape s{1, 70, 2, 8, true};
    const Vec qkv = random_vec(qkv_size(s), 11, 2.0);
    Vec out(out_size(s)), lse(lse_size(s));
    cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, bq, bk);
    // Query tile 0 (rows 0 .. bq-1) visits the key tiles that start at or before row bq-1;
    // the first one it skips starts at `skipped`. Poison k and v from there on.
    const std::size_t skipped = (bq + bk - 1) / bk * bk, C = s.C();
    Vec poisoned = qkv;
    for (std::size_t u = skipped; u < s.T; ++u)
      for (std::size_t i = C; i < 3 * C; ++i) poisoned[u * 3 * C + i] = std::numeric_limits<double>::quiet_NaN();
    Vec out_p(out_size(s)), lse_p(lse_size(s));
    cpu::flash_attention_forward(out_p.data(), lse_p.data(), poisoned.data(), s, bq, bk);
    for (std::size_t t = 0; t < bq; ++t) {
      for (std::size_t i = 0; i < C; ++i) ASSERT_EQ(out_p[t * C + i], out[t * C + i]) << "query " << t;
      for (std::size_t h = 0; h < s.H; ++h) ASSERT_EQ(lse_p[h * s.T + t], lse[h * s.T + t]) << "query " << t;
    }
  }
}

TEST(FlashAttentionCpu, CausalBackwardNeverTouchesQueryTilesBeforeTheKeyTile) {
  for (auto [bq, bk] : {std::pair<std::size_t, std::size_t>{16, 16}, {16, 32}, {32, 16}}) {
    const AttentionShape s{1, 70, 2, 8, true};
    const std::size_t C = s.C();
    const Vec qkv = random_vec(qkv_size(s), 12, 2.0), dout = random_vec(out_size(s), 13);
    Vec out(out_size(s)), lse(lse_size(s)), dqkv(qkv_size(s));
    cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, bq, bk);
    cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, bq, bk);
    // Poison everything of query tile 0 (rows 0 .. bq-1): q, dout, out, lse. Key tiles that start
    // after row bq-1 (from `skipped` on) skip it, so their dk and dv must not change.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Vec qkv_p = qkv, dout_p = dout, out_p = out, lse_p = lse;
    for (std::size_t t = 0; t < bq; ++t) {
      for (std::size_t i = 0; i < C; ++i) qkv_p[t * 3 * C + i] = dout_p[t * C + i] = out_p[t * C + i] = nan;
      for (std::size_t h = 0; h < s.H; ++h) lse_p[h * s.T + t] = nan;
    }
    Vec dqkv_p(qkv_size(s));
    cpu::flash_attention_backward(dqkv_p.data(), dout_p.data(), qkv_p.data(), out_p.data(), lse_p.data(), s, bq, bk);
    const std::size_t skipped = (bq + bk - 1) / bk * bk;
    for (std::size_t u = skipped; u < s.T; ++u)
      for (std::size_t i = C; i < 3 * C; ++i) ASSERT_EQ(dqkv_p[u * 3 * C + i], dqkv[u * 3 * C + i]) << "key " << u;
  }
}

}  // namespace
}  // namespace trainmem::kernels
