// RMSNorm (Llama's norm) over the last dimension C, for N rows (N = B*T):
//   rstd = 1/sqrt(sum(x^2)/C + eps),  xhat = x * rstd
//   out  = xhat * weight                   (rstd is saved for backward; no mean, no bias)
// Backward, with g = dout * weight:
//   dweight += sum_rows dout * xhat
//   dx      += rstd * (g - xhat * mean(g * xhat))
// dx is ACCUMULATED: the norm's input is the residual stream, whose gradient is a sum; dweight is
// ACCUMULATED as well (gradient accumulation), as layernorm's gradients are.
// eps is the model's (Llama 1e-5; some models 1e-6), a parameter of the forward call; the
// backward needs none, rstd already holds it.
//
// Storage type T (kernels/dtype.h) for x, out, weight and every gradient: float, bf16 or fp16 (and
// double on the CPU). rstd is always in the compute type (fp32; double for double). The CPU sums
// each row's squares and each row's g * xhat in double, rounds rstd to the compute type once and
// does the rest in it; dweight is kept in the compute type over every row and rounded once per
// call. In 16 bits the CPU result is bit for bit the fp32 kernel's on the widened inputs, with the
// outputs rounded. The CUDA kernels sum in fp32 in their own order (see kernels/cuda/rmsnorm.cu).
//
// Workspace: the CUDA backward sums dweight over bands of rows into fp32 partials, then adds the
// bands in a fixed order (deterministic, rounded once). The caller provides that scratch,
// rmsnorm_backward_workspace_bytes(N, C) bytes (a host formula, so a meta run of the CUDA pattern
// allocates the same); the CPU backward needs none and ignores it.
#pragma once
#include <cstddef>

#include "kernels/dtype.h"
#include "kernels/layernorm.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// How the CUDA backward splits the N rows for dweight: layernorm's bands (kernels/layernorm.h:
// about 64 rows a band, at most 256 bands), one split for both norms.
using RmsNormBands = LayerNormBands;
inline RmsNormBands rmsnorm_backward_bands(std::size_t N) { return layernorm_backward_bands(N); }
// One fp32 partial (dweight's) per band and column.
inline std::size_t rmsnorm_backward_workspace_bytes(std::size_t N, std::size_t C) {
  return rmsnorm_backward_bands(N).count * C * sizeof(float);
}

namespace cpu {
template <typename T>
void rmsnorm_forward(T* out, compute_t<T>* rstd, const T* x, const T* weight, std::size_t N, std::size_t C,
                     double eps);
template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const compute_t<T>* rstd,
                      std::size_t N, std::size_t C);
}  // namespace cpu
namespace cuda {
// eps in fp32, the kernel's compute type.
template <typename T = float>
void rmsnorm_forward(void* stream, Out<T> out, float* rstd, In<T> x, In<T> weight, std::size_t N, std::size_t C,
                     float eps);
// workspace: rmsnorm_backward_workspace_bytes(N, C) bytes, 4-byte aligned (std::invalid_argument
// otherwise).
template <typename T = float>
void rmsnorm_backward(void* stream, Out<T> dx, Out<T> dweight, In<T> dout, In<T> x, In<T> weight, const float* rstd,
                      void* workspace, std::size_t N, std::size_t C);
}  // namespace cuda

template <typename T = float>
inline void rmsnorm_forward(const Stream& s, Out<T> out, float* rstd, In<T> x, In<T> weight, std::size_t N,
                            std::size_t C, double eps) {
  KernelCost cost(s, memory_call<T>("rmsnorm_forward", double(N) * C, 1, 1, 5, 4.0 * N));  // + rstd
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::rmsnorm_forward<T>(out, rstd, x, weight, N, C, eps);
  TRAINMEM_CUDA_KERNEL("rmsnorm_forward",
                       cuda::rmsnorm_forward<T>(s.cuda_stream, out, rstd, x, weight, N, C, static_cast<float>(eps)));
}
template <typename T = float>
inline void rmsnorm_backward(const Stream& s, Out<T> dx, Out<T> dweight, In<T> dout, In<T> x, In<T> weight,
                             const float* rstd, [[maybe_unused]] void* workspace, std::size_t N, std::size_t C) {
  KernelCost cost(s, memory_call<T>("rmsnorm_backward", double(N) * C, 2, 1, 8, 4.0 * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::rmsnorm_backward<T>(dx, dweight, dout, x, weight, rstd, N, C);
  TRAINMEM_CUDA_KERNEL("rmsnorm_backward", cuda::rmsnorm_backward<T>(s.cuda_stream, dx, dweight, dout, x, weight,
                                                                      rstd, workspace, N, C));
}
}  // namespace trainmem::kernels
