// CUDA: the AdamW step and the sum of squares for gradient-norm clipping (formulas in adamw.h and
// grad_norm.h; the CPU reference is cpu/optimizer.cpp).
#include <cmath>
#include <cstddef>

#include "kernels/adamw.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/grad_norm.h"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 256;
constexpr std::size_t kMaxSumBlocks = 1024;  // at most this many atomicAdds into the accumulator per call

// One AdamW step on element i (thread i, grid-stride), in place on param, m and v:
//   g = grad * grad_scale;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + weight_decay * param)
// bias1 = 1 - b1^t and bias2 = 1 - b2^t are computed once on the host, exactly as the CPU does.
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, float bias1, float bias2, float grad_scale) {
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bias1;
    const float vhat = vi / bias2;
    const float p = param[i];
    param[i] = p - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
  }
}

// *accumulator += sum_i x[i]^2.
// Thread -> elements i = global index, + grid stride (its partial sum, in double as the CPU
// reference sums); then a block reduction (double) and ONE atomicAdd per block into the float
// accumulator, so a call adds at most kMaxSumBlocks rounded partials.
__global__ void sum_of_squares_kernel(float* accumulator, const float* x, std::size_t n) {
  double sum = 0.0;
  for (std::size_t i = detail::global_thread_index(); i < n; i += detail::grid_stride()) {
    const double xi = x[i];
    sum += xi * xi;
  }
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0);
  if (threadIdx.x == 0) atomicAdd(accumulator, static_cast<float>(sum));
}

}  // namespace

void adamw_update(void* stream, float* param, const float* grad, float* m, float* v, std::size_t n, const AdamWHyper& h,
                  long step, float grad_scale) {
  if (n == 0) return;
  // The same float expressions as cpu::adamw_update, so both backends correct the bias identically.
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(step));
  adamw_kernel<<<detail::grid_for(n, kBlock), kBlock, 0, detail::as_stream(stream)>>>(
      param, grad, m, v, n, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, bias1, bias2, grad_scale);
  CUDA_CHECK_LAUNCH("adamw_kernel");
}

void sum_of_squares_accumulate(void* stream, float* device_accumulator, const float* x, std::size_t n) {
  if (n == 0) return;
  sum_of_squares_kernel<<<detail::grid_for(n, kBlock, kMaxSumBlocks), kBlock, 0, detail::as_stream(stream)>>>(
      device_accumulator, x, n);
  CUDA_CHECK_LAUNCH("sum_of_squares_kernel");
}

}  // namespace trainmem::kernels::cuda
