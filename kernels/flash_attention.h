// Flash attention (Dao et al. 2022; FlashAttention-2, Dao 2023): exact softmax attention
// without materializing the T x T score matrix.
//
// Layout (the model's): qkv[B, T, (H + 2*Hkv)*D] holds the H query heads, the Hkv key heads and
// the Hkv value heads side by side (kernels/attention_heads.h); with Hkv = H (multi-head attention)
// that is qkv[B, T, 3C], C = H*D, head h using channels [h*D, (h+1)*D) of each third. Query head h
// attends with K/V head g = h / (H/Hkv). out[B, T, C]. lse[B, H, T] (fp32): the log-sum-exp of
// each query row's scaled scores, the only per-row statistic the backward needs.
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
// With grouped K/V heads, dK_j and dV_j of K/V head g also sum over the query heads of its group
// (in head order). Causal: tiles with every key after every query are skipped entirely.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/attention_heads.h"
#include "kernels/convert.h"
#include "kernels/kernel_cost.h"
#include "kernels/kernel_stream.h"

namespace trainmem::kernels {

// Hkv, the K/V head count of grouped-query attention, is the last field and defaults to 0, which
// means H (multi-head attention): every shape written before GQA, {B, T, H, D, causal} or field by
// field, keeps its meaning, and an explicit Hkv = H is the same shape. Kernels read it only through
// kv_heads(); each entry point refuses an Hkv that does not divide H (check_kv_heads).
struct AttentionShape {
  std::size_t B = 1, T = 1, H = 1, D = 64;  // batch, sequence, query heads, head dim (C = H*D)
  bool causal = true;
  std::size_t Hkv = 0;  // K/V heads; 0: H
  std::size_t C() const { return H * D; }                                  // a row of out, dout
  std::size_t kv_heads() const { return kv_heads_or_all(H, Hkv); }         // Hkv, resolved
  std::size_t group() const { return kv_heads() == 0 ? 1 : H / kv_heads(); }  // query heads per K/V head
  std::size_t qkv_width() const { return (H + 2 * kv_heads()) * D; }      // a row of qkv, dqkv
};

// The cost of one flash attention call (kernels/kernel_cost.h), whichever implementation runs it
// (the CPU reference, CUDA v1-v3, cuDNN: `name` says which): forward Q K^T and P V; backward
// recomputes P, then dP, dV, dQ, dK. Reads qkv (and out, dout), writes out (dqkv), and the fp32
// log-sum-exp per row; the tiles stay on chip.
template <typename T>
KernelCall flash_attention_cost(const char* name, const AttentionShape& a, bool backward) {
  const double rows = double(a.B) * a.T, qkv = rows * a.qkv_width(), out = rows * a.C(),
               lse = 4.0 * a.B * a.H * a.T;
  return backward ? attention_call<T>(name, a.B, a.T, a.H, a.D, a.causal, 5, 2 * qkv + 2 * out, lse)
                  : attention_call<T>(name, a.B, a.T, a.H, a.D, a.causal, 2, qkv + out, lse);
}

namespace cpu {
// The tiled algorithm above, written to be read. T (kernels/dtype.h) is the storage type of qkv,
// out, dout and dqkv: float (training), double (checks), bf16 or fp16; lse is in the compute type
// (fp32; double for double). Scores, probabilities and the running sums live in fp32 tiles (double
// for double); each output is rounded once: dK, dV summed in fp32 per (batch, K/V head) over the
// group's query heads, dQ per (batch, query head). In 16 bits the result is bit for bit the fp32
// version's on the widened inputs, rounded. All four take grouped K/V heads (shape.Hkv).
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
using Half16 = kernels::Half16;

// The head dims the CUDA kernels are written for (their tiles hold a whole head row).
constexpr bool flash_attention_takes_head_dim(std::size_t D) { return D == 64 || D == 128; }  // 16-bit element type of qkv, out, dout, dqkv (stored as uint16_t)

// The kernel versions, kept side by side as teaching steps (1 = simplest). Every version
// computes the same thing; later ones are faster.
int flash_attention_versions();
const char* flash_attention_version_name(int version);

// qkv, out: 16-bit; lse: fp32 [B, H, T]. Head dims 64 and 128; any T; causal or not; grouped K/V
// heads (shape.Hkv) in every version.
void flash_attention_forward(void* stream, int version, Half16 dtype, std::uint16_t* out, float* lse,
                             const std::uint16_t* qkv, const AttentionShape& shape);
// Scratch the backward needs (e.g. D = rowsum(dO*O) and an fp32 dQ accumulator, both per query
// head; dK and dV need none), provided by the caller so that the allocator sees it (category
// workspace; the formula is kernels/flash_attention_workspace.h).
std::size_t flash_attention_backward_workspace_bytes(int version, const AttentionShape& shape);
// dqkv is written (not accumulated).
void flash_attention_backward(void* stream, int version, Half16 dtype, std::uint16_t* dqkv, const std::uint16_t* dout,
                              const std::uint16_t* qkv, const std::uint16_t* out, const float* lse, void* workspace,
                              const AttentionShape& shape);
}  // namespace cuda

}  // namespace trainmem::kernels
