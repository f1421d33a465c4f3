// LayerNorm over the last dimension C, for N rows (N = B*T):
//   mean = sum(x)/C,  rstd = 1/sqrt(sum((x-mean)^2)/C + 1e-5),  xhat = (x-mean)*rstd
//   out  = xhat * weight + bias            (mean and rstd are saved for backward)
// Backward, with g = dout * weight:
//   dbias += sum_rows dout,  dweight += sum_rows dout * xhat
//   dx    += rstd * (g - mean(g) - xhat * mean(g * xhat))
// dx is ACCUMULATED: layernorm's input is the residual stream, whose gradient is a sum.
//
// Storage type T (kernels/dtype.h) for x, out, weight, bias and every gradient: float, bf16 or
// fp16 (and double on the CPU). mean and rstd are always in the compute type (fp32; double for
// double). Accumulated outputs are read once, summed in fp32 over every row, and rounded once per
// call. In 16 bits the CPU result is bit for bit the fp32 kernel's on the widened inputs, with
// the outputs rounded (the row statistics are summed in double there, as in fp32). The CUDA
// kernels sum in fp32 in their own order (see kernels/cuda/layernorm.cu).
//
// Workspace: the CUDA backward sums dweight and dbias over bands of rows into fp32 partials, then
// adds the bands in a fixed order (deterministic, rounded once). The caller provides that scratch,
// layernorm_backward_workspace_bytes(N, C) bytes (a host formula, so a meta run of the CUDA pattern
// allocates the same; common/device/device.h); the CPU backward needs none and ignores it.
#pragma once
#include <cstddef>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
constexpr double kLayerNormEps = 1e-5;

// How the CUDA backward splits the N rows for dweight and dbias: `count` bands of `rows` rows (the
// last one may be shorter; none is empty). About 64 rows a band, at most 256 bands: enough blocks
// to fill a GPU (C/32 column tiles x bands), and a finishing sum of at most 256 partials a column.
struct LayerNormBands {
  std::size_t rows = 0;
  std::size_t count = 0;
};
inline LayerNormBands layernorm_backward_bands(std::size_t N) {
  if (N == 0) return {};
  constexpr std::size_t kRowsPerBand = 64, kMaxBands = 256;
  const std::size_t wanted = (N + kRowsPerBand - 1) / kRowsPerBand;
  const std::size_t target = wanted < kMaxBands ? wanted : kMaxBands;
  const std::size_t rows = (N + target - 1) / target;
  return {rows, (N + rows - 1) / rows};
}
// Two fp32 partials (dweight's and dbias's) per band and column.
inline std::size_t layernorm_backward_workspace_bytes(std::size_t N, std::size_t C) {
  return 2 * layernorm_backward_bands(N).count * C * sizeof(float);
}
namespace cpu {
template <typename T>
void layernorm_forward(T* out, compute_t<T>* mean, compute_t<T>* rstd, const T* x, const T* weight, const T* bias,
                       std::size_t N, std::size_t C);
template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                        const compute_t<T>* mean, const compute_t<T>* rstd, std::size_t N, std::size_t C);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void layernorm_forward(void* stream, Out<T> out, float* mean, float* rstd, In<T> x, In<T> weight, In<T> bias,
                       std::size_t N, std::size_t C);
// workspace: layernorm_backward_workspace_bytes(N, C) bytes, 4-byte aligned (std::invalid_argument
// otherwise).
template <typename T = float>
void layernorm_backward(void* stream, Out<T> dx, Out<T> dweight, Out<T> dbias, In<T> dout, In<T> x, In<T> weight,
                        const float* mean, const float* rstd, void* workspace, std::size_t N, std::size_t C);
}  // namespace cuda

template <typename T = float>
inline void layernorm_forward(const Stream& s, Out<T> out, float* mean, float* rstd, In<T> x, In<T> weight,
                              In<T> bias, std::size_t N, std::size_t C) {
  KernelCost cost(s, memory_call<T>("layernorm_forward", double(N) * C, 1, 1, 8, 8.0 * N));  // + mean, rstd
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::layernorm_forward<T>(out, mean, rstd, x, weight, bias, N, C);
  TRAINMEM_CUDA_KERNEL("layernorm_forward",
                       cuda::layernorm_forward<T>(s.cuda_stream, out, mean, rstd, x, weight, bias, N, C));
}
template <typename T = float>
inline void layernorm_backward(const Stream& s, Out<T> dx, Out<T> dweight, Out<T> dbias, In<T> dout, In<T> x,
                               In<T> weight, const float* mean, const float* rstd, [[maybe_unused]] void* workspace, std::size_t N,
                               std::size_t C) {
  KernelCost cost(s, memory_call<T>("layernorm_backward", double(N) * C, 2, 1, 10, 8.0 * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::layernorm_backward<T>(dx, dweight, dbias, dout, x, weight, mean, rstd, N, C);
  TRAINMEM_CUDA_KERNEL("layernorm_backward", cuda::layernorm_backward<T>(s.cuda_stream, dx, dweight, dbias, dout, x,
                                                                          weight, mean, rstd, workspace, N, C));
}
}  // namespace trainmem::kernels
