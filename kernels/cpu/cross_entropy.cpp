// CPU reference: fused softmax + cross-entropy (formulas in kernels/cross_entropy.h). Each logit is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each dlogit
// stored once, from the row's exponentials (each computed once). The rows are split over the cores
// (kernels/cpu/parallel_for.h: the same bits as one loop). The exponentials are vector_exp.h's in
// fp32 (within 1 ulp; glibc's exp was called once per logit, twice in the backward: 51M logits a step
// on the 124M shape), std::exp in double; the loops over a row are compiled per instruction set
// (kernels/cpu/simd_clones.h). A target outside [0, V) gives a NaN loss and no -1 (as on CUDA),
// never a read or write outside the row.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/vector_exp.h"

namespace trainmem::kernels::cpu {

namespace {
// Rows per thread at least: 64K logits (a row costs V exponentials).
std::size_t min_rows_per_thread(std::size_t V) { return 65536 / (V > 0 ? V : 1) + 1; }

// exps[v] = exp(x[v] - maxval) over one row (one copy per instruction set: the exp vectorizes).
template <typename T>
TRAINMEM_SIMD_CLONES void row_exps(compute_t<T>* exps, const T* row, std::size_t V, compute_t<T> maxval) {
  for (std::size_t v = 0; v < V; ++v) exps[v] = exp_of(load(row[v]) - maxval);
}

// The largest of a row's first V values, as the one loop `if (x[v] > m) m = x[v]` from m = x[0] finds
// it. In fp32 by 16 lanes (lane j: v = j, j + 16, ...) of 4-float vectors, each taking x only where
// x > lane, then folded the same way: a maximum does not depend on the order, a NaN is never taken
// (a NaN x[0] stays), so the result is the loop's, 3x faster (the loop's compare and branch cost
// 1.5 ns a value; GCC vectorizes no float max without -ffinite-math-only).
template <typename T>
compute_t<T> row_max(const T* row, std::size_t V) {
  compute_t<T> maxval = load(row[0]);
  std::size_t v = 1;
  if constexpr (std::is_same_v<T, float>) {
    typedef float float4 __attribute__((vector_size(16)));
    typedef std::int32_t mask4 __attribute__((vector_size(16)));
    constexpr std::size_t kVectors = 4, kLanes = 4 * kVectors;
    float4 lane[kVectors];
    for (float4& l : lane) l = float4{row[0], row[0], row[0], row[0]};
    for (v = 0; v + kLanes <= V; v += kLanes)
      for (std::size_t q = 0; q < kVectors; ++q) {
        float4 x;
        std::memcpy(&x, row + v + 4 * q, sizeof x);
        const mask4 take = x > lane[q];  // all ones where x > lane
        lane[q] = reinterpret_cast<float4>((reinterpret_cast<mask4>(x) & take) |
                                           (reinterpret_cast<mask4>(lane[q]) & ~take));
      }
    for (const float4& l : lane)
      for (int j = 0; j < 4; ++j)
        if (l[j] > maxval) maxval = l[j];
  }
  for (; v < V; ++v)
    if (load(row[v]) > maxval) maxval = load(row[v]);
  return maxval;
}

// The row's max m and sum s = sum_v exp(x_v - m), with exps[v] = exp(x_v - m) left in the scratch.
// The sum is taken in double in kLanes interleaved partial sums (lane j sums v = j, j + kLanes, ...),
// then added pairwise: one sum in order waited 4 cycles per logit for the previous addition
// (V = 50257: about 50 us a row); the lanes are a fixed order too, so the result depends on V alone.
template <typename T>
void row_max_and_sum(const T* row, std::size_t V, compute_t<T>& maxval, double& sum, std::vector<compute_t<T>>& exps) {
  constexpr std::size_t kLanes = 8;
  maxval = row_max(row, V);
  exps.resize(V);
  row_exps(exps.data(), row, V, maxval);
  double lane[kLanes] = {};
  std::size_t v = 0;
  for (; v + kLanes <= V; v += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(exps[v + j]);
  for (std::size_t j = 0; v < V; ++v, ++j) lane[j] += static_cast<double>(exps[v]);
  sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

bool is_class(std::int32_t target, std::size_t V) { return target >= 0 && static_cast<std::size_t>(target) < V; }

// loss = m + log(s) - x[target]
template <typename T>
compute_t<T> row_loss(const T* row, std::size_t V, compute_t<T> maxval, double sum, std::int32_t target) {
  using F = compute_t<T>;
  if (!is_class(target, V)) return std::numeric_limits<F>::quiet_NaN();
  return maxval + static_cast<F>(std::log(sum)) - load(row[target]);
}

// dloss * softmax(x)[v] = dloss * (exps[v] / s) over one row, from the exponentials still in the
// cache (one copy per instruction set; the target's own term is the caller's: with a test for it
// inside, the loop would not vectorize).
template <typename T>
TRAINMEM_SIMD_CLONES void row_scaled_softmax(T* __restrict drow, const compute_t<T>* __restrict exps, std::size_t V,
                                             compute_t<T> sum, compute_t<T> dloss) {
  for (std::size_t v = 0; v < V; ++v) drow[v] = store<T>(dloss * (exps[v] / sum));
}
}  // namespace

template <typename T>
void cross_entropy_forward(compute_t<T>* losses, const T* logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V, std::size_t Vp) {
  using F = compute_t<T>;
  parallel_for(N, min_rows_per_thread(V), [&](std::size_t begin, std::size_t end) {
    std::vector<F> exps;  // this thread's scratch row
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = logits + n * Vp;  // its first V logits: the padded columns are not read
      F maxval;
      double sum;
      row_max_and_sum(row, V, maxval, sum, exps);
      losses[n] = row_loss(row, V, maxval, sum, targets[n]);
    }
  });
}

// One pass over each row from memory: its max reads it, and the exponentials, the sum and the
// gradient work on the row and its exponentials in the cache (2 x 200 KB at V = 50257).
template <typename T>
void cross_entropy_forward_backward(compute_t<T>* losses, T* dlogits, const T* logits, const std::int32_t* targets,
                                    compute_t<T> dloss, std::size_t N, std::size_t V, std::size_t Vp) {
  using F = compute_t<T>;
  parallel_for(N, min_rows_per_thread(V), [&](std::size_t begin, std::size_t end) {
    std::vector<F> exps;  // this thread's scratch row
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = logits + n * Vp;
      T* drow = dlogits + n * Vp;  // may be the same memory as row: each logit is read before it is written
      const std::int32_t target = targets[n];
      F maxval;
      double sum;
      row_max_and_sum(row, V, maxval, sum, exps);
      losses[n] = row_loss(row, V, maxval, sum, target);  // reads the target's logit before it is overwritten
      const F sum_f = static_cast<F>(sum);
      row_scaled_softmax(drow, exps.data(), V, sum_f, dloss);
      if (is_class(target, V)) drow[target] = store<T>(dloss * (exps[target] / sum_f - F(1)));  // p - 1 there
      std::fill(drow + V, drow + Vp, store<T>(F(0)));  // the padded columns are no classes: no gradient
    }
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void cross_entropy_forward<T>(compute_t<T>*, const T*, const std::int32_t*, std::size_t, std::size_t,    \
                                         std::size_t);                                                             \
  template void cross_entropy_forward_backward<T>(compute_t<T>*, T*, const T*, const std::int32_t*, compute_t<T>,     \
                                                  std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
