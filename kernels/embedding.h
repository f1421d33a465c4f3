// Token + position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// Backward (both accumulated): dwte[tokens[b, t], :] += dout[b, t, :];  dwpe[t, :] += dout[b, t, :]
#pragma once
#include <cstdint>

#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::size_t B, std::size_t Tn,
                       std::size_t C);
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t B, std::size_t Tn,
                        std::size_t C);
}  // namespace cpu
namespace cuda {
void embedding_forward(void* stream, float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                       std::size_t B, std::size_t T, std::size_t C);
void embedding_backward(void* stream, float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                        std::size_t B, std::size_t T, std::size_t C);
}  // namespace cuda

inline void embedding_forward(const Stream& s, float* out, const std::int32_t* tokens, const float* wte,
                              const float* wpe, std::size_t B, std::size_t T, std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  TRAINMEM_CUDA_KERNEL("embedding_forward", cuda::embedding_forward(s.cuda_stream, out, tokens, wte, wpe, B, T, C));
}
inline void embedding_backward(const Stream& s, float* dwte, float* dwpe, const float* dout,
                               const std::int32_t* tokens, std::size_t B, std::size_t T, std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  TRAINMEM_CUDA_KERNEL("embedding_backward",
                       cuda::embedding_backward(s.cuda_stream, dwte, dwpe, dout, tokens, B, T, C));
}
}  // namespace trainmem::kernels
