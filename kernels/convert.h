// 16-bit storage formats, converted exactly as the GPU converts them.
//
//   bf16: the top 16 bits of an fp32 (1 sign, 8 exponent, 7 mantissa bits): fp32's range, ~3 digits.
//   fp16: IEEE half (1 sign, 5 exponent, 10 mantissa bits): max 65504, subnormals below 6.1e-5.
//
// fp32 -> 16 bit rounds to nearest, ties to even (__float2bfloat16_rn / __float2half_rn on
// CUDA); NaN stays NaN; fp16 overflows to infinity. 16 bit -> fp32 is exact. Mixed precision
// stores tensors in 16 bits and computes in fp32, so the CPU backend rounds at the same places
// and to the same bits as a GPU would.
#pragma once
#include <cstdint>

#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
// Which 16-bit format a uint16_t buffer holds (kernels that take 16-bit inputs).
enum class Half16 { bf16, fp16 };

namespace cpu {
std::uint16_t float_to_bf16(float x);
float bf16_to_float(std::uint16_t b);
std::uint16_t float_to_fp16(float x);
float fp16_to_float(std::uint16_t h);

void to_bf16(std::uint16_t* out, const float* in, std::size_t n);
void from_bf16(float* out, const std::uint16_t* in, std::size_t n);
void to_fp16(std::uint16_t* out, const float* in, std::size_t n);
void from_fp16(float* out, const std::uint16_t* in, std::size_t n);
}  // namespace cpu
namespace cuda {
void to_bf16(void* stream, std::uint16_t* out, const float* in, std::size_t n);
void from_bf16(void* stream, float* out, const std::uint16_t* in, std::size_t n);
void to_fp16(void* stream, std::uint16_t* out, const float* in, std::size_t n);
void from_fp16(void* stream, float* out, const std::uint16_t* in, std::size_t n);
}  // namespace cuda

inline void to_bf16(const Stream& s, std::uint16_t* out, const float* in, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::to_bf16(out, in, n);
  TRAINMEM_CUDA_KERNEL("to_bf16", cuda::to_bf16(s.cuda_stream, out, in, n));
}
inline void from_bf16(const Stream& s, float* out, const std::uint16_t* in, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::from_bf16(out, in, n);
  TRAINMEM_CUDA_KERNEL("from_bf16", cuda::from_bf16(s.cuda_stream, out, in, n));
}
inline void to_fp16(const Stream& s, std::uint16_t* out, const float* in, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::to_fp16(out, in, n);
  TRAINMEM_CUDA_KERNEL("to_fp16", cuda::to_fp16(s.cuda_stream, out, in, n));
}
inline void from_fp16(const Stream& s, float* out, const std::uint16_t* in, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::from_fp16(out, in, n);
  TRAINMEM_CUDA_KERNEL("from_fp16", cuda::from_fp16(s.cuda_stream, out, in, n));
}
}  // namespace trainmem::kernels
