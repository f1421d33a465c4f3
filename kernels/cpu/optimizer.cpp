// CPU reference: AdamW and the sum of squares for gradient clipping (formulas in adamw.h).
#include <cmath>

#include "kernels/adamw.h"
#include "kernels/grad_norm.h"

namespace trainmem::kernels::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWHyper& h, long step,
                  float grad_scale) {
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(step));
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float mhat = m[i] / bias1;
    const float vhat = v[i] / bias2;
    param[i] -= h.lr * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * param[i]);
  }
}

double sum_of_squares(const float* x, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

}  // namespace trainmem::kernels::cpu
