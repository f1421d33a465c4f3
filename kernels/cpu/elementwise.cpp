// CPU reference: GELU and the residual add. Each element is loaded into the compute type F (fp32,
// or double for double; kernels/dtype.h), computed there and stored once. GELU's elements are
// split over the cores (kernels/cpu/parallel_for.h: the same bits as one loop).
#include <cmath>

#include "kernels/cpu/parallel_for.h"
#include "kernels/gelu.h"
#include "kernels/residual.h"

namespace trainmem::kernels::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
constexpr std::size_t kGeluMinPerThread = 16384;  // elements; each costs a tanh (about 20 ns)
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  using F = compute_t<T>;
  parallel_for(n, kGeluMinPerThread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const F x = load(inp[i]);
      const F u = static_cast<F>(kSqrt2OverPi) * (x + static_cast<F>(kGeluCubic) * x * x * x);
      out[i] = store<T>(F(0.5) * x * (F(1) + std::tanh(u)));
    }
  });
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  using F = compute_t<T>;
  parallel_for(n, kGeluMinPerThread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      const F x = load(inp[i]);
      const F u = static_cast<F>(kSqrt2OverPi) * (x + static_cast<F>(kGeluCubic) * x * x * x);
      const F th = std::tanh(u);
      const F du_dx = static_cast<F>(kSqrt2OverPi) * (F(1) + F(3) * static_cast<F>(kGeluCubic) * x * x);
      const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * (F(1) - th * th) * du_dx;
      dinp[i] = store<T>(grad * load(dout[i]));  // dout[i] is read before dinp[i] is written: in place is safe
    }
  });
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
