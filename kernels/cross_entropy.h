// Fused softmax + cross-entropy over V classes for N rows of Vp >= V logits each (Vp is the row
// stride: the model's head is padded to a multiple of 64 columns, common/model/model_config.h; the
// Vp - V padded columns are no classes). With x = logits[n, 0..V), m = max(x), s = sum_v exp(x_v - m):
//   forward:          losses[n] = logsumexp(x) - x[target[n]],   logsumexp(x) = m + log(s)
//   forward_backward: the same losses, and the loss's gradient in one pass over the row:
//                     dlogits[n, v] = dloss * (exp(x_v - m) / s - [v == target[n]])   for v < V
//                     dlogits[n, v] = 0                                             for V <= v < Vp
// exp(x_v - m) / s is softmax(x)[v]. The padded columns are never read (whatever they hold, the loss
// is the unpadded one) and their gradient is exactly 0. Training needs the gradient as soon as it
// has the loss (dloss is known before the forward: the trainer's loss scale over the positions), so
// the fused kernel makes both while the row is in the cache (as llm.c's fused classifier): no
// probabilities saved (N*V floats), no second read of the logits in the backward, and dlogits may
// be written over logits (in place) to save that much memory again. dloss is the same for every
// row: 1/(N * accumulation steps) for a mean loss. forward alone is the evaluation's (no gradient).
//
// Storage type T (kernels/dtype.h) for logits and dlogits: float, bf16 or fp16 (and double on the
// CPU). losses and dloss are in the compute type (fp32; double for double). In 16 bits the CPU
// result is bit for bit the fp32 kernel's on the widened logits, with dlogits rounded once.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void cross_entropy_forward(compute_t<T>* losses, const T* logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V, std::size_t Vp);
template <typename T>
void cross_entropy_forward_backward(compute_t<T>* losses, T* dlogits, const T* logits, const std::int32_t* targets,
                                    compute_t<T> dloss, std::size_t N, std::size_t V, std::size_t Vp);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void cross_entropy_forward(void* stream, float* losses, In<T> logits, const std::int32_t* targets, std::size_t N,
                           std::size_t V, std::size_t Vp);
template <typename T = float>
void cross_entropy_forward_backward(void* stream, float* losses, Out<T> dlogits, In<T> logits,
                                    const std::int32_t* targets, float dloss, std::size_t N, std::size_t V,
                                    std::size_t Vp);
}  // namespace cuda

// A row of Vp logits holds the V classes: Vp < V is a caller's bug (std::logic_error).
inline void check_padded_vocab(std::size_t V, std::size_t Vp) {
  if (Vp < V)
    throw std::logic_error("cross_entropy: a row of " + std::to_string(Vp) + " logits cannot hold " + std::to_string(V) +
                           " classes (Vp must be >= V)");
}

template <typename T = float>
inline void cross_entropy_forward(const Stream& s, float* losses, In<T> logits, const std::int32_t* targets,
                                  std::size_t N, std::size_t V, std::size_t Vp) {
  check_padded_vocab(V, Vp);
  KernelCost cost(s, memory_call<T>("cross_entropy_forward", double(N) * Vp, 1, 0, 5, 8.0 * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::cross_entropy_forward<T>(losses, logits, targets, N, V, Vp);
  TRAINMEM_CUDA_KERNEL("cross_entropy_forward",
                       cuda::cross_entropy_forward<T>(s.cuda_stream, losses, logits, targets, N, V, Vp));
}
template <typename T = float>
inline void cross_entropy_forward_backward(const Stream& s, float* losses, Out<T> dlogits, In<T> logits,
                                           const std::int32_t* targets, float dloss, std::size_t N, std::size_t V,
                                           std::size_t Vp) {
  check_padded_vocab(V, Vp);
  // reads the logits once and writes dlogits; per logit an exponential and the gradient (8 flops)
  KernelCost cost(s, memory_call<T>("cross_entropy_forward_backward", double(N) * Vp, 1, 1, 8, 8.0 * N));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu)
    return cpu::cross_entropy_forward_backward<T>(losses, dlogits, logits, targets, dloss, N, V, Vp);
  TRAINMEM_CUDA_KERNEL("cross_entropy_forward_backward",
                       cuda::cross_entropy_forward_backward<T>(s.cuda_stream, losses, dlogits, logits, targets, dloss,
                                                               N, V, Vp));
}
}  // namespace trainmem::kernels
