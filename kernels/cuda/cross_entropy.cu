// CUDA: fused softmax + cross-entropy over V classes in rows of Vp >= V logits (formulas in
// cross_entropy.h; the CPU reference is cpu/cross_entropy.cpp). One block per row: the row's max and
// sum of exponentials over its first V columns are block reductions (the stable log-sum-exp,
// lse = max + log(sum_v exp(x_v - max))); the gradient's loop writes 0 to the Vp - V padded columns.
//
// In place: cross_entropy_forward_backward may be called with dlogits == logits. That is safe here
// because
//   1. every read that feeds the reductions, and thread 0's read of the target's logit for the
//      loss, happens before the reduction's barriers, so once any thread leaves block_reduce, all
//      threads of the block have finished reading for the loss, the max and the sum (and no other
//      block touches this row);
//   2. in the write loop, each element v is read and then written by the same thread, and by no
//      other thread (a padded column is only written).
// For the same reason the two pointers carry no __restrict__ (the compiler must not assume they
// differ, nor read logits through the read-only cache).
//
// The kernels are templates over the element type D of logits and dlogits (float, __nv_bfloat16,
// __half; dtype.cuh): loads widen to float, the statistics are float, each dlogit is rounded once;
// losses are float.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cross_entropy.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/dtype.cuh"

namespace trainmem::kernels::cuda {

namespace {

constexpr unsigned kBlock = 512;  // threads per row; a multiple of 32 (block_reduce needs full warps)
constexpr std::size_t kMaxRowBlocks = 65535;

struct RowStats {
  float maxval;
  float sum;  // sum_v exp(x_v - max)
};

// The stable log-sum-exp of one row, computed by the whole block; every thread gets the result.
// Threads stride over the row (v = threadIdx.x, + blockDim.x, ...). Must be called by all threads.
template <typename D>
__device__ RowStats row_stats(const D* row, std::size_t V) {
  float maxval = -INFINITY;
  for (std::size_t v = threadIdx.x; v < V; v += blockDim.x) maxval = fmaxf(maxval, detail::to_float(row[v]));
  maxval = detail::block_reduce(maxval, detail::MaxOp{}, -INFINITY);
  float sum = 0.0f;
  for (std::size_t v = threadIdx.x; v < V; v += blockDim.x) sum += expf(detail::to_float(row[v]) - maxval);
  sum = detail::block_reduce(sum, detail::SumOp{}, 0.0f);
  return {maxval, sum};
}

__device__ bool is_class(std::int32_t target, std::size_t V) {
  return target >= 0 && static_cast<std::size_t>(target) < V;
}

// A row's loss, lse - x[target] = max + log(sum) - x[target]; NaN for a target outside the classes.
__device__ float row_loss(const RowStats& st, bool has_target, float target_logit) {
  return has_target ? st.maxval + logf(st.sum) - target_logit : NAN;
}

// losses[n] = max + log(sum_v exp(logits[n,v] - max)) - logits[n, targets[n]].
// Block -> row n (grid-stride over rows); thread 0 writes the loss. A target outside [0, V) gives
// NaN instead of reading outside the row's classes.
template <typename D>
__global__ void cross_entropy_forward_kernel(float* losses, const D* logits, const std::int32_t* targets, std::size_t N,
                                             std::size_t V, std::size_t Vp) {
  for (std::size_t n = blockIdx.x; n < N; n += gridDim.x) {
    const D* row = logits + n * Vp;
    const RowStats st = row_stats(row, V);
    if (threadIdx.x == 0) {
      const std::int32_t target = targets[n];
      const bool has_target = is_class(target, V);
      losses[n] = row_loss(st, has_target, has_target ? detail::to_float(row[target]) : 0.0f);
    }
  }
}

// The forward's losses[n], and dlogits[n,v] = dloss * (exp(logits[n,v] - max) / sum - [v == targets[n]])
// for v < V, 0 for V <= v < Vp. Block -> row n (grid-stride over rows); thread -> v = threadIdx.x,
// + blockDim.x, ... in the write loop. dlogits may be logits (see the note at the top of the file).
template <typename D>
__global__ void cross_entropy_forward_backward_kernel(float* losses, D* dlogits, const D* logits,
                                                      const std::int32_t* targets, float dloss, std::size_t N,
                                                      std::size_t V, std::size_t Vp) {
  for (std::size_t n = blockIdx.x; n < N; n += gridDim.x) {
    const D* row = logits + n * Vp;
    D* drow = dlogits + n * Vp;
    const std::int32_t target = targets[n];
    const bool has_target = is_class(target, V);
    // thread 0 reads the target's logit before the barriers in row_stats (no thread writes before them)
    const float target_logit = threadIdx.x == 0 && has_target ? detail::to_float(row[target]) : 0.0f;
    const RowStats st = row_stats(row, V);  // all reads for the statistics end here (barriers inside)
    if (threadIdx.x == 0) losses[n] = row_loss(st, has_target, target_logit);
    for (std::size_t v = threadIdx.x; v < Vp; v += blockDim.x) {
      if (v >= V) {  // a padded column: no class, no gradient
        drow[v] = detail::from_float<D>(0.0f);
        continue;
      }
      const float p = expf(detail::to_float(row[v]) - st.maxval) / st.sum;  // read element v ...
      const float indicator = static_cast<std::int64_t>(v) == target ? 1.0f : 0.0f;
      drow[v] = detail::from_float<D>(dloss * (p - indicator));                 // ... then overwrite it (same thread)
    }
  }
}

}  // namespace

template <typename T>
void cross_entropy_forward(void* stream, float* losses, In<T> logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V, std::size_t Vp) {
  if (N == 0 || V == 0) return;
  const unsigned grid = static_cast<unsigned>(N < kMaxRowBlocks ? N : kMaxRowBlocks);
  cross_entropy_forward_kernel<<<grid, kBlock, 0, detail::as_stream(stream)>>>(losses, detail::device_cast(logits),
                                                                               targets, N, V, Vp);
  CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

template <typename T>
void cross_entropy_forward_backward(void* stream, float* losses, Out<T> dlogits, In<T> logits,
                                    const std::int32_t* targets, float dloss, std::size_t N, std::size_t V,
                                    std::size_t Vp) {
  if (N == 0 || V == 0) return;
  const unsigned grid = static_cast<unsigned>(N < kMaxRowBlocks ? N : kMaxRowBlocks);
  cross_entropy_forward_backward_kernel<<<grid, kBlock, 0, detail::as_stream(stream)>>>(
      losses, detail::device_cast(dlogits), detail::device_cast(logits), targets, dloss, N, V, Vp);
  CUDA_CHECK_LAUNCH("cross_entropy_forward_backward_kernel");
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void cross_entropy_forward<T>(void*, float*, In<T>, const std::int32_t*, std::size_t, std::size_t,       \
                                         std::size_t);                                                             \
  template void cross_entropy_forward_backward<T>(void*, float*, Out<T>, In<T>, const std::int32_t*, float,        \
                                                  std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cuda
