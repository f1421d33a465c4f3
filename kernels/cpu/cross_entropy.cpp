// CPU reference: fused softmax + cross-entropy (formulas in kernels/cross_entropy.h).
#include "kernels/cross_entropy.h"

#include <cmath>

namespace trainmem::kernels::cpu {

namespace {
// max and log(sum(exp(x - max))) of one row: the stable log-sum-exp.
template <typename T>
void row_logsumexp(const T* row, std::size_t V, T& maxval, T& log_sum) {
  maxval = row[0];
  for (std::size_t v = 1; v < V; ++v)
    if (row[v] > maxval) maxval = row[v];
  double sum = 0;
  for (std::size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v] - maxval));
  log_sum = static_cast<T>(std::log(sum));
}
}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const std::int32_t* targets, std::size_t N, std::size_t V) {
  for (std::size_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T maxval, log_sum;
    row_logsumexp(row, V, maxval, log_sum);
    losses[n] = maxval + log_sum - row[targets[n]];
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, T dloss, std::size_t N,
                            std::size_t V) {
  for (std::size_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T* drow = dlogits + n * V;  // may be the same memory as row: each element is read before written
    T maxval, log_sum;
    row_logsumexp(row, V, maxval, log_sum);
    const std::int32_t target = targets[n];
    for (std::size_t v = 0; v < V; ++v) {
      const T p = std::exp(row[v] - maxval - log_sum);
      drow[v] = dloss * (p - (static_cast<std::int32_t>(v) == target ? T(1) : T(0)));
    }
  }
}

template void cross_entropy_forward<float>(float*, const float*, const std::int32_t*, std::size_t, std::size_t);
template void cross_entropy_forward<double>(double*, const double*, const std::int32_t*, std::size_t, std::size_t);
template void cross_entropy_backward<float>(float*, const float*, const std::int32_t*, float, std::size_t, std::size_t);
template void cross_entropy_backward<double>(double*, const double*, const std::int32_t*, double, std::size_t,
                                             std::size_t);

}  // namespace trainmem::kernels::cpu
