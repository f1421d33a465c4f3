// GELU, tanh approximation (as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T> void gelu_forward(T* out, const T* inp, std::size_t n);
// dinp = dout * gelu'(inp)   (written, not accumulated)
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);
}  // namespace cpu
namespace cuda {
void gelu_forward(void* stream, float* out, const float* inp, std::size_t n);
void gelu_backward(void* stream, float* dinp, const float* inp, const float* dout, std::size_t n);
}  // namespace cuda

inline void gelu_forward(const Stream& s, float* out, const float* inp, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::gelu_forward(out, inp, n);
  TRAINMEM_CUDA_KERNEL("gelu_forward", cuda::gelu_forward(s.cuda_stream, out, inp, n));
}
inline void gelu_backward(const Stream& s, float* dinp, const float* inp, const float* dout, std::size_t n) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::gelu_backward(dinp, inp, dout, n);
  TRAINMEM_CUDA_KERNEL("gelu_backward", cuda::gelu_backward(s.cuda_stream, dinp, inp, dout, n));
}
}  // namespace trainmem::kernels
