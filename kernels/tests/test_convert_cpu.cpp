// fp32 <-> bf16 / fp16 on the CPU, against values worked out by hand and against exhaustive
// round trips: every 16-bit value converts to fp32 and back to itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/convert.h"

namespace trainmem::kernels {
namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(ConvertCpu, Bf16RoundsToNearestEven) {
  EXPECT_EQ(cpu::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(cpu::float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(cpu::float_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, even below: down
  EXPECT_EQ(cpu::float_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, odd below: up
  EXPECT_EQ(cpu::float_to_bf16(from_bits(0x3f808001)), 0x3f81);  // above the tie: up
  EXPECT_EQ(cpu::float_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // the largest float rounds to inf
  EXPECT_TRUE(std::isnan(cpu::bf16_to_float(cpu::float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(cpu::bf16_to_float(0x3f80), 1.0f);
}

TEST(ConvertCpu, Fp16RoundsToNearestEvenOverflowsAndHandlesSubnormals) {
  EXPECT_EQ(cpu::float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(cpu::float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(cpu::float_to_fp16(65504.0f), 0x7bff);                 // the largest half
  EXPECT_EQ(cpu::float_to_fp16(65519.0f), 0x7bff);                 // below the midpoint to 65536
  EXPECT_EQ(cpu::float_to_fp16(65520.0f), 0x7c00);                 // the midpoint rounds (even) to inf
  EXPECT_EQ(cpu::float_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(cpu::float_to_fp16(1.0f + 1.0f / 2048), 0x3c00);       // tie, even below: down
  EXPECT_EQ(cpu::float_to_fp16(1.0f + 3.0f / 2048), 0x3c02);       // tie, odd below: up
  EXPECT_EQ(cpu::float_to_fp16(5.9604644775390625e-8f), 0x0001);   // the smallest subnormal, 2^-24
  EXPECT_EQ(cpu::float_to_fp16(2.98023223876953125e-8f), 0x0000);  // 2^-25: a tie, rounds to even 0
  EXPECT_EQ(cpu::float_to_fp16(3.5e-8f), 0x0001);                  // above the tie
  EXPECT_EQ(cpu::float_to_fp16(6.097555160522461e-5f), 0x03ff);    // the largest subnormal
  EXPECT_EQ(cpu::float_to_fp16(6.103515625e-5f), 0x0400);          // the smallest normal, 2^-14
  EXPECT_TRUE(std::isnan(cpu::fp16_to_float(cpu::float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(cpu::fp16_to_float(0x7c00), std::numeric_limits<float>::infinity());
}

TEST(ConvertCpu, EverySixteenBitValueRoundTrips) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    const float f = cpu::fp16_to_float(v);
    if (!std::isnan(f)) {
      ASSERT_EQ(cpu::float_to_fp16(f), v) << std::hex << h;
    }
    const float b = cpu::bf16_to_float(v);
    if (!std::isnan(b)) {
      ASSERT_EQ(cpu::float_to_bf16(b), v) << std::hex << h;
    }
  }
}

TEST(ConvertCpu, Fp16RoundingIsTheNearestRepresentable) {
  // For many floats, the chosen half is at least as close as its two neighbours.
  for (std::uint32_t u = 0x33000000; u <= 0x477fe000; u += 0x1357) {  // 2^-25 .. 65504
    const float x = from_bits(u);
    const std::uint16_t h = cpu::float_to_fp16(x);
    const double err = std::abs(static_cast<double>(cpu::fp16_to_float(h)) - x);
    for (int d : {-1, 1}) {
      const auto n = static_cast<std::uint16_t>(h + d);
      if ((n & 0x7c00) == 0x7c00) continue;
      ASSERT_LE(err, std::abs(static_cast<double>(cpu::fp16_to_float(n)) - x)) << x;
    }
  }
}

}  // namespace
}  // namespace trainmem::kernels
