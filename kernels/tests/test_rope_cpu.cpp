// The CPU RoPE kernel (kernels/rope.h), in the model's layout: rows of a fused qkv projection
// [B, Tn, (H + 2*Hkv) * D (+ padding)], rotated by two calls, q heads (first_column 0) and k heads
// (first_column H*D). The v heads and the padding are poisoned (NaN bits) in the input, and a
// separate output is poisoned wholly: the rotated values must be right (a NaN read from a column
// outside the heads would show in them) and every other column must keep its bits, in place and
// out of place.
//
//   RopeCpu.HandChecked*              t = 0 is the identity; t = 1 with D = 2 and D = 4 (theta
//                                     10000 and 500000) against values worked out by hand.
//   RopeCpu.DoubleMatchesTheDefinitionAtLongContexts
//                                     the double instantiation against the formula evaluated in
//                                     long double, up to t = 131071, theta 10000 and 500000, B = 3
//                                     sequences too: the angle's accuracy at long contexts.
//   RopeCpu.AnFp32AngleWould...       what the double angle buys: an fp32 one misses by > 1e-3.
//   RopeCpu.BackwardUndoesForward...  backward(forward(x)) == x in double, within a derived bound.
//   RopeCpu.BackwardIsTheTranspose... <forward(x), y> == <x, backward(y)> in double: forward is
//                                     linear in x with Jacobian R, so this is the gradient check.
//   RopeCpu.Rejects..., Dispatches... bad shapes throw; the dispatcher's cpu and meta backends.
//   RopeDtypeCpu/<T>                  fp32, bf16, fp16: (a) bit for bit the float kernel on the
//                                     widened inputs, rounded; (b) the double kernel within
//                                     rounded_once<T>(...); Tn up to 4096, both thetas; in place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/rope.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/rope_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;
using namespace rope_test;

constexpr double kU = 0x1p-53;  // double's unit roundoff
constexpr double kThetas[] = {10000.0, 500000.0};

// --------------------------------------------------------------------------------- hand-checked cases

TEST(RopeCpu, HandCheckedIdentityAtPositionZero) {
  // t = 0: every angle is 0, cos = 1, sin = 0, so v_i * 1 - v_{i+D/2} * 0 is v_i exactly.
  const RopeLayout L{3, 1, 2, 1, 6, 1};  // Tn = 1: every row is at position 0
  const std::vector<float> x = rope_input<float>(L, 1);
  std::vector<float> out(L.size(), rope_poison<float>());
  rope_qk(true, out.data(), x.data(), L, 10000.0);
  EXPECT_TRUE(same_bits("forward at t = 0", rotated_part(out, L), rotated_part(x, L)));
  rope_qk(false, out.data(), x.data(), L, 500000.0);
  EXPECT_TRUE(same_bits("backward at t = 0", rotated_part(out, L), rotated_part(x, L)));
}

TEST(RopeCpu, HandCheckedPositionOne) {
  // cos(1) = 0.5403023058681398, sin(1) = 0.8414709848078965 (tables).
  // D = 2 (one pair, freq_0 = theta^0 = 1, so the angle at t = 1 is 1 rad), v = (0.5, 0.25):
  //   out_0 = 0.5 cos 1 - 0.25 sin 1 = 0.2701511529340699 - 0.2103677462019741 = 0.0597834067320958
  //   out_1 = 0.5 sin 1 + 0.25 cos 1 = 0.4207354924039483 + 0.1350755764670350 = 0.5558110688709833
  // Two rows of one sequence (t = 0, 1); row 0 is left as it is.
  {
    const std::vector<double> x = {0.5, 0.25, 0.5, 0.25};
    std::vector<double> out(4), back(4);
    cpu::rope_forward(out.data(), x.data(), 1, 2, 1, 2, 2, 0, 10000.0);
    EXPECT_EQ(out[0], 0.5);
    EXPECT_EQ(out[1], 0.25);
    EXPECT_NEAR(out[2], 0.0597834067320958, 1e-15);
    EXPECT_NEAR(out[3], 0.5558110688709833, 1e-15);
    // Backward: the rotation by -1 rad takes them back.
    cpu::rope_backward(back.data(), out.data(), 1, 2, 1, 2, 2, 0, 10000.0);
    for (std::size_t k = 0; k < 4; ++k) EXPECT_NEAR(back[k], x[k], 1e-15) << k;
  }
  // D = 4, theta = 10000, t = 1: pairs (v_0, v_2) and (v_1, v_3) -- rotate half, not interleaved --
  // turned by freq_0 = 1 rad and freq_1 = 10000^(-2/4) = 0.01 rad.
  // cos(0.01) = 0.9999500004166653, sin(0.01) = 0.0099998333341667. v = (1, 2, 3, 4):
  //   out_0 = 1 cos 1 - 3 sin 1       = 0.5403023058681398 - 2.5244129544236895 = -1.9841106485555497
  //   out_2 = 1 sin 1 + 3 cos 1       = 0.8414709848078965 + 1.6209069176044194 =  2.4623779024123159
  //   out_1 = 2 cos 0.01 - 4 sin 0.01 = 1.9999000008333306 - 0.0399993333366668 =  1.9599006674966638
  //   out_3 = 2 sin 0.01 + 4 cos 0.01 = 0.0199996666683334 + 3.9998000016666612 =  4.0197996683349946
  // theta = 500000: freq_1 = 500000^(-1/2) = 0.0014142135623731 rad; cos = 0.9999990000001667,
  // sin = 0.0014142130909688:
  //   out_1 = 2 cos - 4 sin = 1.9999980000003334 - 0.0056568523638752 = 1.9943411476364582
  //   out_3 = 2 sin + 4 cos = 0.0028284261819376 + 3.9999960000006668 = 4.0028244261826044
  {
    const std::vector<double> x = {9, 9, 9, 9, 1, 2, 3, 4};  // row 0 (t = 0) is not looked at
    std::vector<double> out(8);
    cpu::rope_forward(out.data(), x.data(), 1, 2, 1, 4, 4, 0, 10000.0);
    EXPECT_NEAR(out[4], -1.9841106485555497, 1e-14);
    EXPECT_NEAR(out[6], 2.4623779024123159, 1e-14);
    EXPECT_NEAR(out[5], 1.9599006674966638, 1e-14);
    EXPECT_NEAR(out[7], 4.0197996683349946, 1e-14);
    cpu::rope_forward(out.data(), x.data(), 1, 2, 1, 4, 4, 0, 500000.0);
    EXPECT_NEAR(out[4], -1.9841106485555497, 1e-14);  // freq_0 = 1 whatever theta is
    EXPECT_NEAR(out[5], 1.9943411476364582, 1e-14);
    EXPECT_NEAR(out[7], 4.0028244261826044, 1e-14);
  }
}

// --------------------------------------------------------------------------------- the angle, in double

// The formula of rope.h evaluated in long double (64 significant bits on x86-64), element by element,
// independently of the kernel's loops.
// The frequencies too: theta^(-2i/D), rescaled as transformers' _compute_llama3_parameters does
// where the set is scaled (its three regimes by wavelength; rope_frequencies.h).
std::vector<long double> rope_definition(const std::vector<double>& x, const RopeLayout& L, const RopeFrequencies& f) {
  const std::size_t half = L.D / 2;
  std::vector<long double> freq(half);
  for (std::size_t i = 0; i < half; ++i) {
    freq[i] = std::pow(static_cast<long double>(f.theta), -2.0L * i / L.D);
    if (!f.scaled()) continue;
    const long double wavelength = 2 * 3.141592653589793238462643383279502884L / freq[i], L0 = f.original_context;
    if (wavelength > L0 / f.low_freq_factor) {
      freq[i] /= f.factor;
    } else if (wavelength >= L0 / f.high_freq_factor) {
      const long double smooth = (L0 / wavelength - f.low_freq_factor) / (f.high_freq_factor - f.low_freq_factor);
      freq[i] = (1 - smooth) * freq[i] / f.factor + smooth * freq[i];
    }
  }
  std::vector<long double> out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!L.rotated(k)) continue;
    const std::size_t in_head = (k % L.row_stride()) % L.D;
    const long double angle = static_cast<long double>(L.position(k)) * freq[in_head % half];
    const long double c = std::cos(angle), s = std::sin(angle);
    const long double v = x[k], w = x[L.partner(k)];
    out[k] = in_head < half ? v * c - w * s : w * s + v * c;  // (v_i, v_{i+D/2}) = (v, w) or (w, v)
  }
  return out;
}

TEST(RopeCpu, DoubleMatchesTheDefinitionAtLongContexts) {
  if (std::numeric_limits<long double>::digits <= 53) GTEST_SKIP() << "long double is no wider than double here";
  // Error of the double kernel against the exact rotation, element k of a pair of length n at
  // position t (u = 2^-53):
  //   exponent -2i/D rounded (u relative), so theta^(-2i/D) is off by ln(theta) u relative; pow
  //   within 1 ulp (2u); t * freq rounded (u): the angle within t (ln(theta) + 3) u, and cos/sin
  //   within that plus their own 1 ulp (2u);
  //   the rotation in double: 3u n (two products and a sum, sum of |terms| <= n);
  //   so |error| <= n ( sqrt(2) (t (ln(theta) + 3) u + 2u) + 3u ) <= n u (1.5 t (ln(theta) + 3) + 8)
  //   (the long double reference's own error, ~2^-11 of that, is inside the rounding up).
  // Llama 3.1's scaling adds to freq's relative error: 2 pi / freq, L0 / wavelength, the blend's
  // subtraction and division (s within 3u L0/w / (high - low) <= 3u high / (high - low) = 4u
  // absolute for factors 1 and 4), then (1 - s) f / factor + s f (4 roundings): under 10u more, so
  // ln(theta) + 13 replaces ln(theta) + 3 for a scaled set.
  // For an fp32 angle the same t would cost up to ~1e-2 (rope.h), far beyond this bound.
  // The model's layout (3 sequences: positions restart at row Tn), and long single sequences.
  const RopeLayout layouts[] = {{3, 37, 4, 2, 16, 3}, {1, 4096, 1, 1, 64, 0}, {1, 131072, 1, 0, 8, 0}};
  std::uint64_t seed = 10;
  for (const RopeLayout& L : layouts) {
    // Both bases, and Llama 3.1's scaling (Llama 3.2 1B's: all three regimes at D >= 8).
    for (const RopeFrequencies& frequencies :
         {RopeFrequencies(10000.0), RopeFrequencies(500000.0), RopeFrequencies::llama3(500000.0, 32, 1, 4, 8192)}) {
      const double theta = frequencies.theta, extra = frequencies.scaled() ? 10 : 0;
      SCOPED_TRACE(L.describe() + " theta=" + std::to_string(theta) + (frequencies.scaled() ? " llama3-scaled" : ""));
      const std::vector<double> x = rope_input<double>(L, ++seed);
      std::vector<double> out(L.size(), rope_poison<double>());
      rope_qk(true, out.data(), x.data(), L, frequencies);
      const std::vector<long double> want = rope_definition(x, L, frequencies);
      std::size_t wrong = 0;
      double worst_ratio = 0;
      for (std::size_t k = 0; k < x.size(); ++k) {
        if (!L.rotated(k)) continue;
        const double t = static_cast<double>(L.position(k));
        const double bound = pair_norm(x, L, k) * kU * (1.5 * t * (std::log(theta) + 3 + extra) + 8);
        const double err = static_cast<double>(std::fabs(out[k] - want[k]));
        worst_ratio = std::max(worst_ratio, err / bound);
        if (!(err <= bound) && wrong++ < 5)
          ADD_FAILURE() << "element " << k << " (t = " << t << "): |error| " << err << " > bound " << bound;
      }
      EXPECT_EQ(wrong, 0u);
      EXPECT_TRUE(untouched("forward (double)", out, std::vector<double>(L.size(), rope_poison<double>()), L));
      std::cout << "  " << L.describe() << " theta=" << theta << (frequencies.scaled() ? " (llama3 scaling)" : "")
                << ": worst |error| / bound = " << worst_ratio << "\n";
    }
  }
}

// The header's reason for double angles, measured: t * freq_1 in fp32 for D = 128 (freq_1 =
// 10000^(-1/64) ~ 0.87) over t < 131072 misses cos of the exact angle by more than 1e-3.
TEST(RopeCpu, AnFp32AngleWouldLoseAccuracyAtLongContexts) {
  const long double freq = std::pow(10000.0L, -2.0L / 128);
  const float freq32 = static_cast<float>(freq);
  double worst = 0;
  for (std::size_t t = 0; t < 131072; ++t) {
    const float angle32 = static_cast<float>(t) * freq32;
    worst = std::max(worst, static_cast<double>(std::fabs(std::cos(static_cast<long double>(angle32)) -
                                                          std::cos(static_cast<long double>(t) * freq))));
  }
  std::cout << "  largest |cos(fp32 angle) - cos(angle)| over t < 131072: " << worst << "\n";
  EXPECT_GT(worst, 1e-3);
}

// --------------------------------------------------------------------------------- backward, in double

TEST(RopeCpu, BackwardUndoesForwardInDouble) {
  // b = backward(forward(x)) with the kernel's own rounded cos/sin c', s' (each within 1 ulp, 2u):
  //   forward  f = R' x + e1, |e1_k| <= 3u n          (two products and a sum; n = |pair of x|)
  //   backward b = R'^T f + e2, |e2_k| <= 3u n         (f's pairs have length n (1 + O(u)))
  //   R'^T R' = (c'^2 + s'^2) I, |c'^2 + s'^2 - 1| <= 4u
  //   |b_k - x_k| <= 4u |x_k| + sqrt(2) 3u n + 3u n <= 11.25u n: bound 12u n.
  const RopeLayout L{2, 300, 3, 2, 10, 2};
  std::uint64_t seed = 20;
  for (const double theta : kThetas) {
    SCOPED_TRACE("theta=" + std::to_string(theta));
    const std::vector<double> x = rope_input<double>(L, ++seed);
    std::vector<double> f(L.size(), rope_poison<double>()), b(L.size(), rope_poison<double>());
    rope_qk(true, f.data(), x.data(), L, theta);
    rope_qk(false, b.data(), f.data(), L, theta);
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (!L.rotated(k)) continue;
      const double bound = 12 * kU * pair_norm(x, L, k);
      if (!(std::fabs(b[k] - x[k]) <= bound) && wrong++ < 5)
        ADD_FAILURE() << "element " << k << ": backward(forward(x)) = " << b[k] << ", x = " << x[k];
    }
    EXPECT_EQ(wrong, 0u);
    // In place, both ways: the same bits.
    std::vector<double> inplace = x;
    rope_qk(true, inplace.data(), inplace.data(), L, theta);
    EXPECT_TRUE(same_bits("forward in place", rotated_part(inplace, L), rotated_part(f, L)));
    rope_qk(false, inplace.data(), inplace.data(), L, theta);
    EXPECT_TRUE(same_bits("backward in place", rotated_part(inplace, L), rotated_part(b, L)));
    EXPECT_TRUE(untouched("in place", inplace, x, L));
  }
}

TEST(RopeCpu, BackwardIsTheTransposeOfForwardInDouble) {
  // forward(x) = R' x + e1 and backward(y) = R'^T y + e2 with the same rounded c', s', and
  // <R' x, y> = <x, R'^T y> exactly, so
  //   |<forward(x), y> - <x, backward(y)>| <= sum_k (|e1_k| |y_k| + |x_k| |e2_k|)
  //                                          + the two dot products' rounding,
  // |e1_k| <= 3u n_x(k), |e2_k| <= 3u n_y(k) (the pair lengths; see BackwardUndoesForward), and the
  // dots summed in long double over N terms: within N u_ld sum |terms| each (u_ld its roundoff).
  // Bound: 3.01u sum_k (n_x(k) |y_k| + |x_k| n_y(k)) + 1.01 N u_ld (sum |f_k y_k| + sum |x_k b_k|).
  const RopeLayout L{3, 257, 4, 2, 16, 5};
  const long double u_ld = std::numeric_limits<long double>::epsilon() / 2;
  std::uint64_t seed = 30;
  for (const double theta : kThetas) {
    SCOPED_TRACE("theta=" + std::to_string(theta));
    const std::vector<double> x = rope_input<double>(L, ++seed), y = rope_input<double>(L, ++seed);
    std::vector<double> f(L.size(), rope_poison<double>()), b(L.size(), rope_poison<double>());
    rope_qk(true, f.data(), x.data(), L, theta);
    rope_qk(false, b.data(), y.data(), L, theta);
    long double fy = 0, xb = 0, abs_fy = 0, abs_xb = 0;
    double errors = 0;
    std::size_t N = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      if (!L.rotated(k)) continue;
      ++N;
      fy += static_cast<long double>(f[k]) * y[k];
      xb += static_cast<long double>(x[k]) * b[k];
      abs_fy += std::fabs(static_cast<long double>(f[k]) * y[k]);
      abs_xb += std::fabs(static_cast<long double>(x[k]) * b[k]);
      errors += pair_norm(x, L, k) * std::fabs(y[k]) + std::fabs(x[k]) * pair_norm(y, L, k);
    }
    const double bound =
        3.01 * kU * errors + static_cast<double>(1.01L * static_cast<long double>(N) * u_ld * (abs_fy + abs_xb));
    EXPECT_LE(static_cast<double>(std::fabs(fy - xb)), bound)
        << "<forward(x), y> = " << static_cast<double>(fy) << ", <x, backward(y)> = " << static_cast<double>(xb);
  }
}

// --------------------------------------------------------------------------------- arguments, dispatch

TEST(RopeCpu, RejectsShapesItCannotRotate) {
  std::vector<float> v(64, 1.0f);
  // D odd
  EXPECT_THROW(cpu::rope_forward(v.data(), v.data(), 1, 2, 1, 5, 32, 0, 10000.0), std::invalid_argument);
  // heads past the end of the row: columns [8, 40) of a 32-column row
  EXPECT_THROW(cpu::rope_backward(v.data(), v.data(), 1, 2, 2, 16, 32, 8, 10000.0), std::invalid_argument);
  // theta not positive
  EXPECT_THROW(cpu::rope_forward(v.data(), v.data(), 1, 2, 1, 8, 32, 0, 0.0), std::invalid_argument);
  // llama3 scaling whose low-frequency factor is not below its high one (the blend would divide by <= 0)
  EXPECT_THROW(cpu::rope_forward(v.data(), v.data(), 1, 2, 1, 8, 32, 0, RopeFrequencies::llama3(500000, 8, 4, 1, 8192)),
               std::invalid_argument);
}

TEST(RopeCpu, DispatchesOnTheStreamsBackend) {
  const RopeLayout L{2, 5, 2, 1, 8, 0};
  const std::vector<bf16> x = rope_input<bf16>(L, 40);
  std::vector<bf16> direct(L.size(), rope_poison<bf16>()), dispatched(L.size(), rope_poison<bf16>());
  cpu::rope_forward(direct.data(), x.data(), L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
  rope_forward<bf16>(kCpuStream, dispatched.data(), x.data(), L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
  EXPECT_TRUE(same_bits("forward through the dispatcher", dispatched, direct));
  cpu::rope_backward(direct.data(), x.data(), L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
  rope_backward<bf16>(kCpuStream, dispatched.data(), x.data(), L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
  EXPECT_TRUE(same_bits("backward through the dispatcher", dispatched, direct));
  // meta: nothing runs (these pointers have no memory behind them).
  const Stream meta{Backend::meta, nullptr};
  rope_forward<bf16>(meta, nullptr, nullptr, L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
  rope_backward<bf16>(meta, nullptr, nullptr, L.B, L.Tn, L.H, L.D, L.row_stride(), 0, 10000.0);
}

// --------------------------------------------------------------------------------- storage types

template <typename T>
class RopeDtypeCpu : public ::testing::Test {};
TYPED_TEST_SUITE(RopeDtypeCpu, StorageTypes, DtypeNames);

TYPED_TEST(RopeDtypeCpu, ForwardAndBackward) {
  using T = TypeParam;
  // (b)'s bound. The fp32 kernel, per output of a pair (lo, hi) of length n <= sqrt(2) (inputs in
  // [-1, 1]): cos and sin rounded to fp32 (2^-24 relative each), two products and a sum
  // (2^-24 each): |error| <= 3 * 2^-24 (|lo c| + |hi s|) (1 + O(2^-24)) <= 3 * 2^-24 * n. The
  // double reference is within ~1e-16 of exact; rounding to T adds u(T) |out| <= u(T) (|ref| + atol).
  // Hence rounded_once<T>(0, 4 * 2^-24 * sqrt(2)): 3 rounded up to 4 covers the second-order terms.
  const Tolerance tol = rounded_once<T>(0.0, 4 * 0x1p-24 * std::sqrt(2.0));
  // Tn = 37 with B = 2 (positions restart at row Tn), 4 q heads, 2 k heads, padded rows; and one
  // long sequence of small heads (t up to 4095).
  const RopeLayout layouts[] = {{2, 37, 4, 2, 16, 3}, {1, 4096, 1, 1, 8, 0}};
  std::uint64_t seed = 100;
  for (const RopeLayout& L : layouts) {
    for (const double theta : kThetas) {
      SCOPED_TRACE(L.describe() + " theta=" + std::to_string(theta));
      const std::vector<T> x = rope_input<T>(L, ++seed), dy = rope_input<T>(L, ++seed);
      const auto [poisoned, y, dx] = cpu_rope(x, dy, L, theta);
      EXPECT_TRUE(untouched("forward, out of place", y, poisoned, L));
      EXPECT_TRUE(untouched("backward, out of place", dx, poisoned, L));

      // (a) the float kernel on the widened inputs, rounded.
      const RopeOutputs<float> fp32 = cpu_rope(widen(x), widen(dy), L, theta);
      EXPECT_TRUE(same_bits("rope forward", rotated_part(y, L), rotated_part(narrow<T>(fp32.y), L)));
      EXPECT_TRUE(same_bits("rope backward", rotated_part(dx, L), rotated_part(narrow<T>(fp32.dx), L)));

      // (b) the double kernel on the same inputs.
      const RopeOutputs<double> fp64 = cpu_rope(to_double(x), to_double(dy), L, theta);
      EXPECT_TRUE(close_to("rope forward vs double", rotated_part(y, L), rotated_part(fp64.y, L), tol));
      EXPECT_TRUE(close_to("rope backward vs double", rotated_part(dx, L), rotated_part(fp64.dx, L), tol));

      // In place, as the model calls it: the same bits, and the v heads and padding (poison) kept.
      std::vector<T> y_inplace = x, dx_inplace = dy;
      rope_qk(true, y_inplace.data(), y_inplace.data(), L, theta);
      rope_qk(false, dx_inplace.data(), dx_inplace.data(), L, theta);
      EXPECT_TRUE(same_bits("rope forward in place", rotated_part(y_inplace, L), rotated_part(y, L)));
      EXPECT_TRUE(same_bits("rope backward in place", rotated_part(dx_inplace, L), rotated_part(dx, L)));
      EXPECT_TRUE(untouched("forward, in place", y_inplace, x, L));
      EXPECT_TRUE(untouched("backward, in place", dx_inplace, dy, L));
    }
  }
}

}  // namespace
}  // namespace trainmem::kernels
