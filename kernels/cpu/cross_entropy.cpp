// CPU reference: fused softmax + cross-entropy (formulas in kernels/cross_entropy.h). Each logit is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each dlogit
// stored once. The rows are split over the cores (kernels/cpu/parallel_for.h: the same bits as one
// loop). The exponentials are vector_exp.h's in fp32 (within 1 ulp; glibc's exp was called once per
// logit, twice in the backward: 51M logits a step on the 124M shape), std::exp in double; the
// loops of exps are compiled per instruction set (kernels/cpu/simd_clones.h).
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// max and log(sum(exp(x - max))) of one row: the stable log-sum-exp. The sum is taken in double in
// kLanes interleaved partial sums (lane j sums v = j, j + kLanes, ...), then added pairwise: one sum
// in order waited 4 cycles per logit for the previous addition (V = 50257: about 50 us a row); the
// lanes are a fixed order too, so the result depends on V alone. exps: scratch of V values.
template <typename T>
void row_logsumexp(const T* row, std::size_t V, compute_t<T>& maxval, compute_t<T>& log_sum,
                   std::vector<compute_t<T>>& exps) {
  using F = compute_t<T>;
  constexpr std::size_t kLanes = 8;
  maxval = row_max(row, V);
  exps.resize(V);
  row_exps(exps.data(), row, V, maxval);
  double lane[kLanes] = {};
  std::size_t v = 0;
  for (; v + kLanes <= V; v += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(exps[v + j]);
  for (std::size_t j = 0; v < V; ++v, ++j) lane[j] += static_cast<double>(exps[v]);
  const double sum = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  log_sum = static_cast<F>(std::log(sum));
}

// One row of dlogits: dloss * (softmax(x)[v] - [v == target]), softmax(x)[v] = exp(x[v] - max - lse)
// (drow may be row itself: each element is read before it is written).
template <typename T>
TRAINMEM_SIMD_CLONES void row_dlogits(T* drow, const T* row, std::size_t V, compute_t<T> maxval,
                                      compute_t<T> log_sum, std::int32_t target, compute_t<T> dloss) {
  using F = compute_t<T>;
  for (std::size_t v = 0; v < V; ++v) {
    const F p = exp_of(load(row[v]) - maxval - log_sum);
    drow[v] = store<T>(dloss * (p - (static_cast<std::int32_t>(v) == target ? F(1) : F(0))));
  }
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
      F maxval, log_sum;
      row_logsumexp(row, V, maxval, log_sum, exps);
      losses[n] = maxval + log_sum - load(row[targets[n]]);
    }
  });
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, compute_t<T> dloss, std::size_t N,
                            std::size_t V, std::size_t Vp) {
  using F = compute_t<T>;
  parallel_for(N, min_rows_per_thread(V), [&](std::size_t begin, std::size_t end) {
    std::vector<F> exps;  // this thread's scratch row
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = logits + n * Vp;
      T* drow = dlogits + n * Vp;  // may be the same memory as row: each element is read before written
      F maxval, log_sum;
      row_logsumexp(row, V, maxval, log_sum, exps);
      row_dlogits(drow, row, V, maxval, log_sum, targets[n], dloss);
      std::fill(drow + V, drow + Vp, store<T>(F(0)));  // the padded columns are no classes: no gradient
    }
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void cross_entropy_forward<T>(compute_t<T>*, const T*, const std::int32_t*, std::size_t, std::size_t,    \
                                         std::size_t);                                                             \
  template void cross_entropy_backward<T>(T*, const T*, const std::int32_t*, compute_t<T>, std::size_t, std::size_t, \
                                          std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
