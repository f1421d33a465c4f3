// GELU, tanh approximation (as GPT-2):
//   gelu(x) = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// The CPU computes the same function in its sigmoid form, with s = sigma(2u) = 1 / (1 + e),
// e = exp(-2u):  0.5 (1 + tanh u) = s  and  0.5 (1 - tanh(u)^2) = 2 s (1 - s) = 2 e s^2, so
//   gelu(x) = x s,   gelu'(x) = s + x (2 e s^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (kernels/cpu/elementwise.cpp: one exp per element, vectorized; error bounds in
// kernels/tests/test_kernels_cpu.cpp). CUDA computes the tanh form.
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU); computed in fp32
// (double for double), each output rounded once. In 16 bits the CPU result is bit for bit the
// fp32 kernel's on the widened inputs, rounded.
#pragma once
#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T> void gelu_forward(T* out, const T* inp, std::size_t n);
// dinp = dout * gelu'(inp)   (written, not accumulated; dinp may be dout: in place)
template <typename T> void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);
}  // namespace cpu
namespace cuda {
template <typename T = float> void gelu_forward(void* stream, Out<T> out, In<T> inp, std::size_t n);
template <typename T = float> void gelu_backward(void* stream, Out<T> dinp, In<T> inp, In<T> dout, std::size_t n);
}  // namespace cuda

template <typename T = float>
inline void gelu_forward(const Stream& s, Out<T> out, In<T> inp, std::size_t n) {
  KernelCost cost(s, memory_call<T>("gelu_forward", double(n), 1, 1, 15));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::gelu_forward<T>(out, inp, n);
  TRAINMEM_CUDA_KERNEL("gelu_forward", cuda::gelu_forward<T>(s.cuda_stream, out, inp, n));
}
template <typename T = float>
inline void gelu_backward(const Stream& s, Out<T> dinp, In<T> inp, In<T> dout, std::size_t n) {
  KernelCost cost(s, memory_call<T>("gelu_backward", double(n), 2, 1, 25));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::gelu_backward<T>(dinp, inp, dout, n);
  TRAINMEM_CUDA_KERNEL("gelu_backward", cuda::gelu_backward<T>(s.cuda_stream, dinp, inp, dout, n));
}
}  // namespace trainmem::kernels
