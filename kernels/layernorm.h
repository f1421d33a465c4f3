// LayerNorm over the last dimension C, for N rows (N = B*T):
//   mean = sum(x)/C,  rstd = 1/sqrt(sum((x-mean)^2)/C + 1e-5),  xhat = (x-mean)*rstd
//   out  = xhat * weight + bias            (mean and rstd are saved for backward)
// Backward, with g = dout * weight:
//   dbias += sum_rows dout,  dweight += sum_rows dout * xhat
//   dx    += rstd * (g - mean(g) - xhat * mean(g * xhat))
// dx is ACCUMULATED: layernorm's input is the residual stream, whose gradient is a sum.
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
constexpr double kLayerNormEps = 1e-5;
namespace cpu {
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias, std::size_t N, std::size_t C);
template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight, const T* mean,
                        const T* rstd, std::size_t N, std::size_t C);
}  // namespace cpu
namespace cuda {
void layernorm_forward(void* stream, float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, std::size_t N, std::size_t C);
void layernorm_backward(void* stream, float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, std::size_t N, std::size_t C);
}  // namespace cuda

inline void layernorm_forward(const Stream& s, float* out, float* mean, float* rstd, const float* x, const float* weight,
                              const float* bias, std::size_t N, std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::layernorm_forward(out, mean, rstd, x, weight, bias, N, C);
  TRAINMEM_CUDA_KERNEL("layernorm_forward",
                       cuda::layernorm_forward(s.cuda_stream, out, mean, rstd, x, weight, bias, N, C));
}
inline void layernorm_backward(const Stream& s, float* dx, float* dweight, float* dbias, const float* dout,
                               const float* x, const float* weight, const float* mean, const float* rstd, std::size_t N,
                               std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::layernorm_backward(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C);
  TRAINMEM_CUDA_KERNEL("layernorm_backward", cuda::layernorm_backward(s.cuda_stream, dx, dweight, dbias, dout, x,
                                                                       weight, mean, rstd, N, C));
}
}  // namespace trainmem::kernels
