// Token + position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]
// Backward (both accumulated): dwte[tokens[b, t], :] += dout[b, t, :];  dwpe[t, :] += dout[b, t, :]
//
// Storage type T (kernels/dtype.h): float, bf16 or fp16 (and double on the CPU). Each dwte row
// and dwpe row is widened once, every position's dout is added to it in fp32, in position order
// (b, then t), and it is rounded once per call: in 16 bits the CPU result is bit for bit the fp32
// kernel's on the widened inputs, rounded. (The CPU backward groups the positions by token to do
// so; scratch: B*T indices and one row of C fp32 values.)
#pragma once
#include <cstdint>

#include "kernels/dtype.h"
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
template <typename T = float>
void embedding_forward(void* stream, Out<T> out, const std::int32_t* tokens, In<T> wte, In<T> wpe, std::size_t B,
                       std::size_t Tn, std::size_t C);
template <typename T = float>
void embedding_backward(void* stream, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens, std::size_t B,
                        std::size_t Tn, std::size_t C);
}  // namespace cuda

template <typename T = float>
inline void embedding_forward(const Stream& s, Out<T> out, const std::int32_t* tokens, In<T> wte, In<T> wpe,
                              std::size_t B, std::size_t Tn, std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_forward<T>(out, tokens, wte, wpe, B, Tn, C);
  TRAINMEM_CUDA_KERNEL("embedding_forward", cuda::embedding_forward<T>(s.cuda_stream, out, tokens, wte, wpe, B, Tn, C));
}
template <typename T = float>
inline void embedding_backward(const Stream& s, Out<T> dwte, Out<T> dwpe, In<T> dout, const std::int32_t* tokens,
                               std::size_t B, std::size_t Tn, std::size_t C) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::embedding_backward<T>(dwte, dwpe, dout, tokens, B, Tn, C);
  TRAINMEM_CUDA_KERNEL("embedding_backward",
                       cuda::embedding_backward<T>(s.cuda_stream, dwte, dwpe, dout, tokens, B, Tn, C));
}
}  // namespace trainmem::kernels
