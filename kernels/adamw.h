// AdamW (Loshchilov & Hutter), one step t = 1, 2, ... over n parameters, in place:
//   g = grad * grad_scale                      (grad_scale: clipping and loss-scale unscaling)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^t);      vhat = v / (1 - beta2^t)
//   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
// param, m and v are fp32 (master weights and moments).
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
struct AdamWHyper {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};
namespace cpu {
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWHyper& h, long step,
                  float grad_scale);
}
namespace cuda {
void adamw_update(void* stream, float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWHyper& h,
                  long step, float grad_scale);
}
inline void adamw_update(const Stream& s, float* param, const float* grad, float* m, float* v, std::size_t n,
                         const AdamWHyper& h, long step, float grad_scale) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::adamw_update(param, grad, m, v, n, h, step, grad_scale);
  TRAINMEM_CUDA_KERNEL("adamw_update", cuda::adamw_update(s.cuda_stream, param, grad, m, v, n, h, step, grad_scale));
}
}  // namespace trainmem::kernels
