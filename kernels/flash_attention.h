// Flash attention (Dao et al. 2022; FlashAttention-2, Dao 2023): exact softmax attention
// without materializing the T x T score matrix.
//
// Layout (the model's): qkv[B, T, 3C] holds q, k, v side by side, C = H*D; head h uses channels
// [h*D, (h+1)*D) of each third. out[B, T, C]. lse[B, H, T] (fp32): the log-sum-exp of each query
// row's scaled scores, the only per-row statistic the backward needs.
//
// Forward, per query tile Q_i (block_q rows) and key/value tiles K_j, V_j (block_k rows):
//   S_ij = Q_i K_j^T / sqrt(D)        (masked to -inf where key > query when causal)
//   m_new = max(m, rowmax(S_ij))
//   P_ij = exp(S_ij - m_new)
//   l    = exp(m - m_new) * l + rowsum(P_ij)
//   O_i  = exp(m - m_new) * O_i + P_ij V_j
//   at the end: O_i /= l,   lse_i = m + log(l)
// Backward, with D_i = rowsum(dO_i * O_i) and P_ij = exp(S_ij - lse_i) rebuilt tile by tile:
//   dV_j += P_ij^T dO_i;   dP_ij = dO_i V_j^T;   dS_ij = P_ij * (dP_ij - D_i)
//   dQ_i += dS_ij K_j / sqrt(D);   dK_j += dS_ij^T Q_i / sqrt(D)
// Causal: tiles with every key after every query are skipped entirely.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/convert.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

struct AttentionShape {
  std::size_t B = 1, T = 1, H = 1, D = 64;  // batch, sequence, heads, head dim (C = H*D)
  bool causal = true;
  std::size_t C() const { return H * D; }
};

namespace cpu {
// The tiled algorithm above, written to be read. T (kernels/dtype.h) is the storage type of qkv,
// out, dout and dqkv: float (training), double (checks), bf16 or fp16; lse is in the compute type
// (fp32; double for double). Scores, probabilities and the running sums live in fp32 tiles (double
// for double); each output is rounded once: dK, dV per key tile, dQ summed in fp32 per (batch,
// head). In 16 bits the result is bit for bit the fp32 version's on the widened inputs, rounded.
template <typename T>
void flash_attention_forward(T* out, compute_t<T>* lse, const T* qkv, const AttentionShape& shape,
                             std::size_t block_q = 32, std::size_t block_k = 32);
// dqkv is written (not accumulated).
template <typename T>
void flash_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const compute_t<T>* lse,
                              const AttentionShape& shape, std::size_t block_q = 32, std::size_t block_k = 32);
// Materialized reference (scores and probabilities as full B*H*T*T arrays, in the compute type),
// causal or not: the "naive" attention of the tests and of the CPU benchmark. Same storage types.
template <typename T>
void attention_reference_forward(T* out, compute_t<T>* lse, const T* qkv, const AttentionShape& shape);
template <typename T>
void attention_reference_backward(T* dqkv, const T* dout, const T* qkv, const AttentionShape& shape);
}  // namespace cpu

namespace cuda {
using Half16 = kernels::Half16;  // 16-bit element type of qkv, out, dout, dqkv (stored as uint16_t)

// The kernel versions, kept side by side as teaching steps (1 = simplest). Every version
// computes the same thing; later ones are faster.
int flash_attention_versions();
const char* flash_attention_version_name(int version);

// qkv, out: 16-bit; lse: fp32 [B, H, T]. Head dims 64 and 128; any T; causal or not.
void flash_attention_forward(void* stream, int version, Half16 dtype, std::uint16_t* out, float* lse,
                             const std::uint16_t* qkv, const AttentionShape& shape);
// Scratch the backward needs (e.g. D = rowsum(dO*O) and an fp32 dQ accumulator), provided by
// the caller so that the allocator sees it (category workspace).
std::size_t flash_attention_backward_workspace_bytes(int version, const AttentionShape& shape);
// dqkv is written (not accumulated).
void flash_attention_backward(void* stream, int version, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                              const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                              const AttentionShape& shape);
}  // namespace cuda

}  // namespace trainmem::kernels
