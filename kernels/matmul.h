// The linear layer: out[N, OC] = inp[N, C] @ weight[OC, C]^T + bias[OC]   (bias may be null)
// Backward:
//   dinp[N, C]     = dout[N, OC] @ weight[OC, C]        (written; skipped when dinp is null)
//   dweight[OC, C] += dout^T @ inp                       (accumulated, so micro-batches sum)
//   dbias[OC]      += sum over rows of dout              (accumulated; skipped when null)
//
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU). Every product is
// summed in fp32 (double for double) and each output rounded once, after its whole sum; an
// accumulated output is widened, added to in fp32 and rounded once per call.
//
// CPU: OpenBLAS sgemm/dgemm. In 16 bits the operands are widened, tile by tile, into a private
// fp32 staging buffer and multiplied there with sgemm (see "16-bit staging" below).
// CUDA: fp32 on cuBLAS with TF32 off (the reference-equal default); bf16 and fp16 on cuBLASLt
// (kernels/matmul16.h: tensor cores, fp32 accumulation), which needs N, C and OC >= 2 (or N or OC
// 0) and throws std::invalid_argument otherwise.
//
// 16-bit staging (CPU). Each GEMM C[M, N] (+)= op(A)[M, K] op(B)[K, N] is cut into output tiles
// of at most kMatmulTileRows x kMatmulTileCols, and each output tile's sum over K into slices of
// at most kMatmulTileInner. For every output tile: an fp32 accumulator tile is started from zero
// (or from the widened old value of an accumulated output), each K slice of A and B is widened
// into staging and added into the accumulator by sgemm (beta = 1), then the bias is added (the
// forward) and the tile is rounded into the output, once. So dweight's sum over all N rows is
// complete in fp32 before it is rounded. The staging is bounded, whatever the shape:
//   (256 x 1024 + 1024 x 256 + 256 x 256) floats = 2.25 MiB per call,
// host memory outside the emulated device (as a GPU's registers and shared memory are), never
// drawn from the project's allocator. dbias is summed in fp32 in column chunks of the
// accumulator tile, rows in order.
// Equal to "widen, fp32 kernel, round" bit for bit where the GEMM fits one tile (M, N <= 256,
// K <= 1024: the same single sgemm call on the same fp32 values) and for dbias. Not on larger
// shapes: sgemm blocks and threads its work by the shape it is given, and the K slices are added
// one after another, so a value's fp32 sum may be grouped otherwise than by one sgemm on the
// whole matrices. The two fp32 sums differ in their last bits (about K * 2^-24 for K products of
// values near 1), which changes the rounded value by one unit in the last 16-bit place, or by
// that tiny absolute amount for a result near zero; kernels/tests/test_kernels_dtype_cpu.cpp
// measures it: up to 0.15% of the values differ in fp16, 0.01% in bf16.
#pragma once
#include <type_traits>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"
#include "kernels/matmul16.h"

namespace trainmem::kernels {
namespace cpu {
// The 16-bit staging tile bounds (see above).
constexpr std::size_t kMatmulTileRows = 256;    // rows of an output tile (M)
constexpr std::size_t kMatmulTileCols = 256;    // columns of an output tile (N)
constexpr std::size_t kMatmulTileInner = 1024;  // length of a slice of the inner dimension (K)

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, std::size_t N, std::size_t C, std::size_t OC);
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, std::size_t N,
                     std::size_t C, std::size_t OC);
}  // namespace cpu
namespace cuda {
// fp32 only; bf16 and fp16 are cuda::matmul16_forward / matmul16_backward (kernels/matmul16.h).
void matmul_forward(void* stream, float* out, const float* inp, const float* weight, const float* bias, std::size_t N,
                    std::size_t C, std::size_t OC);
void matmul_backward(void* stream, float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, std::size_t N, std::size_t C, std::size_t OC);
}  // namespace cuda

template <typename T = float>
inline void matmul_forward(const Stream& s, Out<T> out, In<T> inp, In<T> weight, In<T> bias, std::size_t N,
                           std::size_t C, std::size_t OC) {
  // out[N, OC] = inp[N, C] weight[OC, C]^T (+ bias): one GEMM
  KernelCost cost(s, gemm_call<T>("matmul_forward", double(N), double(OC), double(C)));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::matmul_forward<T>(out, inp, weight, bias, N, C, OC);
  if constexpr (std::is_same_v<T, float>) {
    TRAINMEM_CUDA_KERNEL("matmul_forward", cuda::matmul_forward(s.cuda_stream, out, inp, weight, bias, N, C, OC));
  } else {
    TRAINMEM_CUDA_KERNEL("matmul_forward",
                         cuda::matmul16_forward(s.cuda_stream, half16_of<T>(), raw_bits(out), raw_bits(inp),
                                                raw_bits(weight), bias ? raw_bits(bias) : nullptr, N, C, OC));
  }
}
template <typename T = float>
inline void matmul_backward(const Stream& s, Out<T> dinp, Out<T> dweight, Out<T> dbias, In<T> dout, In<T> inp,
                            In<T> weight, std::size_t N, std::size_t C, std::size_t OC) {
  // dinp = dout weight (when asked) and dweight += dout^T inp: one or two GEMMs of 2 N C OC flops
  const double e = element_bytes(kernel_dtype_of<T>()), products = dinp ? 2.0 : 1.0;
  KernelCost cost(s, {"matmul_backward", KernelClass::gemm, kernel_dtype_of<T>(), products * 2.0 * N * C * OC,
                      e * (products * double(N) * OC + double(N) * C + 2.0 * OC * C + (dinp ? double(OC) * C + double(N) * C : 0.0))});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::matmul_backward<T>(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
  if constexpr (std::is_same_v<T, float>) {
    TRAINMEM_CUDA_KERNEL("matmul_backward",
                         cuda::matmul_backward(s.cuda_stream, dinp, dweight, dbias, dout, inp, weight, N, C, OC));
  } else {
    TRAINMEM_CUDA_KERNEL("matmul_backward",
                         cuda::matmul16_backward(s.cuda_stream, half16_of<T>(), dinp ? raw_bits(dinp) : nullptr,
                                                 raw_bits(dweight), dbias ? raw_bits(dbias) : nullptr, raw_bits(dout),
                                                 raw_bits(inp), raw_bits(weight), N, C, OC));
  }
}
}  // namespace trainmem::kernels
