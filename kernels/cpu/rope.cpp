// CPU reference: rotary position embeddings, forward and backward (formulas, layout and precision
// in kernels/rope.h). freq_i = theta^(-2i/D), the angle t * freq_i and its cos and sin are
// computed in double, then rounded once to the compute type F (fp32, or double for double); each
// pair is rotated in F and each output stored once. Backward is the same rotation with sin
// negated (exact), i.e. by -angle.
//
// The loop runs over positions t: the D/2 cos/sin values of a position are computed once and used
// for the B rows at that position (rows b*Tn + t) and for each of their `heads` heads. Positions
// are split over the cores (kernels/cpu/parallel_for.h: the same bits as one loop).
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/rope.h"

namespace trainmem::kernels::cpu {

namespace {

// out = R(direction * angle) inp on the rotated heads of every row; direction is +1 (forward) or
// -1 (backward). Each pair is loaded before either of its outputs is stored, so out may be inp.
template <typename T>
void rope_rotate(const char* op, T* out, const T* inp, std::size_t B, std::size_t Tn, std::size_t heads,
                 std::size_t D, std::size_t row_stride, std::size_t first_column, const RopeFrequencies& frequencies, double direction) {
  using F = compute_t<T>;
  rope_check_arguments(op, heads, D, row_stride, first_column, frequencies);
  const std::size_t half = D / 2;
  if (B == 0 || Tn == 0 || heads == 0 || half == 0) return;

  // freq_i = theta^(-2i/D) (rescaled where the model's RoPE is), in double (rope_frequencies.h).
  std::vector<double> freq(half);
  for (std::size_t i = 0; i < half; ++i) freq[i] = frequencies(i, D);

  const std::size_t work_per_position = B * heads * D;
  const std::size_t min_positions_per_thread = 65536 / work_per_position + 1;  // 64K elements
  parallel_for(Tn, min_positions_per_thread, [&](std::size_t begin, std::size_t end) {
    std::vector<F> cos_t(half), sin_t(half);
    for (std::size_t t = begin; t < end; ++t) {
      // angle = t * freq_i in double; cos and sin rounded once to F.
      for (std::size_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(t) * freq[i];
        cos_t[i] = static_cast<F>(std::cos(angle));
        sin_t[i] = static_cast<F>(direction * std::sin(angle));
      }
      for (std::size_t b = 0; b < B; ++b) {
        const std::size_t row = b * Tn + t;
        const T* x = inp + row * row_stride + first_column;
        T* o = out + row * row_stride + first_column;
        for (std::size_t h = 0; h < heads; ++h, x += D, o += D) {
          for (std::size_t i = 0; i < half; ++i) {
            // (v_i, v_{i+D/2}) -> (v_i cos - v_{i+D/2} sin, v_i sin + v_{i+D/2} cos)
            const F lo = load(x[i]), hi = load(x[i + half]);
            const F c = cos_t[i], s = sin_t[i];
            o[i] = store<T>(lo * c - hi * s);
            o[i + half] = store<T>(lo * s + hi * c);
          }
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, std::size_t B, std::size_t Tn, std::size_t heads, std::size_t D,
                  std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  rope_rotate("rope_forward", out, inp, B, Tn, heads, D, row_stride, first_column, frequencies, 1.0);
}

template <typename T>
void rope_backward(T* dinp, const T* dout, std::size_t B, std::size_t Tn, std::size_t heads, std::size_t D,
                   std::size_t row_stride, std::size_t first_column, RopeFrequencies frequencies) {
  rope_rotate("rope_backward", dinp, dout, B, Tn, heads, D, row_stride, first_column, frequencies, -1.0);
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void rope_forward<T>(T*, const T*, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,   \
                                std::size_t, RopeFrequencies);                                                             \
  template void rope_backward<T>(T*, const T*, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t,  \
                                 std::size_t, RopeFrequencies);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
