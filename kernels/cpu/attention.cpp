// CPU reference: naive causal self-attention (formulas in kernels/attention.h), one (batch, head) at
// a time, its products on OpenBLAS (kernels/cpu/blas_gemm.h). For one head, with Q, K, V, dO its
// T x hs blocks of qkv and dout, P its T x T probabilities and s = 1/sqrt(hs):
//
//   forward    S  = s Q K^T                 (the scores; u > t masked afterwards)
//              P  = softmax of each row of S over u <= t, 0 for u > t
//              O  = P V
//   backward   dP = dO V^T                  dV = P^T dO
//              dS = P * (dP - rowsum(P * dP))      (elementwise; the softmax's backward)
//              dQ = s dS K                  dK = s dS^T Q
//
// The products are made by blocks of kCausalBlock query rows, each up to its last key (the rest of
// its rows is masked: P and dS are 0 there), as plain BLAS calls; the softmax rows are our loops.
//
// Grouped K/V heads (kernels/attention_heads.h): query head h reads the K and V blocks of head
// g = h / (NH/NKV) where they are. The backward runs one K/V head at a time and its group's query
// heads in order; dK and dV are the BLAS products' sums over the group (beta = 0 for the first
// query head, 1 for the next ones), kept in F until the group is done.
//
// Compute type F (kernels/dtype.h): fp32, or double for double. float and double are read and written
// in place (a head's block of qkv is T rows of hs values, a qkv row apart). bf16 and fp16 are widened
// into F scratch (exact), computed by the same calls, and each result rounded once when stored: in
// 16 bits, bit for bit the fp32 kernel's result on the widened inputs, rounded. The scratch is the
// host's (outside the emulated device): per thread, one head's inputs and outputs in F.
//
// The (batch, head) pairs of the forward are independent (each writes its own T x T block of
// preatt and att, and its own columns of out), and so are the (batch, K/V head) pairs of the
// backward (each writes its group's blocks of dscores and its own columns of dqkv): they are split
// over the cores (kernels/cpu/parallel_for.h), each product on one OpenBLAS thread
// (blas_threads.h, use_one_blas_thread), so the results do not depend on the thread count.
#include "kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/vector_exp.h"

namespace trainmem::kernels::cpu {

namespace {
// A rows x cols block of a row-major matrix in the compute type F: data[r * ld + c].
template <typename F>
struct Block {
  F* data;
  std::size_t ld;  // elements from one row to the next
};

// The block at src (leading dimension ld) to read: the storage itself when T is F, else a widened
// copy in scratch.
template <typename T>
Block<const compute_t<T>> read_block(const T* src, std::size_t ld, std::size_t rows, std::size_t cols,
                                     std::vector<compute_t<T>>& scratch) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return {src, ld};
  } else {
    scratch.resize(rows * cols);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) scratch[r * cols + c] = load(src[r * ld + c]);
    return {scratch.data(), cols};
  }
}

// The block at dst to write: the storage itself when T is F, else scratch that store_block rounds
// into dst.
template <typename T>
Block<compute_t<T>> write_block(T* dst, std::size_t ld, std::size_t rows, std::size_t cols,
                                std::vector<compute_t<T>>& scratch) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return {dst, ld};
  } else {
    scratch.resize(rows * cols);
    return {scratch.data(), cols};
  }
}
template <typename T>
void store_block(T* dst, std::size_t ld, Block<compute_t<T>> block, std::size_t rows, std::size_t cols) {
  if constexpr (!std::is_same_v<T, compute_t<T>>)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) dst[r * ld + c] = store<T>(block.data[r * block.ld + c]);
}

// One row of the softmax: p[u] = exp(s[u] - max) / sum_w exp(s[w] - max) for u <= t, and the
// masked future p[u] = s[u] = 0 for t < u < Tn (one copy per instruction set: the exp vectorizes).
template <typename F>
TRAINMEM_SIMD_CLONES void softmax_row(F* p, F* s, std::size_t t, std::size_t Tn) {
  F maxval = -std::numeric_limits<F>::infinity();  // subtracted for a stable exp
  for (std::size_t u = 0; u <= t; ++u) maxval = s[u] > maxval ? s[u] : maxval;
  for (std::size_t u = 0; u <= t; ++u) p[u] = exp_of(s[u] - maxval);
  F sum = 0;
  for (std::size_t u = 0; u <= t; ++u) sum += p[u];
  for (std::size_t u = 0; u <= t; ++u) p[u] /= sum;
  for (std::size_t u = t + 1; u < Tn; ++u) p[u] = s[u] = 0;
}

// One row of the softmax's backward, in place: dp[u] becomes p[u] (dp[u] - sum_w p[w] dp[w]) for
// u <= t, and 0 beyond (the masked future).
template <typename F>
TRAINMEM_SIMD_CLONES void softmax_backward_row(F* dp, const F* p, std::size_t t, std::size_t Tn) {
  F weighted = 0;
  for (std::size_t u = 0; u <= t; ++u) weighted += p[u] * dp[u];
  for (std::size_t u = 0; u <= t; ++u) dp[u] = p[u] * (dp[u] - weighted);
  for (std::size_t u = t + 1; u < Tn; ++u) dp[u] = 0;
}

// Rows (queries) per block of the causal products: a block of rows [r0, r0 + R) sees the keys
// u < r0 + R only, so its products stop there; the T x T square costs (1 + 1/n) / 2 of itself
// for n blocks. Fewer, larger blocks make fewer BLAS calls (each costs microseconds).
constexpr std::size_t kCausalBlock = 64;

// One thread's scratch (used by bf16 and fp16 only): a head's blocks in F.
template <typename F>
struct HeadScratch {
  std::vector<F> q, k, v, scores, probs, out, dout, dq, dk, dv;
};

// Where the heads live: a row of qkv (and dqkv) is [q: NH heads | k: NKV heads | v: NKV heads],
// hs values each; out and dout rows are the NH heads' outputs, C = NH*hs. With NKV = NH this is
// qkv[B, Tn, 3C].
struct QkvLayout {
  std::size_t Tn, C, NH, NKV, hs;
  QkvLayout(std::size_t Tn_, std::size_t C_, std::size_t NH_, std::size_t NKV_)
      : Tn(Tn_), C(C_), NH(NH_), NKV(NKV_), hs(C_ / NH_) {}
  std::size_t width() const { return C + 2 * NKV * hs; }   // elements of a qkv row
  std::size_t group() const { return NH / NKV; }            // query heads per K/V head
  std::size_t kv_head(std::size_t h) const { return h / group(); }
  // The first element of head h's q, K/V head g's k or v, of batch b (rows width() apart).
  std::size_t q(std::size_t b, std::size_t h) const { return b * Tn * width() + h * hs; }
  std::size_t k(std::size_t b, std::size_t g) const { return b * Tn * width() + C + g * hs; }
  std::size_t v(std::size_t b, std::size_t g) const { return b * Tn * width() + C + (NKV + g) * hs; }
  // Head h's output in out / dout [B, Tn, C]; its T x T block of preatt, att, dscores.
  std::size_t o(std::size_t b, std::size_t h) const { return b * Tn * C + h * hs; }
  std::size_t scores(std::size_t b, std::size_t h) const { return (b * NH + h) * Tn * Tn; }
};

template <typename T>
void forward_head(T* out, T* preatt, T* att, const T* qkv, std::size_t b, std::size_t h, const QkvLayout& L,
                  HeadScratch<compute_t<T>>& s) {
  using F = compute_t<T>;
  const std::size_t Tn = L.Tn, hs = L.hs, g = L.kv_head(h);
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  const auto q = read_block(qkv + L.q(b, h), L.width(), Tn, hs, s.q);
  const auto k = read_block(qkv + L.k(b, g), L.width(), Tn, hs, s.k);
  const auto v = read_block(qkv + L.v(b, g), L.width(), Tn, hs, s.v);
  T* pre_head = preatt + L.scores(b, h);
  T* att_head = att + L.scores(b, h);
  T* out_head = out + L.o(b, h);
  const auto S = write_block(pre_head, Tn, Tn, Tn, s.scores);
  const auto P = write_block(att_head, Tn, Tn, Tn, s.probs);
  const auto O = write_block(out_head, L.C, Tn, hs, s.out);
  for (std::size_t r0 = 0; r0 < Tn; r0 += kCausalBlock) {
    const std::size_t rows = std::min(kCausalBlock, Tn - r0), keys = r0 + rows;  // rows r0.. see keys < `keys`
    // S[rows, :keys] = s Q[rows] K[:keys]^T
    blas_gemm(false, true, rows, keys, hs, scale, &q.data[r0 * q.ld], q.ld, k.data, k.ld, F(0), &S.data[r0 * S.ld],
              S.ld);
    for (std::size_t t = r0; t < keys; ++t) softmax_row(&P.data[t * P.ld], &S.data[t * S.ld], t, Tn);
    // O[rows] = P[rows, :keys] V[:keys]
    blas_gemm(false, false, rows, hs, keys, F(1), &P.data[r0 * P.ld], P.ld, v.data, v.ld, F(0), &O.data[r0 * O.ld],
              O.ld);
  }
  store_block(pre_head, Tn, S, Tn, Tn);
  store_block(att_head, Tn, P, Tn, Tn);
  store_block(out_head, L.C, O, Tn, hs);
}

// K/V head g of batch b and the query heads of its group, in order: dQ and dS of each query head,
// and dK, dV summed over them (BLAS's beta = 0 for the first, 1 after: the product is added to the
// running sum), stored once at the end.
template <typename T>
void backward_group(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* att, std::size_t b, std::size_t g,
                    const QkvLayout& L, HeadScratch<compute_t<T>>& s) {
  using F = compute_t<T>;
  const std::size_t Tn = L.Tn, hs = L.hs, ld_qkv = L.width();
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  const auto k = read_block(qkv + L.k(b, g), ld_qkv, Tn, hs, s.k);
  const auto v = read_block(qkv + L.v(b, g), ld_qkv, Tn, hs, s.v);
  T* dk_head = dqkv + L.k(b, g);
  T* dv_head = dqkv + L.v(b, g);
  const auto dK = write_block(dk_head, ld_qkv, Tn, hs, s.dk);
  const auto dV = write_block(dv_head, ld_qkv, Tn, hs, s.dv);
  for (std::size_t member = 0; member < L.group(); ++member) {
    const std::size_t h = g * L.group() + member;
    const F beta = member == 0 ? F(0) : F(1);  // dK, dV: first written, then added to
    const auto q = read_block(qkv + L.q(b, h), ld_qkv, Tn, hs, s.q);
    const auto P = read_block(att + L.scores(b, h), Tn, Tn, Tn, s.probs);
    const auto dO = read_block(dout + L.o(b, h), L.C, Tn, hs, s.dout);
    T* ds_head = dscores + L.scores(b, h);
    T* dq_head = dqkv + L.q(b, h);
    const auto dS = write_block(ds_head, Tn, Tn, Tn, s.scores);  // dP first, then dS in place
    const auto dQ = write_block(dq_head, ld_qkv, Tn, hs, s.dq);
    // By blocks of query rows: dP[rows, :keys] = dO[rows] V[:keys]^T; dS = P * (dP - rowsum(P * dP));
    // dQ[rows] = s dS[rows, :keys] K[:keys].
    for (std::size_t r0 = 0; r0 < Tn; r0 += kCausalBlock) {
      const std::size_t rows = std::min(kCausalBlock, Tn - r0), keys = r0 + rows;
      blas_gemm(false, true, rows, keys, hs, F(1), &dO.data[r0 * dO.ld], dO.ld, v.data, v.ld, F(0),
                &dS.data[r0 * dS.ld], dS.ld);
      for (std::size_t t = r0; t < keys; ++t) softmax_backward_row(&dS.data[t * dS.ld], &P.data[t * P.ld], t, Tn);
      blas_gemm(false, false, rows, hs, keys, scale, &dS.data[r0 * dS.ld], dS.ld, k.data, k.ld, F(0),
                &dQ.data[r0 * dQ.ld], dQ.ld);
    }
    // By blocks of keys u (seen by the queries t >= u0): dV[keys] (+)= P[u0:, keys]^T dO[u0:];
    // dK[keys] (+)= s dS[u0:, keys]^T Q[u0:].
    for (std::size_t u0 = 0; u0 < Tn; u0 += kCausalBlock) {
      const std::size_t keys = std::min(kCausalBlock, Tn - u0), queries = Tn - u0;
      blas_gemm(true, false, keys, hs, queries, F(1), &P.data[u0 * P.ld + u0], P.ld, &dO.data[u0 * dO.ld], dO.ld,
                beta, &dV.data[u0 * dV.ld], dV.ld);
      blas_gemm(true, false, keys, hs, queries, scale, &dS.data[u0 * dS.ld + u0], dS.ld, &q.data[u0 * q.ld], q.ld,
                beta, &dK.data[u0 * dK.ld], dK.ld);
    }
    store_block(ds_head, Tn, dS, Tn, Tn);
    store_block(dq_head, ld_qkv, dQ, Tn, hs);
  }
  store_block(dk_head, ld_qkv, dK, Tn, hs);
  store_block(dv_head, ld_qkv, dV, Tn, hs);
}
}  // namespace

template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH, std::size_t NKV) {
  check_kv_heads(NH, NKV, "attention_forward");
  if (NH == 0) return;
  const QkvLayout L(Tn, C, NH, kv_heads_or_all(NH, NKV));
  use_one_blas_thread();
  parallel_for(B * NH, 1, [&](std::size_t bh_begin, std::size_t bh_end) {
    HeadScratch<compute_t<T>> scratch;
    for (std::size_t bh = bh_begin; bh < bh_end; ++bh)
      forward_head(out, preatt, att, qkv, bh / NH, bh % NH, L, scratch);
  });
}

template <typename T>
void attention_backward(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* att, std::size_t B, std::size_t Tn,
                        std::size_t C, std::size_t NH, std::size_t NKV) {
  check_kv_heads(NH, NKV, "attention_backward");
  if (NH == 0) return;
  const QkvLayout L(Tn, C, NH, kv_heads_or_all(NH, NKV));
  use_one_blas_thread();
  parallel_for(B * L.NKV, 1, [&](std::size_t bg_begin, std::size_t bg_end) {
    HeadScratch<compute_t<T>> scratch;
    for (std::size_t bg = bg_begin; bg < bg_end; ++bg)
      backward_group(dqkv, dscores, dout, qkv, att, bg / L.NKV, bg % L.NKV, L, scratch);
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void attention_forward<T>(T*, T*, T*, const T*, std::size_t, std::size_t, std::size_t, std::size_t, \
                                     std::size_t);                                                              \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t, std::size_t,        \
                                      std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
