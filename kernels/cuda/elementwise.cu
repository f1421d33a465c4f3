// CUDA: GELU (tanh approximation) forward/backward and the residual add (formulas in gelu.h and
// residual.h; the CPU reference is cpu/elementwise.cpp). All three are elementwise: one thread per
// element, grid-stride loop with 64-bit indices. No __restrict__: in-place calls (out == inp,
// dinp == dout, out == a) are allowed, and each element is read before it is written by the same thread.
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/gelu.h"
#include "kernels/residual.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// out[i] = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),  x = inp[i].   Thread i -> element i.
__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanhf(u));
  }
}

// dinp[i] = dout[i] * gelu'(x),
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Thread i -> element i (written, not accumulated).
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
    dinp[i] = grad * dout[i];
  }
}

// out[i] = a[i] + b[i].   Thread i -> element i.
__global__ void residual_forward_kernel(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) out[i] = a[i] + b[i];
}

}  // namespace

void gelu_forward(void* stream, float* out, const float* inp, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(out, inp, n);
  CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

void gelu_backward(void* stream, float* dinp, const float* inp, const float* dout, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

void residual_forward(void* stream, float* out, const float* a, const float* b, std::size_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH("residual_forward_kernel");
}

}  // namespace trainmem::kernels::cuda
