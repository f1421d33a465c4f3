// The storage types of the kernels: fp32, bf16 and fp16 (and double, for the gradient checks'
// references), and how a kernel written once as `template <typename T>` reads and writes them.
//
//   bf16: the top 16 bits of an fp32 (1 sign, 8 exponent, 7 mantissa bits): fp32's range, ~3 digits.
//   fp16: IEEE half (1 sign, 5 exponent, 10 mantissa bits): max 65504, subnormals below 6.1e-5.
//
// A kernel loads each element into its compute type (float for fp32, bf16 and fp16; double for
// double), does every operation and every sum in that type, and stores each output once:
//
//   const float x = load(inp[i]);          // 16 bit -> fp32 is exact
//   out[i] = store<T>(0.5f * x);           // fp32 -> 16 bit: rounded to nearest, ties to even
//
// The rounding is the GPU's (__float2bfloat16_rn / __float2half_rn), bit for bit; NaN stays NaN
// and fp16 overflows to infinity. So a 16-bit kernel computes exactly what "widen every input,
// run the fp32 kernel, round every output" computes, wherever it keeps the fp32 kernel's order
// of operations (each op header says where it does not).
//
// bf16 and fp16 are distinct types (not std::uint16_t), so a bf16 buffer cannot be passed where
// an fp16 one is expected. Both are 2 bytes and trivially copyable: a std::uint16_t buffer may be
// reinterpret_cast to either, and the CUDA kernels reinterpret them as __nv_bfloat16 / __half.
//
// This header is included by .cu files, so it stays C++17.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace trainmem::kernels {

struct bf16 {
  std::uint16_t bits;
};
struct fp16 {
  std::uint16_t bits;
};
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2 && std::is_trivially_copyable_v<bf16>);
static_assert(sizeof(fp16) == 2 && alignof(fp16) == 2 && std::is_trivially_copyable_v<fp16>);

// Which 16-bit format a raw std::uint16_t buffer holds (the kernels that take raw 16-bit buffers:
// kernels/matmul16.h, the CUDA flash attention, cuDNN SDPA).
enum class Half16 { bf16, fp16 };

// ---------------------------------------------------------------------------------------------
// The scalar conversions (the CPU's; the GPU has them as intrinsics). Inline: every 16-bit CPU
// kernel calls them once per element.
namespace cpu {
namespace detail {
inline std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
}  // namespace detail

inline std::uint16_t float_to_bf16(float x) {
  const std::uint32_t u = detail::bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN stays (quiet) NaN
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then drop the low 16 bits.
  const std::uint32_t lsb = (u >> 16) & 1u;
  return static_cast<std::uint16_t>((u + 0x7fffu + lsb) >> 16);
}

inline float bf16_to_float(std::uint16_t b) { return detail::float_of(static_cast<std::uint32_t>(b) << 16); }

// fp32 -> fp16, round to nearest even, without a branch per rounding case. Two regimes:
//   normal halves (|x| >= 2^-14): rebias the exponent from 127 to 15 and drop 13 mantissa bits,
//     adding 0xfff plus the lowest kept bit first, so that the carry rounds to nearest even (a
//     carry out of the mantissa correctly bumps the exponent, up to infinity past 65504);
//   subnormal halves (|x| < 2^-14): add 0.5 (2^-1); the FPU's own round-to-nearest-even then
//     leaves the value's multiple of 2^-24 in the low mantissa bits (0.5's ulp is 2^-24).
// Checked once against a case-by-case version on all 2^32 floats (0 differences; 18 s, so not
// in CI); kernels/tests/test_convert_cpu.cpp checks the rules on chosen values and every half.
inline std::uint16_t float_to_fp16(float x) {
  const std::uint32_t u = detail::bits_of(x);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  std::uint32_t half;
  if (abs >= 0x47800000u) {  // >= 65536 (or inf, NaN): beyond every finite half
    half = abs > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (abs < 0x38800000u) {  // < 2^-14: a subnormal half or zero
    half = detail::bits_of(detail::float_of(abs) + 0.5f) - 0x3f000000u;
  } else {
    const std::uint32_t lowest_kept = (abs >> 13) & 1u;
    half = (abs - ((127u - 15u) << 23) + 0xfffu + lowest_kept) >> 13;
  }
  return static_cast<std::uint16_t>(sign | half);
}

inline float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return detail::float_of(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // m * 2^-24 (exact)
    return sign ? -value : value;
  }
  return detail::float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
}  // namespace cpu

// ---------------------------------------------------------------------------------------------
// Storage type -> compute type, and the two conversions between them.

template <typename T>
inline constexpr bool is_16bit_v = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

template <typename T>
struct ComputeType {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || is_16bit_v<T>,
                "kernels store float, double, bf16 or fp16");
  using type = std::conditional_t<std::is_same_v<T, double>, double, float>;
};
// float for float, bf16 and fp16; double for double.
template <typename T>
using compute_t = typename ComputeType<T>::type;

// One stored element, widened exactly to the compute type.
template <typename T>
inline compute_t<T> load(T x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return cpu::bf16_to_float(x.bits);
  } else if constexpr (std::is_same_v<T, fp16>) {
    return cpu::fp16_to_float(x.bits);
  } else {
    return x;
  }
}

// A computed value, rounded (once) to the storage type.
template <typename T>
inline T store(compute_t<T> x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16{cpu::float_to_bf16(x)};
  } else if constexpr (std::is_same_v<T, fp16>) {
    return fp16{cpu::float_to_fp16(x)};
  } else {
    return x;
  }
}

// "fp32", "bf16", "fp16", "fp64": for messages.
template <typename T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, bf16>) {
    return "bf16";
  } else if constexpr (std::is_same_v<T, fp16>) {
    return "fp16";
  } else if constexpr (std::is_same_v<T, double>) {
    return "fp64";
  } else {
    return "fp32";
  }
}

// The Half16 tag of a 16-bit type, and its buffer as raw bits (for kernels/matmul16.h).
template <typename T>
constexpr Half16 half16_of() {
  static_assert(is_16bit_v<T>, "half16_of: bf16 or fp16 only");
  return std::is_same_v<T, bf16> ? Half16::bf16 : Half16::fp16;
}
template <typename T>
std::uint16_t* raw_bits(T* p) {
  static_assert(is_16bit_v<T>, "raw_bits: bf16 or fp16 only");
  return reinterpret_cast<std::uint16_t*>(p);
}
template <typename T>
const std::uint16_t* raw_bits(const T* p) {
  static_assert(is_16bit_v<T>, "raw_bits: bf16 or fp16 only");
  return reinterpret_cast<const std::uint16_t*>(p);
}

// ---------------------------------------------------------------------------------------------
// Pointer parameters of the dispatchers and of the cuda:: functions. They do not deduce T: the
// caller names the storage type, kernels::gelu_forward<bf16>(s, out, inp, n), and without a name
// it is float. An argument merely convertible to float* can still be passed where deduction would
// reject it, and a bf16* passed without naming <bf16> is a compile error, not a silent fp32 call.
// (The cpu:: references deduce T from their plain pointers instead.)
template <typename T>
struct TypeIdentity {
  using type = T;
};
template <typename T>
using Out = typename TypeIdentity<T>::type*;  // written or accumulated
template <typename T>
using In = const typename TypeIdentity<T>::type*;  // read only

}  // namespace trainmem::kernels
