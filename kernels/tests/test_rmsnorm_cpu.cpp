// The CPU RMSNorm (kernels/rmsnorm.h, kernels/cpu/rmsnorm.cpp), on fresh random inputs (seeded,
// never zero; accumulated outputs start from random non-zero values):
//   - in double: the forward against its definition, the backward against central differences
//     of the forward;
//   - in each storage type T (fp32, bf16, fp16), as test_kernels_dtype_cpu.cpp checks every kernel:
//     (a) bit for bit against the float kernel on the widened inputs, outputs rounded to T;
//     (b) against the double kernel on the same inputs, within bounds derived below;
//   - the dispatcher: the CPU backend gives the cpu:: bits, the meta backend touches nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gradient_check.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;

// ---------------------------------------------------------------------------------------- double

// out[n,c] = x[n,c] * w[c] / sqrt(sum_c x[n,c]^2 / C + eps), written out plainly. A large eps
// (0.25, as big as some rows' mean square) shows that eps is added where it should be. Both sides
// are a handful of double operations on the same values: 1e-14 relative is thousands of 2^-53.
TEST(RmsNormCpu, ForwardInDoubleIsItsDefinition) {
  const std::size_t N = 6, C = 37;
  const std::vector<double> x = random_values<double>(N * C, 1, -1.0, 1.5);
  const std::vector<double> w = random_values<double>(C, 2, -1.5, 1.5);
  for (const double eps : {1e-5, 1e-6, 0.25}) {
    SCOPED_TRACE("eps=" + std::to_string(eps));
    std::vector<double> out(N * C), rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    for (std::size_t n = 0; n < N; ++n) {
      double sum_sq = 0;
      for (std::size_t c = 0; c < C; ++c) sum_sq += x[n * C + c] * x[n * C + c];
      const double want_rstd = 1.0 / std::sqrt(sum_sq / static_cast<double>(C) + eps);
      EXPECT_NEAR(rstd[n], want_rstd, 1e-14 * want_rstd) << "row " << n;
      for (std::size_t c = 0; c < C; ++c) {
        const double want = x[n * C + c] * w[c] * want_rstd;
        EXPECT_NEAR(out[n * C + c], want, 1e-14 * std::fabs(want)) << "row " << n << " column " << c;
      }
    }
  }
}

// The double backward against central differences of the double forward, for
// loss = sum(out * r) with random r (so dout = r). Step h = 1e-6: the difference quotient is off by
// h^2/6 |loss'''| (~1e-12 here) plus the loss's rounding, a few 2^-53 |loss| / h (~1e-9: |loss| is
// a few tens); 1e-6 of the largest gradient leaves a wide margin (as test_kernels_cpu.cpp's checks).
// dx and dweight ACCUMULATE: they start from random non-zero values, and what the backward added
// is compared. eps = 0.5 makes eps's part of the derivative count.
void rmsnorm_expect_gradient(std::vector<double>& p, const std::vector<double>& analytic,
                             const std::function<double()>& loss, const char* what) {
  const gradient_check::DerivativeCheck c = gradient_check::central_differences(p, analytic, loss);
  const double worst = c.worst, largest = std::max(c.largest, 1e-12);
  EXPECT_LT(worst / largest, 1e-6) << what << ": largest |finite difference - analytic| = " << worst
                                    << " (largest gradient " << largest << ")";
}

TEST(RmsNormCpu, BackwardInDoubleIsTheForwardsDerivative) {
  const std::size_t N = 5, C = 24;
  for (const double eps : {1e-5, 0.5}) {
    SCOPED_TRACE("eps=" + std::to_string(eps));
    std::vector<double> x = random_values<double>(N * C, 3, -2.0, 2.0), w = random_values<double>(C, 4, -1.5, 1.5);
    const std::vector<double> r = random_values<double>(N * C, 5, -1.0, 1.0);
    std::vector<double> out(N * C), rstd(N);
    auto loss = [&] {
      cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
      double s = 0;
      for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * r[i];
      return s;
    };
    loss();  // rstd at the unperturbed x
    const std::vector<double> dx0 = random_values<double>(N * C, 6, -1.0, 1.0), dw0 = random_values<double>(C, 7, -1.0, 1.0);
    std::vector<double> dx = dx0, dw = dw0;
    cpu::rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
    std::vector<double> added_dx(N * C), added_dw(C);
    for (std::size_t i = 0; i < dx.size(); ++i) added_dx[i] = dx[i] - dx0[i];
    for (std::size_t i = 0; i < dw.size(); ++i) added_dw[i] = dw[i] - dw0[i];
    rmsnorm_expect_gradient(x, added_dx, loss, "rmsnorm dx (accumulated)");
    rmsnorm_expect_gradient(w, added_dw, loss, "rmsnorm dweight (accumulated)");
  }
}

// ---------------------------------------------------------------------------------------- each storage type

template <typename T>
class RmsNormCpu : public ::testing::Test {};
TYPED_TEST_SUITE(RmsNormCpu, StorageTypes, DtypeNames);

// (b)'s bounds. The kernel in T computes in fp32 (unit roundoff u = 2^-24, relative error of one
// rounding) what the double kernel computes in double (its own error ~2^-52: negligible), from the
// same inputs, rstd included for the backward; each output is then rounded to T once, which
// rounded_once<T> adds. The row sums are in double on both sides (error ~C 2^-53: negligible).
// With the largest |xhat| = |x rstd| (X), rstd (S) and |g| = |dout weight| (G) of the inputs,
// |dout| <= 1 and starting values |dx0|, |dw0| <= 1, first order in u (the bounds are taken
// 1% larger for the second-order terms, and for the final rounding's (1 + u(T)) on them):
//   forward  rstd: the double value rounded to fp32 once: u relative.
//            out = (x * rstd32) * w: rstd32, and the two products, each one rounding: 3u relative.
//   dx       xhat, g: u X, u G.  p = g * xhat in fp32: 3u G X.  m = mean(p), rounded: 4u G X
//            (|m| <= G X).  t = xhat m: u X G X + X 4u G X + u G X^2 = 6u G X^2.
//            v = g - t: u G + 6u G X^2 + u (G + G X^2).  rstd v: S u (3G + 8 G X^2) (rstd is exact).
//            dx0 + rstd v: u (1 + S (4G + 9 G X^2)), absolute.
//   dweight  dw0 plus N terms dout * (x rstd), each |term| <= X, off by 2u X; the N fp32 additions
//            each round a partial sum of at most 1 + N X: u N (1 + (N + 2) X), absolute.
struct RmsNormInputBounds {
  double X = 0, S = 0, G = 0;
};

RmsNormInputBounds rmsnorm_input_bounds(const std::vector<double>& x, const std::vector<double>& w,
                                        const std::vector<double>& dout, const std::vector<double>& rstd,
                                        std::size_t N, std::size_t C) {
  RmsNormInputBounds b;
  for (std::size_t n = 0; n < N; ++n) {
    b.S = std::max(b.S, rstd[n]);
    for (std::size_t c = 0; c < C; ++c) {
      b.X = std::max(b.X, std::fabs(x[n * C + c] * rstd[n]));
      b.G = std::max(b.G, std::fabs(dout[n * C + c] * w[c]));
    }
  }
  return b;
}

struct RmsNormShape {
  std::size_t N, C;
};

TYPED_TEST(RmsNormCpu, ForwardAndBackward) {
  using T = TypeParam;
  constexpr double u = 0x1p-24, second_order = 1.01;
  std::uint64_t seed = 10;
  // Llama's eps on a small shape and one of Llama's widths (C = 4096); eps 1e-6 as some models.
  for (const auto& [shape, eps] : {std::pair{RmsNormShape{13, 70}, 1e-5}, std::pair{RmsNormShape{3, 4096}, 1e-6}}) {
    const auto [N, C] = shape;
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const std::vector<T> x = random_values<T>(N * C, ++seed, -1.5, 2.5);  // not centred: RMSNorm does not centre
    const std::vector<T> weight = random_values<T>(C, ++seed, 0.5, 1.5);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, eps);

    // (a) forward
    const std::vector<float> x32 = widen(x), w32 = widen(weight);
    std::vector<float> out32(N * C), rstd32(N);
    cpu::rmsnorm_forward(out32.data(), rstd32.data(), x32.data(), w32.data(), N, C, eps);
    EXPECT_TRUE(same_bits("rmsnorm out", out, narrow<T>(out32)));
    EXPECT_TRUE(same_bits("rmsnorm rstd", rstd, rstd32));

    // (b) forward: rstd u relative; out 3u relative, then rounded to T.
    const std::vector<double> xd = to_double(x), wd = to_double(weight);
    std::vector<double> outd(N * C), rstdd(N);
    cpu::rmsnorm_forward(outd.data(), rstdd.data(), xd.data(), wd.data(), N, C, eps);
    EXPECT_TRUE(close_to("rmsnorm rstd vs double", rstd, rstdd, rounded_once<float>(0.0, 0.0)));
    EXPECT_TRUE(close_to("rmsnorm out vs double", out, outd, rounded_once<T>(3 * u * second_order, 0.0)));

    // Backward, from this forward's rstd; dx and dweight accumulate onto random non-zero values.
    const std::vector<T> dout = random_values<T>(N * C, ++seed, -1.0, 1.0);
    const std::vector<T> dx0 = random_values<T>(N * C, ++seed, -1.0, 1.0), dw0 = random_values<T>(C, ++seed, -1.0, 1.0);
    std::vector<T> dx = dx0, dw = dw0;
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, C);

    // (a) backward
    const std::vector<float> dout32 = widen(dout);
    std::vector<float> dx32 = widen(dx0), dw32 = widen(dw0);
    cpu::rmsnorm_backward(dx32.data(), dw32.data(), dout32.data(), x32.data(), w32.data(), rstd.data(), N, C);
    EXPECT_TRUE(same_bits("rmsnorm dx (accumulated)", dx, narrow<T>(dx32)));
    EXPECT_TRUE(same_bits("rmsnorm dweight (accumulated)", dw, narrow<T>(dw32)));

    // (b) backward, within the bounds derived above, evaluated on these inputs.
    const std::vector<double> doutd = to_double(dout), rstd_in = to_double(rstd);
    std::vector<double> dxd = to_double(dx0), dwd = to_double(dw0);
    cpu::rmsnorm_backward(dxd.data(), dwd.data(), doutd.data(), xd.data(), wd.data(), rstd_in.data(), N, C);
    const auto [X, S, G] = rmsnorm_input_bounds(xd, wd, doutd, rstd_in, N, C);
    const double n = static_cast<double>(N);
    const double dx_abs = second_order * u * (1 + S * (4 * G + 9 * G * X * X));
    const double dw_abs = second_order * u * n * (1 + (n + 2) * X);
    EXPECT_TRUE(close_to("rmsnorm dx vs double", dx, dxd, rounded_once<T>(0.0, dx_abs)));
    EXPECT_TRUE(close_to("rmsnorm dweight vs double", dw, dwd, rounded_once<T>(0.0, dw_abs)));
  }
}

// ---------------------------------------------------------------------------------------- dispatcher

TEST(RmsNormCpu, TheDispatcherRunsTheCpuKernelAndMetaRunsNothing) {
  const std::size_t N = 4, C = 19;
  const std::vector<bf16> x = random_values<bf16>(N * C, 30, -1.0, 1.0), w = random_values<bf16>(C, 31, 0.5, 1.5);
  const std::vector<bf16> dout = random_values<bf16>(N * C, 32, -1.0, 1.0);
  std::vector<bf16> out(N * C), want_out(N * C);
  std::vector<float> rstd(N), want_rstd(N);
  rmsnorm_forward<bf16>(kCpuStream, out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
  cpu::rmsnorm_forward(want_out.data(), want_rstd.data(), x.data(), w.data(), N, C, 1e-5);
  EXPECT_TRUE(same_bits("dispatched out", out, want_out));
  EXPECT_TRUE(same_bits("dispatched rstd", rstd, want_rstd));

  std::vector<bf16> dx = random_values<bf16>(N * C, 33, -1.0, 1.0), dw = random_values<bf16>(C, 34, -1.0, 1.0);
  std::vector<bf16> want_dx = dx, want_dw = dw;
  rmsnorm_backward<bf16>(kCpuStream, dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), nullptr, N, C);
  cpu::rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_TRUE(same_bits("dispatched dx", dx, want_dx));
  EXPECT_TRUE(same_bits("dispatched dweight", dw, want_dw));

  // meta: no memory behind the pointers, and nothing runs.
  const Stream meta{Backend::meta, nullptr};
  EXPECT_NO_THROW(rmsnorm_forward<bf16>(meta, nullptr, nullptr, nullptr, nullptr, N, C, 1e-5));
  EXPECT_NO_THROW(rmsnorm_backward<bf16>(meta, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, C));
}

// The workspace formula: one fp32 per band and column; bands of about 64 rows, at most 256, none empty.
TEST(RmsNormCpu, BackwardWorkspaceIsOneFloatPerBandAndColumn) {
  EXPECT_EQ(rmsnorm_backward_workspace_bytes(0, 4096), 0u);
  for (const std::size_t N : {1u, 63u, 64u, 65u, 300u, 16384u, 16385u, 1000003u}) {
    const RmsNormBands b = rmsnorm_backward_bands(N);
    SCOPED_TRACE("N=" + std::to_string(N));
    EXPECT_GE(b.count, 1u);
    EXPECT_LE(b.count, 256u);
    EXPECT_GE(b.rows * b.count, N);         // every row in a band
    EXPECT_LT(b.rows * (b.count - 1), N);   // the last band is not empty
    EXPECT_EQ(rmsnorm_backward_workspace_bytes(N, 4096), b.count * 4096 * sizeof(float));
  }
}

}  // namespace
}  // namespace trainmem::kernels
