// Residual add: out = a + b. (Its backward is the identity: the gradient flows to both inputs.)
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU); the sum is
// computed in fp32 (double for double) and rounded once: in 16 bits, bit for bit the fp32
// kernel's on the widened inputs, rounded.
#pragma once
#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T> void residual_forward(T* out, const T* a, const T* b, std::size_t n);
}
namespace cuda {
template <typename T = float> void residual_forward(void* stream, Out<T> out, In<T> a, In<T> b, std::size_t n);
}
template <typename T = float>
inline void residual_forward(const Stream& s, Out<T> out, In<T> a, In<T> b, std::size_t n) {
  KernelCost cost(s, memory_call<T>("residual_forward", double(n), 2, 1, 1));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::residual_forward<T>(out, a, b, n);
  TRAINMEM_CUDA_KERNEL("residual_forward", cuda::residual_forward<T>(s.cuda_stream, out, a, b, n));
}
}  // namespace trainmem::kernels
