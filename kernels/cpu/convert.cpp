// CPU reference: fp32 <-> bf16 / fp16, bit for bit as CUDA's _rn intrinsics.
#include "kernels/convert.h"

#include <cstring>

namespace trainmem::kernels::cpu {

namespace {
std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace

std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN stays (quiet) NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then drop the low 16 bits.
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}

float bf16_to_float(std::uint16_t b) { return float_of(static_cast<std::uint32_t>(b) << 16); }

std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: infinity
  const int exponent = static_cast<int>(abs >> 23) - 127;
  std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // with the implicit 1
  if (exponent >= -14) {
    // Normal half: keep 10 of 23 mantissa bits, round to nearest even on the 13 dropped.
    std::uint32_t half = (static_cast<std::uint32_t>(exponent + 15) << 10) | ((abs >> 13) & 0x3ffu);
    const std::uint32_t dropped = abs & 0x1fffu;
    if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: fine
    return static_cast<std::uint16_t>(sign | half);
  }
  if (exponent < -25) return sign;  // below half the smallest subnormal: zero
  // Subnormal half: value = m * 2^-24; shift the 24-bit mantissa right so its unit is 2^-24.
  const int shift = -exponent - 14 + 13;  // 14..24
  std::uint32_t half = mantissa >> shift;
  const std::uint32_t dropped = mantissa & ((1u << shift) - 1);
  const std::uint32_t halfway = 1u << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (half & 1u))) ++half;
  return static_cast<std::uint16_t>(sign | half);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return float_of(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // m * 2^-24 (exact)
    return sign ? -value : value;
  }
  return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

void to_bf16(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}
void from_bf16(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}
void to_fp16(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}
void from_fp16(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}

}  // namespace trainmem::kernels::cpu
