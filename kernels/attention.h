// Naive causal self-attention with the scores and probabilities materialized (B*NH*T*T each):
//   qkv[B, T, 3C] holds q, k, v side by side; head h uses channels [h*hs, (h+1)*hs), hs = C/NH.
//   preatt[b,h,t,u] = q[b,t,h] . k[b,u,h] / sqrt(hs)       for u <= t   (the scores)
//   att[b,h,t,:]    = softmax over u <= t of preatt; 0 for u > t   (the probabilities, saved)
//   out[b,t,h]      = sum_u att[b,h,t,u] v[b,u,h]
// Backward (dqkv written): datt = dout . v;  dpreatt = att * (datt - sum_u att*datt);
//   dq = dpreatt @ k / sqrt(hs);  dk = dpreatt^T @ q / sqrt(hs);  dv = att^T @ dout.
// datt and dpreatt are scratch of B*NH*T*T each (the workspace a naive backward needs).
#pragma once
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH);
template <typename T>
void attention_backward(T* dqkv, T* dpreatt, T* datt, const T* dout, const T* qkv, const T* att, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH);
}  // namespace cpu
namespace cuda {
void attention_forward(void* stream, float* out, float* preatt, float* att, const float* qkv, std::size_t B,
                       std::size_t T, std::size_t C, std::size_t NH);
void attention_backward(void* stream, float* dqkv, float* dpreatt, float* datt, const float* dout, const float* qkv,
                        const float* att, std::size_t B, std::size_t T, std::size_t C, std::size_t NH);
}  // namespace cuda

inline void attention_forward(const Stream& s, float* out, float* preatt, float* att, const float* qkv, std::size_t B,
                              std::size_t T, std::size_t C, std::size_t NH) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::attention_forward(out, preatt, att, qkv, B, T, C, NH);
  TRAINMEM_CUDA_KERNEL("attention_forward", cuda::attention_forward(s.cuda_stream, out, preatt, att, qkv, B, T, C, NH));
}
inline void attention_backward(const Stream& s, float* dqkv, float* dpreatt, float* datt, const float* dout,
                               const float* qkv, const float* att, std::size_t B, std::size_t T, std::size_t C,
                               std::size_t NH) {
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::attention_backward(dqkv, dpreatt, datt, dout, qkv, att, B, T, C, NH);
  TRAINMEM_CUDA_KERNEL("attention_backward", cuda::attention_backward(s.cuda_stream, dqkv, dpreatt, datt, dout, qkv,
                                                                       att, B, T, C, NH));
}
}  // namespace trainmem::kernels
