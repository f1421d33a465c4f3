// SwiGLU, the nonlinearity of Llama's MLP, elementwise over n elements:
//   gate = x W1^T,  up = x W3^T                        (two tensors of n elements, from two matmuls)
//   silu(g) = g sigma(g) = g / (1 + exp(-g))
//   out = silu(gate) * up
// Backward, with s = sigma(gate):
//   dup   = dout * silu(gate)
//   dgate = dout * up * silu'(gate),   silu'(g) = s (1 + g (1 - s))
// Both gradients are WRITTEN, not accumulated. The model saves gate and up (not silu(gate), which
// the backward recomputes: one exp per element instead of a third saved tensor); no workspace.
//
// Large |gate| (kernels/cpu/swiglu.cpp): the sigmoid is computed from e = exp(-|g|), which never
// overflows:  s = 1 / (1 + e) for g >= 0,  s = e / (1 + e) for g < 0,  and 1 - s the other one.
// So sigma(+-100), and gates up to each storage type's largest finite value, give finite outputs
// (silu(g) -> g above, -> 0 below), never NaN. The fp32 CPU exp (kernels/cpu/vector_exp.h) stops at
// exp(-87); beyond |g| = 87 the CPU takes e = 0 (the exact e is below 1.7e-38): silu(g) = g and
// silu'(g) = 1 above +87; both 0 below -87, where the exact values are below 2^-119 in magnitude.
// The gates must be finite (silu(-inf) is -inf * 0).
//
// In place: each index is read (gate[i], up[i], dout[i]) before it is written, so out may be gate
// or up, and in the backward dgate may be gate and dup may be up (the model's in-place use: the
// gradients overwrite the saved tensors they belong to); dgate and dup must be different buffers.
// Buffers that overlap at an offset are not allowed.
//
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU); computed in fp32
// (double for double), each output rounded once. In 16 bits the CPU result is bit for bit the
// fp32 kernel's on the widened inputs, rounded. Error bounds of the fp32 CPU kernel: see
// kernels/tests/test_swiglu_cpu.cpp. CUDA computes the same formulas with the library's expf.
#pragma once
#include <cstddef>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
// out = silu(gate) * up
template <typename T> void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n);
// dgate = dout * up * silu'(gate),  dup = dout * silu(gate)   (written; dgate may be gate, dup may be up)
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void swiglu_forward(void* stream, Out<T> out, In<T> gate, In<T> up, std::size_t n);
template <typename T = float>
void swiglu_backward(void* stream, Out<T> dgate, Out<T> dup, In<T> dout, In<T> gate, In<T> up, std::size_t n);
}  // namespace cuda

template <typename T = float>
inline void swiglu_forward(const Stream& s, Out<T> out, In<T> gate, In<T> up, std::size_t n) {
  KernelCost cost(s, memory_call<T>("swiglu_forward", double(n), 2, 1, 8));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::swiglu_forward<T>(out, gate, up, n);
  TRAINMEM_CUDA_KERNEL("swiglu_forward", cuda::swiglu_forward<T>(s.cuda_stream, out, gate, up, n));
}
template <typename T = float>
inline void swiglu_backward(const Stream& s, Out<T> dgate, Out<T> dup, In<T> dout, In<T> gate, In<T> up,
                            std::size_t n) {
  KernelCost cost(s, memory_call<T>("swiglu_backward", double(n), 3, 2, 12));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::swiglu_backward<T>(dgate, dup, dout, gate, up, n);
  TRAINMEM_CUDA_KERNEL("swiglu_backward", cuda::swiglu_backward<T>(s.cuda_stream, dgate, dup, dout, gate, up, n));
}
}  // namespace trainmem::kernels
