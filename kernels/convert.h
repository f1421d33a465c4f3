// Whole buffers converted between fp32 and the 16-bit storage formats (bf16, fp16), exactly as the
// GPU converts them: fp32 -> 16 bit rounds to nearest, ties to even (__float2bfloat16_rn /
// __float2half_rn on CUDA); 16 bit -> fp32 is exact. The formats, and the scalar conversions these
// loops apply (cpu::float_to_bf16 and the others), are in kernels/dtype.h.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
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
  KernelCost cost(s, {"to_bf16", KernelClass::memory, KernelDType::bf16, double(n), 6.0 * n});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::to_bf16(out, in, n);
  TRAINMEM_CUDA_KERNEL("to_bf16", cuda::to_bf16(s.cuda_stream, out, in, n));
}
inline void from_bf16(const Stream& s, float* out, const std::uint16_t* in, std::size_t n) {
  KernelCost cost(s, {"from_bf16", KernelClass::memory, KernelDType::bf16, double(n), 6.0 * n});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::from_bf16(out, in, n);
  TRAINMEM_CUDA_KERNEL("from_bf16", cuda::from_bf16(s.cuda_stream, out, in, n));
}
inline void to_fp16(const Stream& s, std::uint16_t* out, const float* in, std::size_t n) {
  KernelCost cost(s, {"to_fp16", KernelClass::memory, KernelDType::f16, double(n), 6.0 * n});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::to_fp16(out, in, n);
  TRAINMEM_CUDA_KERNEL("to_fp16", cuda::to_fp16(s.cuda_stream, out, in, n));
}
inline void from_fp16(const Stream& s, float* out, const std::uint16_t* in, std::size_t n) {
  KernelCost cost(s, {"from_fp16", KernelClass::memory, KernelDType::f16, double(n), 6.0 * n});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::from_fp16(out, in, n);
  TRAINMEM_CUDA_KERNEL("from_fp16", cuda::from_fp16(s.cuda_stream, out, in, n));
}
}  // namespace trainmem::kernels
