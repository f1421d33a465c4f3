// The CPU SwiGLU (kernels/swiglu.h, kernels/cpu/swiglu.cpp) on fresh random inputs (seeded, never
// zero), in each storage type T:
//   (a) bit for bit equal to the float kernel on the widened inputs, outputs rounded to T;
//   (b) within rounded_once<T>(...) of the double kernel on the same inputs, the fp32 part of the
//       bound derived below;
// and: the double backward against central differences of the double forward; the fp32 kernel
// against the exact function on a grid of gates in [-100, 100]; the in-place calls equal the
// out-of-place ones; extreme gates (+-100, beyond the fp32 exp's range, each type's largest
// finite value) give finite outputs, close to a long double evaluation of the formulas.
//
// The fp32 error bound, u = 2^-24 (one rounding is at most u relative; the vectorized exp is
// within 1 ulp, 2u relative, kernels/cpu/vector_exp.h), for |g| <= 87 (first order; each
// constant below is rounded up by one u to cover the second-order terms):
//   e = exp(-|g|)        2u            (its argument -|g| is exact)
//   1 + e                2u            (e's 2u, times e / (1 + e) <= 1/2, plus the addition's u)
//   r = 1 / (1 + e)      3u
//   s, 1 - s             3u or 6u      (r, or e * r: 2u + 3u + u)
//   silu = g s           7u;   out = silu * up  8u;   dup = dout * silu  8u        ->  9u
//   t = g (1 - s)        7u
//   silu' = s (1 + t)    |err| <= 7u |s t| + 8u |silu'|, and |s t| = |g| s (1 - s) <= |g| e^-|g| <= 1/e
//   dgate = (dout up) silu'    |err| <= (7/e) u |dout up| + 10u |dgate|          ->  3u |dout up| + 11u |dgate|
// silu' crosses zero (at g = -1.28), so dgate's bound has an absolute part. Beyond |g| = 87 the
// kernel takes exp(-|g|) = 0 (kernels/swiglu.h): silu and silu' are then exact to relative 2^-125
// above, and below it returns 0 for values under 87 e^-87 < 2^-119 in magnitude (times |up|).
// In double the same bound holds with u = 2^-53 (std::exp within 1 ulp). The double reference's
// own error (about 2^-50 relative) is far below the fp32 bounds it checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/swiglu.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/swiglu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;
using namespace swiglu_test;

constexpr double kSwigluFlushBound = 0x1p-119;  // |silu(g)| and |silu'(g)| for g < -87

// The unit roundoff of the compute type: fp32's for float, bf16 and fp16; double's for double.
template <typename T>
constexpr double swiglu_compute_roundoff() {
  return std::is_same_v<T, double> ? 0x1p-53 : 0x1p-24;
}

template <typename T>
class SwigluDtypeCpu : public ::testing::Test {};
TYPED_TEST_SUITE(SwigluDtypeCpu, StorageTypes, DtypeNames);

template <typename T>
class SwigluAllTypesCpu : public ::testing::Test {};
using SwigluAllTypes = ::testing::Types<float, double, bf16, fp16>;
TYPED_TEST_SUITE(SwigluAllTypesCpu, SwigluAllTypes, DtypeNames);

// Past one thread's share (kernels/cpu/parallel_for.h) and not a multiple of any vector width.
constexpr std::size_t kSwigluN = 70001;

TYPED_TEST(SwigluDtypeCpu, ForwardAndBackwardRoundEachOutputOnce) {
  using T = TypeParam;
  const auto [gate, up, dout] = random_swiglu_inputs<T>(kSwigluN, 1);
  const auto [out, dgate, dup] = cpu_swiglu(gate, up, dout);

  // (a)
  const auto [out32, dgate32, dup32] = cpu_swiglu(widen(gate), widen(up), widen(dout));
  EXPECT_TRUE(same_bits("swiglu out", out, narrow<T>(out32)));
  EXPECT_TRUE(same_bits("swiglu dgate", dgate, narrow<T>(dgate32)));
  EXPECT_TRUE(same_bits("swiglu dup", dup, narrow<T>(dup32)));

  // (b) the bound of the file's comment: 9u relative (out, dup); 11u relative plus 3u |dout up|,
  // |dout up| <= 2, absolute (dgate).
  constexpr double u = 0x1p-24;
  const auto [outd, dgated, dupd] = cpu_swiglu(to_double(gate), to_double(up), to_double(dout));
  EXPECT_TRUE(close_to("swiglu out vs double", out, outd, rounded_once<T>(9 * u, 0.0)));
  EXPECT_TRUE(close_to("swiglu dup vs double", dup, dupd, rounded_once<T>(9 * u, 0.0)));
  EXPECT_TRUE(close_to("swiglu dgate vs double", dgate, dgated, rounded_once<T>(11 * u, 3 * u * 2.0)));
}

// The model's in-place calls: the gradients written over the saved gate and up; and the forward
// written over either input. Each must give the out-of-place bits.
TYPED_TEST(SwigluAllTypesCpu, InPlaceEqualsOutOfPlace) {
  using T = TypeParam;
  const std::size_t n = kSwigluN;
  const auto [gate, up, dout] = random_swiglu_inputs<T>(n, 4);
  const auto [out, dgate, dup] = cpu_swiglu(gate, up, dout);

  std::vector<T> over_gate = gate, over_up = up;
  cpu::swiglu_forward(over_gate.data(), over_gate.data(), up.data(), n);
  cpu::swiglu_forward(over_up.data(), gate.data(), over_up.data(), n);
  EXPECT_TRUE(same_bits("swiglu out (in place over gate)", over_gate, out));
  EXPECT_TRUE(same_bits("swiglu out (in place over up)", over_up, out));

  std::vector<T> dgate_over_gate = gate, dup_over_up = up;
  cpu::swiglu_backward(dgate_over_gate.data(), dup_over_up.data(), dout.data(), dgate_over_gate.data(),
                       dup_over_up.data(), n);
  EXPECT_TRUE(same_bits("swiglu dgate (in place over gate)", dgate_over_gate, dgate));
  EXPECT_TRUE(same_bits("swiglu dup (in place over up)", dup_over_up, dup));
}

// The double backward against central differences of the double forward, element by element (the
// op is elementwise: shifting every gate by h moves each out[i] by its own gate's change only).
// With H = half the actual step ((g + h) - (g - h), exactly computed), the error of
//   fd = (out(g + h) - out(g - h)) / (2H)
// as d out / d gate is at most
//   truncation  H^2 / 6 * max|silu'''| * |up| <= 0.2 H^2 |up|
//               (silu''' = 3 s'' + g s''', |s''| <= 1/4 and |g s'''| <= |g| e^-|g| <= 1/e: at most 1.2)
//   rounding    9 eps (|out+| + |out-|) / (2H) + 2 eps |fd|     (each out within 9 eps, eps = 2^-53)
// and the backward's own error is 3 eps |dout up| + 11 eps |dgate| (the file's comment, in double);
// one more eps |dgate| for the product dout * fd. For dup, out is linear in up: no truncation.
TEST(SwigluCpu, DoubleBackwardIsTheDerivativeOfTheForward) {
  const std::size_t n = 257;
  const auto [gate, up, dout] = random_swiglu_inputs<double>(n, 7);
  std::vector<double> dgate(n), dup(n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);

  constexpr double h = 0x1p-15, eps = 0x1p-53;
  // The shifted inputs and the forward there: one of gate or up moved by +-h, the other as given.
  auto shifted = [&](const std::vector<double>& x, double by) {
    std::vector<double> y = x;
    for (double& v : y) v += by;
    return y;
  };
  auto forward = [&](const std::vector<double>& g, const std::vector<double>& u) {
    std::vector<double> out(n);
    cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    return out;
  };
  const std::vector<double> gate_p = shifted(gate, h), gate_m = shifted(gate, -h);
  const std::vector<double> up_p = shifted(up, h), up_m = shifted(up, -h);
  const std::vector<double> out_gp = forward(gate_p, up), out_gm = forward(gate_m, up);
  const std::vector<double> out_up = forward(gate, up_p), out_um = forward(gate, up_m);

  double worst_gate = 0, worst_up = 0;  // |error| / bound
  for (std::size_t i = 0; i < n; ++i) {
    const double step_g = gate_p[i] - gate_m[i], H = step_g / 2;
    const double fd_g = (out_gp[i] - out_gm[i]) / step_g;
    const double bound_g = std::abs(dout[i]) * (0.2 * H * H * std::abs(up[i]) +
                                                9 * eps * (std::abs(out_gp[i]) + std::abs(out_gm[i])) / step_g +
                                                2 * eps * std::abs(fd_g)) +
                           3 * eps * std::abs(dout[i] * up[i]) + 12 * eps * std::abs(dgate[i]);
    const double err_g = std::abs(dgate[i] - dout[i] * fd_g);
    EXPECT_LE(err_g, bound_g) << "dgate at gate = " << gate[i] << ", up = " << up[i];
    worst_gate = std::max(worst_gate, err_g / bound_g);

    const double step_u = up_p[i] - up_m[i];
    const double fd_u = (out_up[i] - out_um[i]) / step_u;
    const double bound_u = std::abs(dout[i]) * (9 * eps * (std::abs(out_up[i]) + std::abs(out_um[i])) / step_u +
                                                2 * eps * std::abs(fd_u)) +
                           10 * eps * std::abs(dup[i]);
    const double err_u = std::abs(dup[i] - dout[i] * fd_u);
    EXPECT_LE(err_u, bound_u) << "dup at gate = " << gate[i] << ", up = " << up[i];
    worst_up = std::max(worst_up, err_u / bound_u);
  }
  std::cout << "swiglu central differences: worst error / bound " << worst_gate << " (dgate), " << worst_up
            << " (dup)\n";
}

// The fp32 kernel against the exact function (the double kernel) on 200,001 gates, -100 to 100 in
// steps of 0.001, up = dout = 1: within the bound of the file's comment, 9u |silu| and
// 3u + 11u |silu'|, for g >= -87; below -87 within 2^-119 of the exact values.
TEST(SwigluCpu, Fp32IsWithinItsBoundOfTheExactFunction) {
  const std::size_t n = 200001;
  std::vector<float> gate(n), ones(n, 1.0f), out(n), dgate(n), dup(n);
  for (std::size_t i = 0; i < n; ++i) gate[i] = static_cast<float>(-100.0 + 1e-3 * static_cast<double>(i));
  cpu::swiglu_forward(out.data(), gate.data(), ones.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), ones.data(), gate.data(), ones.data(), n);
  const std::vector<double> gated(gate.begin(), gate.end()), onesd(n, 1.0);
  std::vector<double> outd(n), dgated(n), dupd(n);
  cpu::swiglu_forward(outd.data(), gated.data(), onesd.data(), n);
  cpu::swiglu_backward(dgated.data(), dupd.data(), onesd.data(), gated.data(), onesd.data(), n);
  constexpr double u = 0x1p-24;
  double worst_out = 0, worst_dgate = 0;  // in units of u relative (out) and of the bound (dgate)
  for (std::size_t i = 0; i < n; ++i) {
    const bool flushed = gated[i] < -87;
    const double bound_out = flushed ? kSwigluFlushBound : 9 * u * std::abs(outd[i]);
    const double bound_dgate = flushed ? kSwigluFlushBound : 3 * u + 11 * u * std::abs(dgated[i]);
    ASSERT_LE(std::abs(out[i] - outd[i]), bound_out) << "silu at gate = " << gate[i];
    ASSERT_LE(std::abs(dup[i] - outd[i]), bound_out) << "dup at gate = " << gate[i];
    ASSERT_LE(std::abs(dgate[i] - dgated[i]), bound_dgate) << "silu' at gate = " << gate[i];
    if (!flushed) {
      worst_out = std::max(worst_out, std::abs(out[i] - outd[i]) / (u * std::abs(outd[i])));
      worst_dgate = std::max(worst_dgate, std::abs(dgate[i] - dgated[i]) / bound_dgate);
    }
  }
  std::cout << "swiglu fp32 vs exact: silu worst " << worst_out << " u relative; silu' worst " << worst_dgate
            << " of its bound\n";
}

// Gates far out on both sides: sigma(+-100), around the fp32 exp's cut-off at 87, and each type's
// largest finite value (up = +-0.75 so that silu(g) up stays finite). Every output is finite and
// close to the formulas evaluated naively in long double (64-bit significand, range to 1e4932:
// exp(-g) overflows to inf only where sigma(g) is 0 in every type), within the bounds of (b)
// plus 2^-119 |up| absolute where the fp32 kernel returns 0 below gate = -87.
TYPED_TEST(SwigluAllTypesCpu, ExtremeGatesGiveFiniteOutputs) {
  using T = TypeParam;
  const auto [gate, up, dout] = extreme_swiglu_inputs<T>();
  const std::size_t n = gate.size();
  const auto [out, dgate, dup] = cpu_swiglu(gate, up, dout);

  std::vector<double> out_ref(n), dgate_ref(n), dup_ref(n);
  for (std::size_t i = 0; i < n; ++i) {
    const long double g = load(gate[i]), u = load(up[i]), d = load(dout[i]);
    const long double s = 1.0L / (1.0L + std::exp(-g));
    const long double silu = g * s, dsilu = s * (1.0L + g * (1.0L - s));
    out_ref[i] = static_cast<double>(silu * u);
    dgate_ref[i] = static_cast<double>(d * u * dsilu);
    dup_ref[i] = static_cast<double>(d * silu);
  }
  for (std::size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("gate = " + std::to_string(load(gate[i])));
    EXPECT_TRUE(std::isfinite(static_cast<double>(load(out[i]))));
    EXPECT_TRUE(std::isfinite(static_cast<double>(load(dgate[i]))));
    EXPECT_TRUE(std::isfinite(static_cast<double>(load(dup[i]))));
  }
  const double uc = swiglu_compute_roundoff<T>(), du = 0.75 * 0.5;
  const double flush = std::is_same_v<T, double> ? 0.0 : kSwigluFlushBound;
  EXPECT_TRUE(close_to("swiglu out, extreme gates", out, out_ref, rounded_once<T>(9 * uc, flush)));
  EXPECT_TRUE(close_to("swiglu dup, extreme gates", dup, dup_ref, rounded_once<T>(9 * uc, flush)));
  EXPECT_TRUE(close_to("swiglu dgate, extreme gates", dgate, dgate_ref, rounded_once<T>(11 * uc, 3 * uc * du + flush)));
}

// The dispatchers: the meta backend touches nothing; the CPU backend is cpu::.
TEST(SwigluCpu, DispatchersCallTheCpuKernelOrNothing) {
  const std::size_t n = 33;
  const std::vector<float> gate = random_values<float>(n, 10, -4.0, 4.0), up = random_values<float>(n, 11, -1.0, 1.0),
                           dout = random_values<float>(n, 12, -1.0, 1.0);
  std::vector<float> out(n), dgate(n), dup(n), want_out(n), want_dgate(n), want_dup(n);
  cpu::swiglu_forward(want_out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(want_dgate.data(), want_dup.data(), dout.data(), gate.data(), up.data(), n);
  swiglu_forward(kCpuStream, out.data(), gate.data(), up.data(), n);
  swiglu_backward(kCpuStream, dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  EXPECT_TRUE(same_bits("swiglu out (dispatcher)", out, want_out));
  EXPECT_TRUE(same_bits("swiglu dgate (dispatcher)", dgate, want_dgate));
  EXPECT_TRUE(same_bits("swiglu dup (dispatcher)", dup, want_dup));

  const Stream meta{Backend::meta, nullptr};
  EXPECT_NO_THROW(swiglu_forward(meta, nullptr, nullptr, nullptr, n));
  EXPECT_NO_THROW(swiglu_backward(meta, nullptr, nullptr, nullptr, nullptr, nullptr, n));
}

}  // namespace
}  // namespace trainmem::kernels
