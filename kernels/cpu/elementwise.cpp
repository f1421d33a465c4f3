// CPU reference: GELU and the residual add. Each element is loaded into the compute type F (fp32,
// or double for double; kernels/dtype.h), computed there and stored once. GELU's elements are
// split over the cores (kernels/cpu/parallel_for.h: the same bits as one loop).
//
// GELU is computed in its sigmoid form (kernels/gelu.h), 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)):
// one exp per element, from kernels/cpu/vector_exp.h in fp32 (the loop vectorizes: 4, 8 or 16
// floats at a time, kernels/cpu/simd_clones.h) and std::exp in double. Besides speed, the form is
// more accurate than 0.5 x (1 + tanh u) in fp32: for x << 0 that sum cancels (tanh u near -1), the
// sigmoid does not.
#include <cmath>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/gelu.h"
#include "kernels/residual.h"

namespace trainmem::kernels::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
constexpr std::size_t kGeluMinPerThread = 32768;  // elements; each costs about 1 ns

// u = sqrt(2/pi) (x + 0.044715 x^3)
template <typename F>
F gelu_u(F x) {
  return static_cast<F>(kSqrt2OverPi) * (x + static_cast<F>(kGeluCubic) * x * x * x);
}

// Elements [begin, end): the loops, one copy per instruction set (simd_clones.h).
template <typename T>
TRAINMEM_SIMD_CLONES void gelu_forward_range(T* out, const T* inp, std::size_t begin, std::size_t end) {
  using F = compute_t<T>;
  for (std::size_t i = begin; i < end; ++i) {
    const F x = load(inp[i]);
    const F s = F(1) / (F(1) + exp_of(F(-2) * gelu_u(x)));  // sigma(2u) = 0.5 (1 + tanh u)
    out[i] = store<T>(x * s);
  }
}

template <typename T>
TRAINMEM_SIMD_CLONES void gelu_backward_range(T* dinp, const T* inp, const T* dout, std::size_t begin,
                                              std::size_t end) {
  using F = compute_t<T>;
  for (std::size_t i = begin; i < end; ++i) {
    const F x = load(inp[i]);
    const F e = exp_of(F(-2) * gelu_u(x));
    const F s = F(1) / (F(1) + e);  // sigma(2u); 1 - sigma(2u) = e s
    const F du_dx = static_cast<F>(kSqrt2OverPi) * (F(1) + F(3) * static_cast<F>(kGeluCubic) * x * x);
    // gelu'(x) = sigma(2u) + x * 2 sigma(2u) (1 - sigma(2u)) * du/dx
    const F grad = s + x * (F(2) * e * s * s) * du_dx;
    dinp[i] = store<T>(grad * load(dout[i]));  // dout[i] is read before dinp[i] is written: in place is safe
  }
}
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  parallel_for(n, kGeluMinPerThread,
               [&](std::size_t begin, std::size_t end) { gelu_forward_range(out, inp, begin, end); });
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  parallel_for(n, kGeluMinPerThread,
               [&](std::size_t begin, std::size_t end) { gelu_backward_range(dinp, inp, dout, begin, end); });
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = store<T>(load(a[i]) + load(b[i]));
}

#define TRAINMEM_INSTANTIATE(T)                                                   \
  template void gelu_forward<T>(T*, const T*, std::size_t);                       \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);            \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
