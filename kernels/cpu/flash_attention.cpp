// CPU reference: flash attention (formulas in kernels/flash_attention.h) and the materialized
// softmax attention it must equal. The loops are the definition, written to be read: one
// (batch, head) at a time, and inside it one tile at a time.
//
// Tiles. Queries are cut into tiles Q_i of block_q rows, keys and values into tiles K_j, V_j of
// block_k rows (the last tile of each is shorter when T is not a multiple). With a causal mask a
// tile (i, j) is one of three kinds:
//   below the diagonal   every key <= every query: computed as is;
//   on the diagonal      some keys after some queries: computed, those scores masked to -inf;
//   above the diagonal   every key after every query (first key > last query): SKIPPED.
// Without a mask every tile is of the first kind.
//
// Memory. The forward keeps, besides out, only lse (one number per query row); its scratch is
// one tile of scores and the running (m, l, unnormalized O) of one query tile. The backward
// rebuilds each tile of probabilities from lse; its scratch is D = rowsum(dO * O) [B, H, T] and a
// few tiles. Nothing of size T x T exists, unlike attention_reference_* at the end of this file.
//
// Grouped K/V heads (kernels/attention_heads.h): query head h reads K/V head g = h / (H/Hkv) where
// it is. The backward runs one (batch, K/V head) at a time, its group's query heads in order, and
// sums dK and dV over them in F; with Hkv = H this is the one-head-at-a-time loop, every sum in
// the same order.
//
// Storage types. qkv, out, dout and dqkv are of the storage type T; every element is loaded into
// the compute type F (fp32, or double for double; kernels/dtype.h). Tiles, m, l, O, D_i and lse
// are in F; each output element is stored once: O at the end of its query tile, dQ (summed over
// the key tiles) at the end of its (batch, query head), dK and dV (summed over the key tiles'
// query tiles and the group's query heads) at the end of their (batch, K/V head).
#include "kernels/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace trainmem::kernels::cpu {
namespace {

// Where row t of batch b lives: query head h's q, K/V head g's k and v in qkv[B, T, W] (W =
// (H + 2 Hkv) D, rows [q heads | k heads | v heads]); head h's o in out or dout [B, T, C]; its
// statistic in lse[B, H, T]. dqkv has qkv's layout.
struct Layout {
  std::size_t Tn, H, Hkv, C, W, D;
  explicit Layout(const AttentionShape& s)
      : Tn(s.T), H(s.H), Hkv(s.kv_heads()), C(s.C()), W(s.qkv_width()), D(s.D) {}
  std::size_t kv(std::size_t h) const { return h / (H / Hkv); }  // the K/V head of query head h
  std::size_t q(std::size_t b, std::size_t h, std::size_t t) const { return (b * Tn + t) * W + h * D; }
  std::size_t k(std::size_t b, std::size_t g, std::size_t t) const { return (b * Tn + t) * W + C + g * D; }
  std::size_t v(std::size_t b, std::size_t g, std::size_t t) const { return (b * Tn + t) * W + C + (Hkv + g) * D; }
  std::size_t o(std::size_t b, std::size_t h, std::size_t t) const { return (b * Tn + t) * C + h * D; }
  std::size_t row(std::size_t b, std::size_t h, std::size_t t) const { return (b * H + h) * Tn + t; }
};

// sum_i a[i] b[i] in F (a, b: stored elements or F values)
template <typename F, typename A, typename B>
F dot(const A* a, const B* b, std::size_t n) {
  F s = 0;
  for (std::size_t i = 0; i < n; ++i) s += load(a[i]) * load(b[i]);
  return s;
}

// y += a * x, y in F
template <typename F, typename X>
void axpy(F* y, F a, const X* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * load(x[i]);
}

// dst[i] = src[i] rounded to the storage type
template <typename T>
void store_row(T* dst, const compute_t<T>* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Flash forward: for each query tile, run over the key tiles keeping per row
//   m = the largest score seen so far,  l = sum of exp(score - m),  O = sum of exp(score - m) v,
// and rescale l and O by exp(m_old - m_new) whenever a tile raises the max. At the end
// O / l is the softmax-weighted sum, and m + log(l) the log-sum-exp.
template <typename T>
void flash_attention_forward(T* out, compute_t<T>* lse, const T* qkv, const AttentionShape& shape, std::size_t block_q,
                             std::size_t block_k) {
  using F = compute_t<T>;
  check_kv_heads(shape.H, shape.Hkv, "flash_attention_forward");
  if (shape.H == 0) return;
  const Layout at(shape);
  const std::size_t Tn = shape.T, D = shape.D;
  const F scale = F(1) / std::sqrt(static_cast<F>(D));
  const F minus_inf = -std::numeric_limits<F>::infinity();
  // The whole scratch: one tile of scores (then probabilities), and per query row m, l, O.
  std::vector<F> S(block_q * block_k), m(block_q), l(block_q), O(block_q * D);

  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t h = 0; h < shape.H; ++h)
      for (std::size_t i0 = 0; i0 < Tn; i0 += block_q) {  // query tile Q_i: rows i0 .. i0+nq-1
        const std::size_t nq = std::min(block_q, Tn - i0), g = at.kv(h);
        std::fill(m.begin(), m.end(), minus_inf);
        std::fill(l.begin(), l.end(), F(0));
        std::fill(O.begin(), O.end(), F(0));

        // Causal: a key tile whose first key j0 is after the last query i0+nq-1 is skipped.
        const std::size_t keys_end = shape.causal ? i0 + nq : Tn;
        for (std::size_t j0 = 0; j0 < keys_end; j0 += block_k) {  // key tile K_j, V_j: rows j0 .. j0+nk-1
          const std::size_t nk = std::min(block_k, Tn - j0);
          const bool diagonal = shape.causal && j0 + nk - 1 > i0;  // some key after some query

          // (1) S_ij = Q_i K_j^T / sqrt(D), -inf where the key u is after the query t
          for (std::size_t r = 0; r < nq; ++r)
            for (std::size_t c = 0; c < nk; ++c) {
              const std::size_t t = i0 + r, u = j0 + c;
              S[r * block_k + c] =
                  diagonal && u > t ? minus_inf : scale * dot<F>(qkv + at.q(b, h, t), qkv + at.k(b, g, u), D);
            }

          for (std::size_t r = 0; r < nq; ++r) {
            F* s = &S[r * block_k];
            F* o = &O[r * D];
            // (2) m_new = max(m, rowmax(S_ij)). Finite: key 0 <= t is in the first tile visited.
            F m_new = m[r];
            for (std::size_t c = 0; c < nk; ++c) m_new = std::max(m_new, s[c]);
            // (3) P_ij = exp(S_ij - m_new)   (exp(-inf) = 0 where masked)
            F row_sum = 0;
            for (std::size_t c = 0; c < nk; ++c) {
              s[c] = std::exp(s[c] - m_new);
              row_sum += s[c];
            }
            // (4) l = exp(m - m_new) * l + rowsum(P_ij);   O_i = exp(m - m_new) * O_i + P_ij V_j
            //     (exp(m - m_new) = 0 on the first tile, where m = -inf: l and O start from 0)
            const F rescale = std::exp(m[r] - m_new);
            l[r] = rescale * l[r] + row_sum;
            for (std::size_t d = 0; d < D; ++d) o[d] *= rescale;
            for (std::size_t c = 0; c < nk; ++c) axpy(o, s[c], qkv + at.v(b, g, j0 + c), D);
            m[r] = m_new;
          }
        }

        // (5) O_i = O_i / l;   lse_i = m + log(l)
        for (std::size_t r = 0; r < nq; ++r) {
          const std::size_t t = i0 + r;
          T* dst = out + at.o(b, h, t);
          for (std::size_t d = 0; d < D; ++d) dst[d] = store<T>(O[r * D + d] / l[r]);
          lse[at.row(b, h, t)] = m[r] + std::log(l[r]);
        }
      }
}

// ---------------------------------------------------------------------------------------------
// Flash backward, in FlashAttention-2's order: the outer loop runs over key tiles, so dK_j and
// dV_j are summed locally and written once; the inner loop over query tiles adds each tile's share
// into dQ_i. With grouped K/V heads that loop nest runs once per query head of the group, adding
// into the same dK and dV of the K/V head (all T rows, written when the group is done). Probabilities
// are rebuilt from lse, P_ij = exp(S_ij - lse_i), which is exactly the forward's softmax (lse_i =
// log of the row's normalizer).
// Softmax backward: dS = P * (dP - rowsum(P * dP)), and rowsum(P * dP) = rowsum(P * (dO V^T))
// = rowsum(dO * (P V)) = rowsum(dO * O) = D_i — computed once per row from O, no T x T needed.
template <typename T>
void flash_attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const compute_t<T>* lse,
                              const AttentionShape& shape, std::size_t block_q, std::size_t block_k) {
  using F = compute_t<T>;
  check_kv_heads(shape.H, shape.Hkv, "flash_attention_backward");
  if (shape.H == 0) return;
  const Layout at(shape);
  const std::size_t Tn = shape.T, D = shape.D, group = shape.group();
  const F scale = F(1) / std::sqrt(static_cast<F>(D));

  // (0) D_i = rowsum(dO_i * O_i), one number per query row [B, H, T] ("Dvec": D is the head dim)
  std::vector<F> Dvec(shape.B * shape.H * Tn);
  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t h = 0; h < shape.H; ++h)
      for (std::size_t t = 0; t < Tn; ++t)
        Dvec[at.row(b, h, t)] = dot<F>(dout + at.o(b, h, t), out + at.o(b, h, t), D);

  // dQ of one (batch, query head), and dK, dV of one (batch, K/V head), all T rows: summed, then
  // stored (dQ[t * D + d]).
  std::vector<F> dQ(Tn * D), dK(Tn * D), dV(Tn * D);
  std::vector<F> P(block_q * block_k), dS(block_q * block_k);

  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t g = 0; g < at.Hkv; ++g) {
      std::fill(dK.begin(), dK.end(), F(0));
      std::fill(dV.begin(), dV.end(), F(0));
      for (std::size_t h = g * group; h < (g + 1) * group; ++h) {  // the group's query heads, in order
        std::fill(dQ.begin(), dQ.end(), F(0));
        for (std::size_t j0 = 0; j0 < Tn; j0 += block_k) {  // key tile K_j, V_j: rows j0 .. j0+nk-1
          const std::size_t nk = std::min(block_k, Tn - j0);
          F* dK_j = &dK[j0 * D];
          F* dV_j = &dV[j0 * D];

          // Causal: a query tile whose last query is before the first key j0 is skipped; the
          // first one kept is the tile that holds query j0.
          const std::size_t queries_begin = shape.causal ? (j0 / block_q) * block_q : 0;
          for (std::size_t i0 = queries_begin; i0 < Tn; i0 += block_q) {  // query tile Q_i: rows i0 .. i0+nq-1
            const std::size_t nq = std::min(block_q, Tn - i0);
            const bool diagonal = shape.causal && j0 + nk - 1 > i0;  // some key after some query

            // (1) P_ij = exp(S_ij - lse_i),  S_ij = Q_i K_j^T / sqrt(D);  0 where the key is after the query
            for (std::size_t r = 0; r < nq; ++r)
              for (std::size_t c = 0; c < nk; ++c) {
                const std::size_t t = i0 + r, u = j0 + c;
                P[r * block_k + c] =
                    diagonal && u > t
                        ? F(0)
                        : std::exp(scale * dot<F>(qkv + at.q(b, h, t), qkv + at.k(b, g, u), D) - lse[at.row(b, h, t)]);
              }

            // (2) dV_j += P_ij^T dO_i
            for (std::size_t r = 0; r < nq; ++r)
              for (std::size_t c = 0; c < nk; ++c) axpy(&dV_j[c * D], P[r * block_k + c], dout + at.o(b, h, i0 + r), D);

            // (3) dP_ij = dO_i V_j^T;   dS_ij = P_ij * (dP_ij - D_i)
            for (std::size_t r = 0; r < nq; ++r)
              for (std::size_t c = 0; c < nk; ++c) {
                const std::size_t t = i0 + r, u = j0 + c;
                const F dP = dot<F>(dout + at.o(b, h, t), qkv + at.v(b, g, u), D);
                dS[r * block_k + c] = P[r * block_k + c] * (dP - Dvec[at.row(b, h, t)]);
              }

            // (4) dQ_i += dS_ij K_j / sqrt(D)        (5) dK_j += dS_ij^T Q_i / sqrt(D)
            for (std::size_t r = 0; r < nq; ++r)
              for (std::size_t c = 0; c < nk; ++c) {
                const std::size_t t = i0 + r, u = j0 + c;
                const F grad = dS[r * block_k + c] * scale;
                axpy(&dQ[t * D], grad, qkv + at.k(b, g, u), D);
                axpy(&dK_j[c * D], grad, qkv + at.q(b, h, t), D);
              }
          }
        }
        // (6) write dQ of this (batch, query head)
        for (std::size_t t = 0; t < Tn; ++t) store_row(dqkv + at.q(b, h, t), &dQ[t * D], D);
      }
      // (7) write dK, dV of this (batch, K/V head), summed over its group
      for (std::size_t u = 0; u < Tn; ++u) {
        store_row(dqkv + at.k(b, g, u), &dK[u * D], D);
        store_row(dqkv + at.v(b, g, u), &dV[u * D], D);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// The materialized reference: the textbook formulas with every T x T array in memory.
//   S = Q K^T / sqrt(D)   (-inf where masked)        [B, H, T, T]
//   P = softmax over each row of S                  [B, H, T, T]
//   O = P V;   lse = log(rowsum(exp S))
// Backward: dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP));
//           dQ = dS K / sqrt(D);  dK = dS^T Q / sqrt(D).
// (Query head h with K/V head g = h / (H/Hkv); dK, dV of g summed over its query heads, in order.)
namespace {

// S and P for every (b, h), and lse. P is indexed [(b*H + h)*T + t][u].
template <typename T>
std::vector<compute_t<T>> reference_probabilities(compute_t<T>* lse, const T* qkv, const AttentionShape& shape) {
  using F = compute_t<T>;
  const Layout at(shape);
  const std::size_t Tn = shape.T, D = shape.D;
  const F scale = F(1) / std::sqrt(static_cast<F>(D));
  const std::size_t rows = shape.B * shape.H * Tn;
  std::vector<F> S(rows * Tn), P(rows * Tn);
  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t h = 0; h < shape.H; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        const std::size_t g = at.kv(h);
        F* s = &S[at.row(b, h, t) * Tn];
        F* p = &P[at.row(b, h, t) * Tn];
        F max = -std::numeric_limits<F>::infinity();
        for (std::size_t u = 0; u < Tn; ++u) {
          const bool masked = shape.causal && u > t;
          s[u] = masked ? -std::numeric_limits<F>::infinity()
                        : scale * dot<F>(qkv + at.q(b, h, t), qkv + at.k(b, g, u), D);
          max = std::max(max, s[u]);
        }
        F sum = 0;  // softmax, with the max subtracted for stability
        for (std::size_t u = 0; u < Tn; ++u) {
          p[u] = std::exp(s[u] - max);  // 0 where masked
          sum += p[u];
        }
        for (std::size_t u = 0; u < Tn; ++u) p[u] /= sum;
        lse[at.row(b, h, t)] = max + std::log(sum);
      }
  return P;
}

}  // namespace

template <typename T>
void attention_reference_forward(T* out, compute_t<T>* lse, const T* qkv, const AttentionShape& shape) {
  using F = compute_t<T>;
  check_kv_heads(shape.H, shape.Hkv, "attention_reference_forward");
  if (shape.H == 0) return;
  const Layout at(shape);
  const std::size_t Tn = shape.T, D = shape.D;
  const std::vector<F> P = reference_probabilities(lse, qkv, shape);
  // O = P V
  std::vector<F> o(D);
  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t h = 0; h < shape.H; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        std::fill(o.begin(), o.end(), F(0));
        for (std::size_t u = 0; u < Tn; ++u)
          axpy(o.data(), P[at.row(b, h, t) * Tn + u], qkv + at.v(b, at.kv(h), u), D);
        store_row(out + at.o(b, h, t), o.data(), D);
      }
}

template <typename T>
void attention_reference_backward(T* dqkv, const T* dout, const T* qkv, const AttentionShape& shape) {
  using F = compute_t<T>;
  check_kv_heads(shape.H, shape.Hkv, "attention_reference_backward");
  if (shape.H == 0) return;
  const Layout at(shape);
  const std::size_t Tn = shape.T, D = shape.D;
  const F scale = F(1) / std::sqrt(static_cast<F>(D));
  // The forward's probabilities, rebuilt (this signature keeps nothing from the forward).
  std::vector<F> lse(shape.B * shape.H * Tn);
  const std::vector<F> P = reference_probabilities(lse.data(), qkv, shape);
  std::vector<F> dP(P.size()), dS(P.size());

  std::vector<F> grad(shape.B * Tn * shape.qkv_width(), F(0));  // dqkv summed in F, stored at the end
  for (std::size_t b = 0; b < shape.B; ++b)
    for (std::size_t h = 0; h < shape.H; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        const std::size_t g = at.kv(h);
        const F* p = &P[at.row(b, h, t) * Tn];
        F* dp = &dP[at.row(b, h, t) * Tn];
        F* ds = &dS[at.row(b, h, t) * Tn];
        const T* dO = dout + at.o(b, h, t);
        // dP = dO V^T;   dV += P^T dO
        for (std::size_t u = 0; u < Tn; ++u) {
          dp[u] = dot<F>(dO, qkv + at.v(b, g, u), D);
          axpy(&grad[at.v(b, g, u)], p[u], dO, D);
        }
        // dS = P * (dP - rowsum(P * dP))
        const F weighted = dot<F>(p, dp, Tn);
        for (std::size_t u = 0; u < Tn; ++u) ds[u] = p[u] * (dp[u] - weighted);
        // dQ = dS K / sqrt(D);   dK += dS^T Q / sqrt(D)
        for (std::size_t u = 0; u < Tn; ++u) {
          axpy(&grad[at.q(b, h, t)], ds[u] * scale, qkv + at.k(b, g, u), D);
          axpy(&grad[at.k(b, g, u)], ds[u] * scale, qkv + at.q(b, h, t), D);
        }
      }
  store_row(dqkv, grad.data(), grad.size());
}

#define TRAINMEM_INSTANTIATE(T)                                                                              \
  template void flash_attention_forward<T>(T*, compute_t<T>*, const T*, const AttentionShape&, std::size_t,       \
                                           std::size_t);                                                         \
  template void flash_attention_backward<T>(T*, const T*, const T*, const T*, const compute_t<T>*,               \
                                            const AttentionShape&, std::size_t, std::size_t);                    \
  template void attention_reference_forward<T>(T*, compute_t<T>*, const T*, const AttentionShape&);              \
  template void attention_reference_backward<T>(T*, const T*, const T*, const AttentionShape&);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
