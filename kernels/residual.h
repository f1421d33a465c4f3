// Residual add: out = a + b. (Its backward is the identity: the gradient flows to both inputs.)
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T> void residual_forward(T* out, const T* a, const T* b, std::size_t n);
}
namespace cuda {
void residual_forward(void* stream, float* out, const float* a, const float* b, std::size_t n);
}
inline void residual_forward(const Stream& s, float* out, const float* a, const float* b, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::residual_forward(out, a, b, n);
  TRAINMEM_CUDA_KERNEL("residual_forward", cuda::residual_forward(s.cuda_stream, out, a, b, n));
}
}  // namespace trainmem::kernels
