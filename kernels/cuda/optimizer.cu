// CUDA: the AdamW step and the sum of squares for gradient-norm clipping (formulas in adamw.h and
// grad_norm.h; the CPU reference is cpu/optimizer.cpp). The kernels are templates over the element
// type D of the parameter and gradient (float, __nv_bfloat16, __half; dtype.cuh); m, v, the master
// weights and the arithmetic are fp32.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/adamw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"
#include "kernels/grad_norm.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;
constexpr std::size_t kMaxSumBlocks = 1024;  // at most this many atomicAdds into the accumulator per call

// One AdamW step on element i (thread i, grid-stride), in place on m, v and the weight p:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + weight_decay * p)
// p is master[i] when there is a master copy (then param[i] = p rounded, once), else param[i].
// bias1 = 1 - b1^t and bias2 = 1 - b2^t are computed once on the host, exactly as the CPU does.
template <typename D>
__global__ void adamw_kernel(D* param, const D* grad, float* master, float* m, float* v, std::size_t n, float lr,
                             float beta1, float beta2, float eps, float weight_decay, float bias1, float bias2,
                             float grad_scale) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float g = detail::to_float(grad[i]) * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bias1;
    const float vhat = vi / bias2;
    const float p = master ? master[i] : detail::to_float(param[i]);
    const float updated = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
    if (master) master[i] = updated;
    param[i] = detail::from_float<D>(updated);
  }
}

// *accumulator += sum_i x[i]^2.
// Thread -> elements i = global index, + grid stride (its partial sum, in double as the CPU
// reference sums); then a block reduction (double) and ONE atomicAdd per block into the float
// accumulator, so a call adds at most kMaxSumBlocks rounded partials.
template <typename D>
__global__ void sum_of_squares_kernel(float* accumulator, const D* x, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const double xi = detail::to_float(x[i]);
    sum += xi * xi;
  }
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  if (threadIdx.x == 0) atomicAdd(accumulator, static_cast<float>(sum));
}

}  // namespace

template <typename T>
void adamw_update(void* stream, Out<T> param, In<T> grad, float* m, float* v, std::size_t n, const AdamWHyper& h,
                  long step, float grad_scale, float* master) {
  if (is_16bit_v<T> && master == nullptr)
    throw std::invalid_argument(std::string("adamw_update: ") + dtype_name<T>() +
                                " parameters need an fp32 master copy (master is null)");
  if (n == 0) return;
  // The same float expressions as cpu::adamw_update, so both backends correct the bias identically.
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(step));
  adamw_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      detail::device_cast(param), detail::device_cast(grad), master, m, v, n, h.lr, h.beta1, h.beta2, h.eps,
      h.weight_decay, bias1, bias2, grad_scale);
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

template <typename T>
void sum_of_squares_accumulate(void* stream, float* device_accumulator, In<T> x, std::size_t n) {
  if (n == 0) return;
  sum_of_squares_kernel<<<detail::grid_for(n, kBlock, kMaxSumBlocks), kBlock, 0, detail::as_stream(stream)>>>(
      device_accumulator, detail::device_cast(x), n);
  CUDA_CHECK_LAUNCH("sum_of_squares_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                  \
  template void adamw_update<T>(void*, Out<T>, In<T>, float*, float*, std::size_t, const AdamWHyper&, long, float, \
                                float*);                                                                         \
  template void sum_of_squares_accumulate<T>(void*, float*, In<T>, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
