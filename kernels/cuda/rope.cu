// CUDA: rotary position embeddings, forward and backward (formulas, layout and precision in
// rope.h; the CPU reference is cpu/rope.cpp). Backward is the forward with sin negated (exact):
// the rotation by -angle.
//
// Thread mapping: one thread per (row, pair i), grid-stride loop with 64-bit indices over the
// B*Tn*(D/2) of them; consecutive threads take consecutive pairs i of a row, so the loads and
// stores of one head are coalesced. The thread computes, in double, freq_i = theta^(-2i/D), the
// angle t * freq_i (t = row % Tn) and its sincos, rounds cos and sin once to fp32, and rotates pair
// i of each of the row's `heads` heads: the fp64 work is shared by `heads` pairs.
// No __restrict__: out may be inp (in place); each pair is loaded before either output is stored,
// by the thread that owns it.
// The kernel is a template over the element type E (float, __nv_bfloat16, __half; dtype.cuh):
// loads widen to float, the rotation is float, each store rounds once.
#include <cstddef>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/rope.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kRopeBlock = 256;

// For k in [0, rows * D/2): row = k / (D/2), i = k % (D/2), t = row % Tn, and for each head h
// (columns first_column + h*D + i and + D/2 of the row):
//   (v_i, v_{i+D/2}) -> (v_i cos - v_{i+D/2} sin, v_i sin + v_{i+D/2} cos),
//   cos = cos(t * freq_i), sin = direction * sin(t * freq_i), freq_i = theta^(-2i/D)
template <typename E>
__global__ void rope_rotate_kernel(E* out, const E* inp, std::size_t rows, std::size_t Tn, std::size_t heads,
                                   std::size_t head_dim, std::size_t row_stride, std::size_t first_column,
                                   RopeFrequencies frequencies, double direction) {
  const std::size_t half = head_dim / 2;
  const std::size_t n = rows * half;
  for (std::size_t k = detail::global_thread_index(); k < n; k += detail::grid_stride()) {
    const std::size_t row = k / half, i = k % half;
    const double t = static_cast<double>(row % Tn);
    // In double (rope.h: an fp32 angle loses ~1e-2 rad at a 128k context), then rounded to fp32.
    const double freq = frequencies(i, head_dim);  // (rope_frequencies.h)
    double sin_d, cos_d;
    sincos(t * freq, &sin_d, &cos_d);
    const float c = static_cast<float>(cos_d), s = static_cast<float>(direction * sin_d);
    const std::size_t first = row * row_stride + first_column + i;
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t j = first + h * head_dim;
      const float lo = detail::to_float(inp[j]), hi = detail::to_float(inp[j + half]);
      out[j] = detail::from_float<E>(lo * c - hi * s);
      out[j + half] = detail::from_float<E>(lo * s + hi * c);
    }
  }
}

template <typename T>
void rope_launch(const char* op, void* stream, T* out, const T* inp, std::size_t B, std::size_t Tn, std::size_t heads,
                 std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies, double direction) {
  rope_check_arguments(op, heads, D, row_stride, first_column, frequencies);
  const std::size_t rows = B * Tn, half = D / 2;
  if (rows == 0 || heads == 0 || half == 0) return;
  rope_rotate_kernel<<<detail::grid_for(rows * half, kRopeBlock), kRopeBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(out), detail::device_cast(inp), rows, Tn, heads, D, row_stride, first_column, frequencies,
      direction);
  CUDA_CHECK_LAUNCH("rope_rotate_kernel");
}

}  // namespace

template <typename T>
void rope_forward(void* stream, Out<T> out, In<T> inp, std::size_t B, std::size_t Tn, std::size_t heads,
                  std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  rope_launch<T>("rope_forward", stream, out, inp, B, Tn, heads, D, row_stride, first_column, frequencies, 1.0);
}

template <typename T>
void rope_backward(void* stream, Out<T> dinp, In<T> dout, std::size_t B, std::size_t Tn, std::size_t heads,
                   std::size_t D, std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  rope_launch<T>("rope_backward", stream, dinp, dout, B, Tn, heads, D, row_stride, first_column, frequencies, -1.0);
}

#define TRAINMEM_INSTANTIATE(T)                                                                                  \
  template void rope_forward<T>(void*, Out<T>, In<T>, std::size_t, std::size_t, std::size_t, std::size_t,        \
                                std::size_t, std::size_t, RopeFrequencies);                                               \
  template void rope_backward<T>(void*, Out<T>, In<T>, std::size_t, std::size_t, std::size_t, std::size_t,       \
                                 std::size_t, std::size_t, RopeFrequencies);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
