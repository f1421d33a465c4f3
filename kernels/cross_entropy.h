// Fused softmax + cross-entropy over V classes for N rows:
//   forward:  losses[n] = logsumexp(logits[n, :]) - logits[n, target[n]]
//   backward: dlogits[n, v] = dloss * (softmax(logits[n, :])[v] - [v == target[n]])
// The backward recomputes the softmax from the logits instead of saving probabilities (N*V
// floats), and may write dlogits over logits (in place) to save that much memory again.
// dloss is the same for every row: 1/(N * accumulation steps) for a mean loss.
//
// Storage type T (kernels/dtype.h) for logits and dlogits: float, bf16 or fp16 (and double on the
// CPU). losses and dloss are in the compute type (fp32; double for double). In 16 bits the CPU
// result is bit for bit the fp32 kernel's on the widened logits, with dlogits rounded once.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void cross_entropy_forward(compute_t<T>* losses, const T* logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V);
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, compute_t<T> dloss, std::size_t N,
                            std::size_t V);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void cross_entropy_forward(void* stream, float* losses, In<T> logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V);
template <typename T = float>
void cross_entropy_backward(void* stream, Out<T> dlogits, In<T> logits, const std::int32_t* targets, float dloss,
                            std::size_t N, std::size_t V);
}  // namespace cuda

template <typename T = float>
inline void cross_entropy_forward(const Stream& s, float* losses, In<T> logits, const std::int32_t* targets,
                                  std::size_t N, std::size_t V) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::cross_entropy_forward<T>(losses, logits, targets, N, V);
  TRAINMEM_CUDA_KERNEL("cross_entropy_forward",
                       cuda::cross_entropy_forward<T>(s.cuda_stream, losses, logits, targets, N, V));
}
template <typename T = float>
inline void cross_entropy_backward(const Stream& s, Out<T> dlogits, In<T> logits, const std::int32_t* targets,
                                   float dloss, std::size_t N, std::size_t V) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::cross_entropy_backward<T>(dlogits, logits, targets, dloss, N, V);
  TRAINMEM_CUDA_KERNEL("cross_entropy_backward",
                       cuda::cross_entropy_backward<T>(s.cuda_stream, dlogits, logits, targets, dloss, N, V));
}
}  // namespace trainmem::kernels
