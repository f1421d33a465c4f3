// CPU reference: fused softmax + cross-entropy (formulas in kernels/cross_entropy.h). Each logit is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each dlogit
// stored once. The rows are split over the cores (kernels/cpu/parallel_for.h: the same bits as one
// loop).
#include "kernels/cross_entropy.h"

#include <cmath>

#include "kernels/cpu/parallel_for.h"

namespace trainmem::kernels::cpu {

namespace {
// Rows per thread at least: 64K logits (a row costs V exponentials).
std::size_t min_rows_per_thread(std::size_t V) { return 65536 / (V > 0 ? V : 1) + 1; }

// max and log(sum(exp(x - max))) of one row: the stable log-sum-exp.
template <typename T>
void row_logsumexp(const T* row, std::size_t V, compute_t<T>& maxval, compute_t<T>& log_sum) {
  using F = compute_t<T>;
  maxval = load(row[0]);
  for (std::size_t v = 1; v < V; ++v)
    if (load(row[v]) > maxval) maxval = load(row[v]);
  double sum = 0;
  for (std::size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(load(row[v]) - maxval));
  log_sum = static_cast<F>(std::log(sum));
}
}  // namespace

template <typename T>
void cross_entropy_forward(compute_t<T>* losses, const T* logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V) {
  using F = compute_t<T>;
  parallel_for(N, min_rows_per_thread(V), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = logits + n * V;
      F maxval, log_sum;
      row_logsumexp(row, V, maxval, log_sum);
      losses[n] = maxval + log_sum - load(row[targets[n]]);
    }
  });
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, compute_t<T> dloss, std::size_t N,
                            std::size_t V) {
  using F = compute_t<T>;
  parallel_for(N, min_rows_per_thread(V), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* row = logits + n * V;
      T* drow = dlogits + n * V;  // may be the same memory as row: each element is read before written
      F maxval, log_sum;
      row_logsumexp(row, V, maxval, log_sum);
      const std::int32_t target = targets[n];
      for (std::size_t v = 0; v < V; ++v) {
        const F p = std::exp(load(row[v]) - maxval - log_sum);
        drow[v] = store<T>(dloss * (p - (static_cast<std::int32_t>(v) == target ? F(1) : F(0))));
      }
    }
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                    \
  template void cross_entropy_forward<T>(compute_t<T>*, const T*, const std::int32_t*, std::size_t, std::size_t); \
  template void cross_entropy_backward<T>(T*, const T*, const std::int32_t*, compute_t<T>, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
