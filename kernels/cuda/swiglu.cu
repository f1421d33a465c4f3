// CUDA: SwiGLU forward and backward (formulas in kernels/swiglu.h; the CPU reference is
// kernels/cpu/swiglu.cpp). Elementwise: one thread per element, grid-stride loop with 64-bit
// indices. No __restrict__: in-place calls (out == gate or up; dgate == gate, dup == up) are
// allowed, and each thread reads its element's inputs before it writes its outputs.
// Each kernel is a template over the element type D (float, __nv_bfloat16, __half; dtype.cuh):
// loads widen to float, the math is float, each store rounds once.
//
// The sigmoid as on the CPU, from e = exp(-|g|) in (0, 1] (never overflows):
//   r = 1 / (1 + e),   g >= 0:  s = r,  1 - s = e r;     g < 0:  s = e r,  1 - s = r
// expf (the library's, about 2 ulps) underflows gracefully to 0 for large |g|, so no cut-off is
// needed here (the CPU's vectorized exp needs one at |g| = 87: a difference below 2^-119).
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/swiglu.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kSwigluBlock = 256;

// out[i] = silu(g) * up[i],  silu(g) = g sigma(g),  g = gate[i].   Thread i -> element i.
template <typename D>
__global__ void swiglu_forward_kernel(D* out, const D* gate, const D* up, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float g = detail::to_float(gate[i]);
    const float u = detail::to_float(up[i]);
    const float e = expf(-fabsf(g));
    const float r = 1.0f / (1.0f + e);
    const float s = g >= 0.0f ? r : e * r;  // sigma(g)
    out[i] = detail::from_float<D>((g * s) * u);
  }
}

// dgate[i] = dout[i] * up[i] * silu'(g),  silu'(g) = s (1 + g (1 - s));  dup[i] = dout[i] * silu(g).
// Thread i -> element i (both written, not accumulated).
template <typename D>
__global__ void swiglu_backward_kernel(D* dgate, D* dup, const D* dout, const D* gate, const D* up, std::size_t n) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float g = detail::to_float(gate[i]);
    const float u = detail::to_float(up[i]);
    const float d = detail::to_float(dout[i]);
    const float e = expf(-fabsf(g));
    const float r = 1.0f / (1.0f + e);
    const float s = g >= 0.0f ? r : e * r;  // sigma(g)
    const float q = g >= 0.0f ? e * r : r;  // 1 - sigma(g)
    const float dsilu = s * (1.0f + g * q);
    dgate[i] = detail::from_float<D>((d * u) * dsilu);
    dup[i] = detail::from_float<D>(d * (g * s));
  }
}

}  // namespace

template <typename T>
void swiglu_forward(void* stream, Out<T> out, In<T> gate, In<T> up, std::size_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<detail::grid_for(n, kSwigluBlock), kSwigluBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), detail::device_cast(gate), detail::device_cast(up), n);
  CUDA_CHECK_LAUNCH("swiglu_forward_kernel");
}

template <typename T>
void swiglu_backward(void* stream, Out<T> dgate, Out<T> dup, In<T> dout, In<T> gate, In<T> up, std::size_t n) {
  if (n == 0) return;
  swiglu_backward_kernel<<<detail::grid_for(n, kSwigluBlock), kSwigluBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(dgate), detail::device_cast(dup), detail::device_cast(dout), detail::device_cast(gate),
      detail::device_cast(up), n);
  CUDA_CHECK_LAUNCH("swiglu_backward_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                     \
  template void swiglu_forward<T>(void*, Out<T>, In<T>, In<T>, std::size_t); \
  template void swiglu_backward<T>(void*, Out<T>, Out<T>, In<T>, In<T>, In<T>, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
