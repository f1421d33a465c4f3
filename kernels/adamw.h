// AdamW (Loshchilov & Hutter), one step t = 1, 2, ... over n parameters, in place:
//   g = grad * grad_scale                      (grad_scale: clipping and loss-scale unscaling)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   mhat = m / (1 - beta1^t);      vhat = v / (1 - beta2^t)
//   p -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * p)
// m and v are fp32. The parameter and its gradient are in the storage type T (kernels/dtype.h):
//   T = float, master == nullptr: the parameter is its own master copy, p = param, updated in place;
//   otherwise (required for bf16 and fp16): p is the fp32 master copy `master`, updated in place,
//     and param = p rounded to T, once (mixed precision's fp32 master weights).
// The gradient is widened exactly, and all arithmetic is fp32: in 16 bits this is bit for bit the
// fp32 update of the master weights with the widened gradient, followed by rounding the master
// weights into the parameter.
#pragma once
#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
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
// T = float, bf16 or fp16; std::invalid_argument for a 16-bit T without master.
template <typename T>
void adamw_update(T* param, const T* grad, float* m, float* v, std::size_t n, const AdamWHyper& h, long step,
                  float grad_scale, float* master = nullptr);
}
namespace cuda {
template <typename T = float>
void adamw_update(void* stream, Out<T> param, In<T> grad, float* m, float* v, std::size_t n, const AdamWHyper& h,
                  long step, float grad_scale, float* master = nullptr);
}
template <typename T = float>
inline void adamw_update(const Stream& s, Out<T> param, In<T> grad, float* m, float* v, std::size_t n,
                         const AdamWHyper& h, long step, float grad_scale, float* master = nullptr) {
  // reads param, grad (T) and m, v (fp32; and the fp32 master weights), writes param, m, v (and master)
  KernelCost cost(s, {"adamw_update", KernelClass::memory, kernel_dtype_of<T>(), 12.0 * n,
                      element_bytes(kernel_dtype_of<T>()) * 3.0 * n + 4.0 * 4.0 * n + (master ? 8.0 * n : 0.0)});
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::adamw_update<T>(param, grad, m, v, n, h, step, grad_scale, master);
  TRAINMEM_CUDA_KERNEL("adamw_update",
                       cuda::adamw_update<T>(s.cuda_stream, param, grad, m, v, n, h, step, grad_scale, master));
}
}  // namespace trainmem::kernels
