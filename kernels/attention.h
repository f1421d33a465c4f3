// Naive causal self-attention with the scores and probabilities materialized (B*NH*T*T each):
//   qkv[B, T, C + 2*NKV*hs] holds the NH query heads, the NKV key heads and the NKV value heads
//   side by side (kernels/attention_heads.h), hs = C/NH; query head h uses K/V head
//   g = h / (NH/NKV). NKV = NH (or 0, the default) is multi-head attention: qkv[B, T, 3C], head h
//   using channels [h*hs, (h+1)*hs) of each third.
//   preatt[b,h,t,u] = q[b,t,h] . k[b,u,g] / sqrt(hs)       for u <= t   (the scores)
//   att[b,h,t,:]    = softmax over u <= t of preatt; 0 for u > t   (the probabilities, saved)
//   out[b,t,h]      = sum_u att[b,h,t,u] v[b,u,g]
// Backward (dqkv written): datt = dout . v;  dpreatt = att * (datt - sum_u att*datt);
//   dq = dpreatt @ k / sqrt(hs);  dk_g = sum_{h in g} dpreatt_h^T @ q_h / sqrt(hs);
//   dv_g = sum_{h in g} att_h^T @ dout_h   (the group's query heads added in head order).
// `dscores` is the one scratch of B*NH*T*T the naive backward needs: it holds datt, and then, in
// place, dpreatt (each row's sum is taken before the row is overwritten), which it holds on
// return. One buffer, not two: the probabilities' gradient is dead once the scores' is made.
// An NKV that does not divide NH is refused (std::invalid_argument).
//
// Storage type T (kernels/dtype.h) for every array: float, bf16 or fp16 (and double on the CPU).
// CPU: each (batch, head)'s products on OpenBLAS (sgemm; dgemm for double) and its softmax rows
// in fp32 (double for double); in 16 bits the inputs are widened to fp32, computed by the same
// calls and each output rounded once when stored: bit for bit the fp32 kernel's result on the
// widened inputs, rounded. dk and dv of a K/V head are summed over its group in fp32 and rounded
// once. Private host scratch (outside the emulated device), per thread and only in 16 bits: one
// head's q, k, v, dout, dq, dk, dv (T*hs values each), and its scores, probabilities and their
// gradient (T*T each).
// CUDA: the GEMMs (cuBLAS, fp32 accumulation) write preatt, out, dqkv, datt in the
// storage type, and the softmax kernels read those rounded values back: in 16 bits that is one
// more rounding per chained step than on the CPU (a few units in the last 16-bit place). dk and
// dv of a K/V head are summed over its group by one GEMM per group member (beta = 1 after the
// first), so in 16 bits the running sum is rounded once per member.
#pragma once
#include "kernels/attention_heads.h"
#include "kernels/dtype.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {
namespace cpu {
template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH, std::size_t NKV = 0);
template <typename T>
void attention_backward(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* att, std::size_t B, std::size_t Tn,
                        std::size_t C, std::size_t NH, std::size_t NKV = 0);
}  // namespace cpu
namespace cuda {
template <typename T = float>
void attention_forward(void* stream, Out<T> out, Out<T> preatt, Out<T> att, In<T> qkv, std::size_t B, std::size_t Tn,
                       std::size_t C, std::size_t NH, std::size_t NKV = 0);
template <typename T = float>
void attention_backward(void* stream, Out<T> dqkv, Out<T> dscores, In<T> dout, In<T> qkv, In<T> att, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV = 0);
}  // namespace cuda

template <typename T = float>
inline void attention_forward(const Stream& s, Out<T> out, Out<T> preatt, Out<T> att, In<T> qkv, std::size_t B,
                              std::size_t Tn, std::size_t C, std::size_t NH, std::size_t NKV = 0) {
  check_kv_heads(NH, NKV, "attention_forward");  // on meta too: a shape no backend can run
  // Q K^T and P V under the causal mask. Its B*H*Tn^2 matrices go through device memory (the
  // kernel_cost.h convention): the scores written by Q K^T and read back by the softmax, the
  // probabilities written by it and read back by P V (4 of them); qkv read, out written.
  const double qkv_elements = double(B) * Tn * (NH + 2 * kv_heads_or_all(NH, NKV)) * (C / NH), scores = double(B) * NH * Tn * Tn;
  KernelCost cost(s, attention_call<T>("attention_forward", B, Tn, NH, C / NH, true, 2, qkv_elements + 4 * scores + double(B) * Tn * C));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::attention_forward<T>(out, preatt, att, qkv, B, Tn, C, NH, NKV);
  TRAINMEM_CUDA_KERNEL("attention_forward",
                       cuda::attention_forward<T>(s.cuda_stream, out, preatt, att, qkv, B, Tn, C, NH, NKV));
}
template <typename T = float>
inline void attention_backward(const Stream& s, Out<T> dqkv, Out<T> dscores, In<T> dout, In<T> qkv, In<T> att,
                               std::size_t B, std::size_t Tn, std::size_t C, std::size_t NH,
                               std::size_t NKV = 0) {
  check_kv_heads(NH, NKV, "attention_backward");
  // dP = dout V^T, dV = P^T dout, dQ = dS K, dK = dS^T Q. Its B*H*Tn^2 matrices through device
  // memory: the probabilities read by dV's product and by the softmax's backward (2); dscores
  // written by dP's product, read and rewritten in place by the softmax's backward, read by dQ's
  // and dK's products (5). qkv and dout read, dqkv written.
  const double qkv_elements = double(B) * Tn * (NH + 2 * kv_heads_or_all(NH, NKV)) * (C / NH), scores = double(B) * NH * Tn * Tn;
  KernelCost cost(s, attention_call<T>("attention_backward", B, Tn, NH, C / NH, true, 4, 2 * qkv_elements + 7 * scores + double(B) * Tn * C));
  if (s.backend == Backend::meta) return;
  if (s.backend == Backend::cpu) return cpu::attention_backward<T>(dqkv, dscores, dout, qkv, att, B, Tn, C, NH, NKV);
  TRAINMEM_CUDA_KERNEL("attention_backward",
                       cuda::attention_backward<T>(s.cuda_stream, dqkv, dscores, dout, qkv, att, B, Tn, C, NH, NKV));
}
}  // namespace trainmem::kernels
