// Fused softmax + cross-entropy over V classes for N rows:
//   forward:  losses[n] = logsumexp(logits[n, :]) - logits[n, target[n]]
//   backward: dlogits[n, v] = dloss * (softmax(logits[n, :])[v] - [v == target[n]])
// The backward recomputes the softmax from the logits instead of saving probabilities (N*V
// floats), and may write dlogits over logits (in place) to save that much memory again.
// dloss is the same for every row: 1/(N * accumulation steps) for a mean loss.
#pragma once
#include <cstdint>

#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const std::int32_t* targets, std::size_t N, std::size_t V);
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, T dloss, std::size_t N,
                            std::size_t V);
}  // namespace cpu
namespace cuda {
void cross_entropy_forward(void* stream, float* losses, const float* logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V);
void cross_entropy_backward(void* stream, float* dlogits, const float* logits, const std::int32_t* targets, float dloss,
                            std::size_t N, std::size_t V);
}  // namespace cuda

inline void cross_entropy_forward(const Stream& s, float* losses, const float* logits, const std::int32_t* targets,
                                  std::size_t N, std::size_t V) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::cross_entropy_forward(losses, logits, targets, N, V);
  TRAINMEM_CUDA_KERNEL("cross_entropy_forward", cuda::cross_entropy_forward(s.cuda_stream, losses, logits, targets, N, V));
}
inline void cross_entropy_backward(const Stream& s, float* dlogits, const float* logits, const std::int32_t* targets,
                                   float dloss, std::size_t N, std::size_t V) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::cross_entropy_backward(dlogits, logits, targets, dloss, N, V);
  TRAINMEM_CUDA_KERNEL("cross_entropy_backward",
                       cuda::cross_entropy_backward(s.cuda_stream, dlogits, logits, targets, dloss, N, V));
}
}  // namespace trainmem::kernels
