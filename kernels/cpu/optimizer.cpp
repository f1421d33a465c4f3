// CPU reference: AdamW and the sum of squares for gradient clipping (formulas in adamw.h and
// grad_norm.h). Every value is loaded into fp32 (kernels/dtype.h); the parameter is stored once.
// AdamW's elements are split over the cores (kernels/cpu/parallel_for.h: the same bits as one
// loop) and its loop is compiled per instruction set (kernels/cpu/simd_clones.h: the same bits);
// the sum of squares is summed in fixed blocks over the cores (its order, part of its value, is
// set by n alone).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/grad_norm.h"

namespace trainmem::kernels::cpu {

namespace {
// Elements [begin, end): the loop, one copy per instruction set (simd_clones.h), and one with and
// one without a master copy (a test inside the loop would keep it scalar). The five arrays never
// overlap (__restrict: without it the compiler needs more overlap checks than it makes).
template <bool kMaster, typename T>
TRAINMEM_SIMD_CLONES void adamw_range(T* __restrict param, const T* __restrict grad, float* __restrict m,
                                      float* __restrict v, const AdamWHyper h, float bias1, float bias2,
                                      float grad_scale, float* __restrict master, std::size_t begin,
                                      std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    const float g = load(grad[i]) * grad_scale;
    m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
    const float mhat = m[i] / bias1;
    const float vhat = v[i] / bias2;
    const float p = kMaster ? master[i] : load(param[i]);  // without master, param is its own (fp32) master
    const float updated = p - h.lr * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * p);
    if constexpr (kMaster) master[i] = updated;
    param[i] = store<T>(updated);
  }
}
}  // namespace

template <typename T>
void adamw_update(T* param, const T* grad, float* m, float* v, std::size_t n, const AdamWHyper& h, long step,
                  float grad_scale, float* master) {
  if (is_16bit_v<T> && master == nullptr)
    throw std::invalid_argument(std::string("adamw_update: ") + dtype_name<T>() +
                                " parameters need an fp32 master copy (master is null)");
  const float bias1 = 1.0f - std::pow(h.beta1, static_cast<float>(step));
  const float bias2 = 1.0f - std::pow(h.beta2, static_cast<float>(step));
  constexpr std::size_t kMinPerThread = 65536;  // elements (a few ns each)
  parallel_for(n, kMinPerThread, [&](std::size_t begin, std::size_t end) {
    if (master) adamw_range<true>(param, grad, m, v, h, bias1, bias2, grad_scale, master, begin, end);
    else adamw_range<false>(param, grad, m, v, h, bias1, bias2, grad_scale, master, begin, end);
  });
}

// The sum of squares in a fixed order that depends on n alone: blocks of kSquaresBlock values
// (the last one shorter), each summed in kSquaresLanes interleaved partial sums (lane j takes
// i = j, j + kSquaresLanes, ...; the lanes then added pairwise), the blocks' sums then added in
// block order. So it is the same bits on any number of threads (the blocks are split over the
// cores) and in every copy of the loop (simd_clones.h; -ffp-contract=off). One running sum, as
// before, waited for the previous addition at every value: 218 ms of a 1.58 s step on the 124M
// shape (45 M gradients; bench_kernels' BM_StepByKernel).
namespace {
constexpr std::size_t kSquaresBlock = 65536;
constexpr std::size_t kSquaresLanes = 8;

template <typename T>
TRAINMEM_SIMD_CLONES double block_sum_of_squares(const T* __restrict x, std::size_t n) {
  double lane[kSquaresLanes] = {};
  std::size_t i = 0;
  for (; i + kSquaresLanes <= n; i += kSquaresLanes)
    for (std::size_t j = 0; j < kSquaresLanes; ++j) {
      const double xi = load(x[i + j]);
      lane[j] += xi * xi;
    }
  for (std::size_t j = 0; i < n; ++i, ++j) {
    const double xi = load(x[i]);
    lane[j] += xi * xi;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}
}  // namespace

template <typename T>
double sum_of_squares(In<T> x, std::size_t n) {
  const std::size_t blocks = (n + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> block_sums(blocks);
  parallel_for(blocks, 4, [&](std::size_t begin, std::size_t end) {  // 4 blocks a thread at least
    for (std::size_t b = begin; b < end; ++b)
      block_sums[b] = block_sum_of_squares(x + b * kSquaresBlock, std::min(kSquaresBlock, n - b * kSquaresBlock));
  });
  double sum = 0;
  for (double s : block_sums) sum += s;
  return sum;
}

template void adamw_update<float>(float*, const float*, float*, float*, std::size_t, const AdamWHyper&, long, float,
                                  float*);
template void adamw_update<bf16>(bf16*, const bf16*, float*, float*, std::size_t, const AdamWHyper&, long, float,
                                 float*);
template void adamw_update<fp16>(fp16*, const fp16*, float*, float*, std::size_t, const AdamWHyper&, long, float,
                                 float*);
template double sum_of_squares<float>(const float*, std::size_t);
template double sum_of_squares<bf16>(const bf16*, std::size_t);
template double sum_of_squares<fp16>(const fp16*, std::size_t);

}  // namespace trainmem::kernels::cpu
