// The linear layer: out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias[OC]   (bias may be null)
// Backward:
//   dinp[N, C]     = dout[N, OC] @ weight[OC, C]        (written; skipped when dinp is null)
//   dweight[OC, C] += dout^T @ inp                       (accumulated, so micro-batches sum)
//   dbias[OC]      += sum over rows of dout              (accumulated; skipped when null)
// CPU: OpenBLAS sgemm/dgemm. CUDA: cuBLAS, fp32 with TF32 off (the reference-equal default).
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::size_t N, std::size_t C, std::size_t OC);
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::size_t N,
                     std::size_t C, std::size_t OC);
}  // namespace cpu
namespace cuda {
void matmul_forward(void* stream, float* out, const float* inp, const float* weight, const float* bias, std::size_t N,
                    std::size_t C, std::size_t OC);
void matmul_backward(void* stream, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t N, std::size_t C, std::size_t OC);
}  // namespace cuda

inline void matmul_forward(const Stream& s, float* out, const float* inp, const float* weight, const float* bias,
                           std::size_t N, std::size_t C, std::size_t OC) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::matmul_forward(out, inp, weight, bias, N, C, OC);
  TRAINMEM_CUDA_KERNEL("matmul_forward", cuda::matmul_forward(s.cuda_stream, out, inp, weight, bias, N, C, OC));
}
inline void matmul_backward(const Stream& s, float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, std::size_t N, std::size_t C, std::size_t OC) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  TRAINMEM_CUDA_KERNEL("matmul_backward",
                       cuda::matmul_backward(s.cuda_stream, dinp, dweight, dbias, dout, inp, weight, N, C, OC));
}
}  // namespace trainmem::kernels
