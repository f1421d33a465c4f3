// CPU reference: LayerNorm forward and backward (formulas in kernels/layernorm.h).
#include "kernels/layernorm.h"

#include <cmath>

namespace trainmem::kernels::cpu {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* weight, const T* bias, std::size_t N,
                       std::size_t C) {
  for (std::size_t n = 0; n < N; ++n) {
    const T* row = x + n * C;
    double sum = 0;  // statistics in double: a long row of floats loses digits otherwise
    for (std::size_t c = 0; c < C; ++c) sum += row[c];
    const double m = sum / static_cast<double>(C);
    double var = 0;
    for (std::size_t c = 0; c < C; ++c) var += (row[c] - m) * (row[c] - m);
    const double s = 1.0 / std::sqrt(var / static_cast<double>(C) + kLayerNormEps);
    T* o = out + n * C;
    for (std::size_t c = 0; c < C; ++c) o[c] = static_cast<T>((row[c] - m) * s) * weight[c] + bias[c];
    mean[n] = static_cast<T>(m);
    rstd[n] = static_cast<T>(s);
  }
}

template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight, const T* mean,
                        const T* rstd, std::size_t N, std::size_t C) {
  for (std::size_t n = 0; n < N; ++n) {
    const T* d = dout + n * C;
    const T* row = x + n * C;
    const T m = mean[n], s = rstd[n];
    // mean(g) and mean(g * xhat), g = dout * weight
    double g_mean = 0, g_xhat_mean = 0;
    for (std::size_t c = 0; c < C; ++c) {
      const T xhat = (row[c] - m) * s;
      const T g = d[c] * weight[c];
      g_mean += g;
      g_xhat_mean += g * xhat;
    }
    g_mean /= static_cast<double>(C);
    g_xhat_mean /= static_cast<double>(C);
    T* dxr = dx + n * C;
    for (std::size_t c = 0; c < C; ++c) {
      const T xhat = (row[c] - m) * s;
      const T g = d[c] * weight[c];
      dbias[c] += d[c];
      dweight[c] += d[c] * xhat;
      dxr[c] += s * (g - static_cast<T>(g_mean) - xhat * static_cast<T>(g_xhat_mean));
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, std::size_t,
                                       std::size_t);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                        std::size_t, std::size_t);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, std::size_t, std::size_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, std::size_t, std::size_t);

}  // namespace trainmem::kernels::cpu
