// exp(x) for float, written so that the compiler vectorizes a loop that calls it (no branch, no
// library call): the GELU kernel's one transcendental (kernels/cpu/elementwise.cpp). glibc's expf
// and tanhf are calls the compiler cannot vectorize; one tanhf per element made GELU 30% of a
// small model's CPU step.
//
// Method (Cody and Waite's range reduction, as Cephes' expf):
//   n = round(x / ln 2)                       (adding and subtracting 1.5 * 2^23 rounds to an integer)
//   r = x - n ln 2,  |r| <= ln(2)/2           (ln 2 in two parts: n * kLn2Hi is exact)
//   exp(r) = 1 + r + r^2 P(r)                 (P: Cephes' degree-5 minimax polynomial)
//   exp(x) = 2^n exp(r)                       (2^n built from its bits: exponent field n + 127)
// x is first clamped to [-87, 88], so that 2^n stays a normal float: below -87 the result is
// exp(-87) (1.6e-38) instead of a smaller number or 0, above 88 it is exp(88) (1.7e38) instead of
// a larger number or infinity. NaN stays NaN. Compiled with -fno-trapping-math (the compiler
// may then turn the clamps into selects; no value changes: only the floating-point exception
// flags, which nothing reads, may).
//
// Error: at most 1 ulp of the exact exp(x) (checked on every float in [-87, 88], worst 0.99 ulp;
// kernels/tests/test_vector_exp_cpu.cpp checks a dense sample). The same bits on every x86-64
// machine: only additions, multiplications and bit operations, each rounded as IEEE says (no FMA
// in the baseline instruction set).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace trainmem::kernels::cpu {

inline float exp_vectorizable(float x) {
  constexpr float kMaxArg = 88.0f, kMinArg = -87.0f;
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln 2 = kLn2Hi + kLn2Lo
  constexpr float kRound = 12582912.0f;                             // 1.5 * 2^23
  x = x > kMaxArg ? kMaxArg : x;  // written so that NaN passes through both
  x = x < kMinArg ? kMinArg : x;
  const float n = (x * kLog2e + kRound) - kRound;  // round(x / ln 2), an integer in [-126, 127]
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float exp_r = p * (r * r) + r + 1.0f;
  const float n_int = n == n ? n : 0.0f;  // NaN to 0 before the conversion (NaN has no int); r keeps NaN
  const std::uint32_t two_to_n = static_cast<std::uint32_t>(static_cast<std::int32_t>(n_int) + 127) << 23;
  return exp_r * std::bit_cast<float>(two_to_n);
}

// exp in a kernel's compute type: the vectorizable fp32 exp above, or the library's in double.
inline float exp_of(float x) { return exp_vectorizable(x); }
inline double exp_of(double x) { return std::exp(x); }

}  // namespace trainmem::kernels::cpu
