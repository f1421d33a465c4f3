// CPU reference: LayerNorm forward and backward (formulas in kernels/layernorm.h). Each element is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each output
// stored once; the row statistics are summed in double. The forward's rows are split over the
// cores (kernels/cpu/parallel_for.h: the same bits as one loop); the backward sums dweight and
// dbias over the rows in order, so it stays one loop.
#include "kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace trainmem::kernels::cpu {

template <typename T>
void layernorm_forward(T* out, compute_t<T>* mean, compute_t<T>* rstd, const T* x, const T* weight, const T* bias,
                       std::size_t N, std::size_t C) {
  using F = compute_t<T>;
  const std::size_t min_rows_per_thread = 65536 / (C > 0 ? C : 1) + 1;  // 64K elements
  parallel_for(N, min_rows_per_thread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = x + n * C;
      double sum = 0;  // statistics in double: a long row of floats loses digits otherwise
      for (std::size_t c = 0; c < C; ++c) sum += load(row[c]);
      const double m = sum / static_cast<double>(C);
      double var = 0;
      for (std::size_t c = 0; c < C; ++c) var += (load(row[c]) - m) * (load(row[c]) - m);
      const double s = 1.0 / std::sqrt(var / static_cast<double>(C) + kLayerNormEps);
      T* o = out + n * C;
      for (std::size_t c = 0; c < C; ++c)
        o[c] = store<T>(static_cast<F>((load(row[c]) - m) * s) * load(weight[c]) + load(bias[c]));
      mean[n] = static_cast<F>(m);
      rstd[n] = static_cast<F>(s);
    }
  });
}

template <typename T>
void layernorm_backward(T* dx, T* dweight, T* dbias, const T* dout, const T* x, const T* weight,
                        const compute_t<T>* mean, const compute_t<T>* rstd, std::size_t N, std::size_t C) {
  using F = compute_t<T>;
  // dweight and dbias are sums over every row: kept in F until the last row, then stored once.
  std::vector<F> dw(C), db(C);
  for (std::size_t c = 0; c < C; ++c) {
    dw[c] = load(dweight[c]);
    db[c] = load(dbias[c]);
  }
  for (std::size_t n = 0; n < N; ++n) {
    const T* d = dout + n * C;
    const T* row = x + n * C;
    const F m = mean[n], s = rstd[n];
    // mean(g) and mean(g * xhat), g = dout * weight
    double g_mean = 0, g_xhat_mean = 0;
    for (std::size_t c = 0; c < C; ++c) {
      const F xhat = (load(row[c]) - m) * s;
      const F g = load(d[c]) * load(weight[c]);
      g_mean += g;
      g_xhat_mean += g * xhat;
    }
    g_mean /= static_cast<double>(C);
    g_xhat_mean /= static_cast<double>(C);
    T* dxr = dx + n * C;
    for (std::size_t c = 0; c < C; ++c) {
      const F xhat = (load(row[c]) - m) * s;
      const F g = load(d[c]) * load(weight[c]);
      db[c] += load(d[c]);
      dw[c] += load(d[c]) * xhat;
      dxr[c] = store<T>(load(dxr[c]) + s * (g - static_cast<F>(g_mean) - xhat * static_cast<F>(g_xhat_mean)));
    }
  }
  for (std::size_t c = 0; c < C; ++c) {
    dweight[c] = store<T>(dw[c]);
    dbias[c] = store<T>(db[c]);
  }
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void layernorm_forward<T>(T*, compute_t<T>*, compute_t<T>*, const T*, const T*, const T*, std::size_t, \
                                     std::size_t);                                                                \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const compute_t<T>*,              \
                                      const compute_t<T>*, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
