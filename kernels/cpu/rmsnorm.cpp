// CPU reference: RMSNorm forward and backward (formulas in kernels/rmsnorm.h). Each element is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each output
// stored once; the row sums (of x^2, and of g * xhat) are taken in double. The forward's rows and
// the backward's dx rows are split over the cores (kernels/cpu/parallel_for.h: the same bits as
// one loop); dweight is a sum over the rows, taken in order in one loop.
#include "kernels/rmsnorm.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace trainmem::kernels::cpu {

template <typename T>
void rmsnorm_forward(T* out, compute_t<T>* rstd, const T* x, const T* weight, std::size_t N, std::size_t C,
                     double eps) {
  using F = compute_t<T>;
  const std::size_t min_rows_per_thread = 65536 / (C > 0 ? C : 1) + 1;  // 64K elements
  parallel_for(N, min_rows_per_thread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = x + n * C;
      double sum_sq = 0;  // in double: a long row of floats loses digits otherwise
      for (std::size_t c = 0; c < C; ++c) {
        const double v = load(row[c]);
        sum_sq += v * v;
      }
      // rstd = 1/sqrt(mean(x^2) + eps), rounded to F once; out = (x * rstd) * weight in F.
      const F s = static_cast<F>(1.0 / std::sqrt(sum_sq / static_cast<double>(C) + eps));
      T* o = out + n * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = store<T>(load(row[c]) * s * load(weight[c]));
      rstd[n] = s;
    }
  });
}

template <typename T>
void rmsnorm_backward(T* dx, T* dweight, const T* dout, const T* x, const T* weight, const compute_t<T>* rstd,
                      std::size_t N, std::size_t C) {
  using F = compute_t<T>;
  // dx[n, c] += rstd * (g - xhat * mean(g * xhat)), g = dout * weight, xhat = x * rstd: each row alone.
  const std::size_t min_rows_per_thread = 65536 / (C > 0 ? C : 1) + 1;
  parallel_for(N, min_rows_per_thread, [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* d = dout + n * C;
      const T* row = x + n * C;
      const F s = rstd[n];
      double g_xhat_sum = 0;
      for (std::size_t c = 0; c < C; ++c) {
        const F xhat = load(row[c]) * s;
        const F g = load(d[c]) * load(weight[c]);
        g_xhat_sum += g * xhat;
      }
      const F g_xhat_mean = static_cast<F>(g_xhat_sum / static_cast<double>(C));
      T* dxr = dx + n * C;
      for (std::size_t c = 0; c < C; ++c) {
        const F xhat = load(row[c]) * s;
        const F g = load(d[c]) * load(weight[c]);
        dxr[c] = store<T>(load(dxr[c]) + s * (g - xhat * g_xhat_mean));
      }
    }
  });
  // dweight[c] += sum over rows of dout * xhat: kept in F from the old value until the last row
  // (rows in order), then stored once.
  std::vector<F> dw(C);
  for (std::size_t c = 0; c < C; ++c) dw[c] = load(dweight[c]);
  for (std::size_t n = 0; n < N; ++n) {
    const T* d = dout + n * C;
    const T* row = x + n * C;
    const F s = rstd[n];
    for (std::size_t c = 0; c < C; ++c) dw[c] += load(d[c]) * (load(row[c]) * s);
  }
  for (std::size_t c = 0; c < C; ++c) dweight[c] = store<T>(dw[c]);
}

#define TRAINMEM_INSTANTIATE(T)                                                                              \
  template void rmsnorm_forward<T>(T*, compute_t<T>*, const T*, const T*, std::size_t, std::size_t, double); \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const compute_t<T>*, std::size_t,  \
                                    std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
