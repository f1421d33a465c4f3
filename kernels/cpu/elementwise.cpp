// CPU reference: GELU and the residual add.
#include <cmath>

#include "kernels/gelu.h"
#include "kernels/residual.h"

namespace trainmem::kernels::cpu {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = static_cast<T>(kSqrt2OverPi) * (x + static_cast<T>(kGeluCubic) * x * x * x);
    const T th = std::tanh(u);
    const T du_dx = static_cast<T>(kSqrt2OverPi) * (T(1) + T(3) * static_cast<T>(kGeluCubic) * x * x);
    const T grad = T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du_dx;
    dinp[i] = grad * dout[i];
  }
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template void gelu_forward<float>(float*, const float*, std::size_t);
template void gelu_forward<double>(double*, const double*, std::size_t);
template void gelu_backward<float>(float*, const float*, const float*, std::size_t);
template void gelu_backward<double>(double*, const double*, const double*, std::size_t);
template void residual_forward<float>(float*, const float*, const float*, std::size_t);
template void residual_forward<double>(double*, const double*, const double*, std::size_t);

}  // namespace trainmem::kernels::cpu
