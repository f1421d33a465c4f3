// CUDA: GELU (tanh approximation) forward/backward and the residual add (formulas in gelu.h and
// residual.h; the CPU reference is cpu/elementwise.cpp). All three are elementwise: one thread per
// element, grid-stride loop with 64-bit indices. No __restrict__: in-place calls (out == inp,
// dinp == dout, out == a) are allowed, and each element is read before it is written by the same thread.
// Each kernel is a template over the element type D (float, __nv_bfloat16, __half; dtype.cuh):
// loads widen to float, the math is float, each store rounds once.
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/gelu.h"
#include "kernels/residual.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// out[i] = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3),  x = inp[i].   Thread i -> element i.
template <typename D>
__global__ void gelu_forward_kernel(D* out, const D* inp, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float x = detail::to_float(inp[i]);
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    out[i] = detail::from_float<D>(0.5f * x * (1.0f + tanhf(u)));
  }
}

// dinp[i] = dout[i] * gelu'(x),
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Thread i -> element i (written, not accumulated).
template <typename D>
__global__ void gelu_backward_kernel(D* dinp, const D* inp, const D* dout, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float x = detail::to_float(inp[i]);
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float th = tanhf(u);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx;
    dinp[i] = detail::from_float<D>(grad * detail::to_float(dout[i]));
  }
}

// out[i] = a[i] + b[i].   Thread i -> element i.
template <typename D>
__global__ void residual_forward_kernel(D* out, const D* a, const D* b, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride())
    out[i] = detail::from_float<D>(detail::to_float(a[i]) + detail::to_float(b[i]));
}

}  // namespace

template <typename T>
void gelu_forward(void* stream, Out<T> out, In<T> inp, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), detail::device_cast(inp), n);
  CUDA_CHECK_LAUNCH("gelu_forward_kernel");
}

template <typename T>
void gelu_backward(void* stream, Out<T> dinp, In<T> inp, In<T> dout, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(dinp), detail::device_cast(inp), detail::device_cast(dout), n);
  CUDA_CHECK_LAUNCH("gelu_backward_kernel");
}

template <typename T>
void residual_forward(void* stream, Out<T> out, In<T> a, In<T> b, std::size_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), detail::device_cast(a), detail::device_cast(b), n);
  CUDA_CHECK_LAUNCH("residual_forward_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                        \
  template void gelu_forward<T>(void*, Out<T>, In<T>, std::size_t);                    \
  template void gelu_backward<T>(void*, Out<T>, In<T>, In<T>, std::size_t);            \
  template void residual_forward<T>(void*, Out<T>, In<T>, In<T>, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
