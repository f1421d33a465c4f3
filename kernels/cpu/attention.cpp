// CPU reference: naive causal self-attention (formulas in kernels/attention.h). The loops are
// the definition, written to be read: one (batch, head, query row) at a time. Each element is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h). A row's scores,
// probabilities and gradients stay in F while the row is computed and are stored once; dqkv is
// summed in F for one (batch, head) at a time (its slice of dqkv belongs to that head alone) and
// stored once. Each (batch, head)'s q, k and v are widened once into host scratch of 3*T*hs values
// (exact, so the results are the same bits as loading them in the inner loops, which converted
// each 16-bit value T times over: fp16 ran 3x slower). The (batch, head) pairs are independent
// (each writes its own rows of att and its own columns of out and dqkv): they are split over the
// cores (kernels/cpu/parallel_for.h), each thread with its own scratch: the same bits as one loop.
// The dot products q . k[u] and dout . v[u] are made for every key u at once from k and v
// transposed (one row per feature i): each is still summed over i in order, the same bits as one
// dot at a time, and the loop over u vectorizes. Each head's backward is compiled per instruction
// set (kernels/cpu/simd_clones.h: 4, 8 or 16 floats a vector, the same bits).
#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"

namespace trainmem::kernels::cpu {

namespace {
// One (batch, head)'s q, k and v rows, widened to the compute type: row t of part p (0 q, 1 k,
// 2 v) at heads[p][t * hs ...].
template <typename T>
void widen_head(std::vector<compute_t<T>> (&heads)[3], const T* qkv, std::size_t b, std::size_t h, std::size_t Tn,
                std::size_t C, std::size_t hs) {
  for (std::size_t part = 0; part < 3; ++part) {
    heads[part].resize(Tn * hs);
    for (std::size_t t = 0; t < Tn; ++t) {
      const T* row = qkv + (b * Tn + t) * 3 * C + part * C + h * hs;
      for (std::size_t i = 0; i < hs; ++i) heads[part][t * hs + i] = load(row[i]);
    }
  }
}

// dst[i * Tn + u] = src[u * hs + i]: a head's keys or values, one row per feature.
template <typename F>
void transpose_head(std::vector<F>& dst, const std::vector<F>& src, std::size_t Tn, std::size_t hs) {
  dst.resize(hs * Tn);
  for (std::size_t u = 0; u < Tn; ++u)
    for (std::size_t i = 0; i < hs; ++i) dst[i * Tn + u] = src[u * hs + i];
}

// dots[u] = x . rows[u] for u < count, rows given transposed (rows_t[i * Tn + u]); each summed
// over i in order.
template <typename F>
void dots_with_rows(F* dots, const F* x, const std::vector<F>& rows_t, std::size_t count, std::size_t Tn,
                    std::size_t hs) {
  for (std::size_t u = 0; u < count; ++u) dots[u] = 0;
  for (std::size_t i = 0; i < hs; ++i) {
    const F xi = x[i];
    const F* column = &rows_t[i * Tn];
    for (std::size_t u = 0; u < count; ++u) dots[u] += xi * column[u];
  }
}

// One thread's scratch for the backward: this head's dq, dk, dv for every time step
// (acc[(t * 3 + part) * hs + i], part 0 = q, 1 = k, 2 = v); one row of datt and dpreatt; one row
// of att and of dout, widened; this head's q, k, v widened, and v transposed.
template <typename T>
struct BackwardScratch {
  BackwardScratch(std::size_t Tn, std::size_t hs) : acc(Tn * 3 * hs), da(Tn), dpre(Tn), a(Tn), d(hs) {}
  std::vector<compute_t<T>> acc, da, dpre, a, d, heads[3], v_t;
};

// One (batch, head) of the backward, with one thread's scratch (one copy per instruction set).
template <typename T>
TRAINMEM_SIMD_CLONES void backward_head(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* att,
                                        std::size_t b, std::size_t h, std::size_t Tn, std::size_t C,
                                        std::size_t NH, BackwardScratch<T>& s) {
  using F = compute_t<T>;
  const std::size_t hs = C / NH;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  std::vector<F>&acc = s.acc, &da = s.da, &dpre = s.dpre, &a = s.a, &d = s.d;
  std::fill(acc.begin(), acc.end(), F(0));
  widen_head(s.heads, qkv, b, h, Tn, C, hs);
  transpose_head(s.v_t, s.heads[2], Tn, hs);
  for (std::size_t t = 0; t < Tn; ++t) {
    const T* att_row = att + ((b * NH + h) * Tn + t) * Tn;
    const T* dout_row = dout + (b * Tn + t) * C + h * hs;
    for (std::size_t u = 0; u <= t; ++u) a[u] = load(att_row[u]);
    for (std::size_t i = 0; i < hs; ++i) d[i] = load(dout_row[i]);
    // out = att @ v:  datt[u] = dout . v[u];  dv[u] += att[u] * dout
    for (std::size_t u = 0; u < Tn; ++u) da[u] = dpre[u] = 0;
    dots_with_rows(da.data(), d.data(), s.v_t, t + 1, Tn, hs);
    for (std::size_t u = 0; u <= t; ++u) {
      F* dv = &acc[(u * 3 + 2) * hs];
      for (std::size_t i = 0; i < hs; ++i) dv[i] += a[u] * d[i];
    }
    // softmax backward: dpre[u] = att[u] * (datt[u] - sum_w att[w] datt[w])
    F weighted = 0;
    for (std::size_t u = 0; u <= t; ++u) weighted += a[u] * da[u];
    for (std::size_t u = 0; u <= t; ++u) dpre[u] = a[u] * (da[u] - weighted);
    // preatt = q . k * scale:  dq += dpre[u] k[u] scale;  dk[u] += dpre[u] q scale
    const F* q = &s.heads[0][t * hs];
    F* dq = &acc[(t * 3 + 0) * hs];
    for (std::size_t u = 0; u <= t; ++u) {
      const F* k = &s.heads[1][u * hs];
      F* dk = &acc[(u * 3 + 1) * hs];
      for (std::size_t i = 0; i < hs; ++i) {
        dq[i] += dpre[u] * k[i] * scale;
        dk[i] += dpre[u] * q[i] * scale;
      }
    }
    // the row of dscores ends as dpreatt's (the row's datt lived in `da` only)
    T* dscores_row = dscores + ((b * NH + h) * Tn + t) * Tn;
    for (std::size_t u = 0; u < Tn; ++u) dscores_row[u] = store<T>(dpre[u]);
  }
  // this head's slice of dqkv, written once
  for (std::size_t t = 0; t < Tn; ++t)
    for (std::size_t part = 0; part < 3; ++part) {
      T* dst = dqkv + (b * Tn + t) * 3 * C + part * C + h * hs;
      for (std::size_t i = 0; i < hs; ++i) dst[i] = store<T>(acc[(t * 3 + part) * hs + i]);
    }
}
}  // namespace

template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH) {
  using F = compute_t<T>;
  const std::size_t hs = C / NH;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  parallel_for(B * NH, 1, [&](std::size_t bh_begin, std::size_t bh_end) {
    std::vector<F> pre(Tn), a(Tn), o(hs);  // one row of scores and probabilities, one head of out
    std::vector<F> heads[3], k_t;           // this head's q, k, v, widened; k transposed
    for (std::size_t bh = bh_begin; bh < bh_end; ++bh) {
      const std::size_t b = bh / NH, h = bh % NH;
      widen_head(heads, qkv, b, h, Tn, C, hs);
      transpose_head(k_t, heads[1], Tn, hs);
      for (std::size_t t = 0; t < Tn; ++t) {
        const F* q = &heads[0][t * hs];
        // scores for keys u <= t, and their max (for a stable softmax)
        dots_with_rows(pre.data(), q, k_t, t + 1, Tn, hs);
        F maxval = -std::numeric_limits<F>::infinity();
        for (std::size_t u = 0; u <= t; ++u) {
          pre[u] *= scale;
          if (pre[u] > maxval) maxval = pre[u];
        }
        F sum = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          a[u] = std::exp(pre[u] - maxval);
          sum += a[u];
        }
        for (std::size_t u = 0; u <= t; ++u) a[u] /= sum;
        for (std::size_t u = t + 1; u < Tn; ++u) a[u] = pre[u] = 0;  // masked: the future
        // out = att @ v
        for (std::size_t i = 0; i < hs; ++i) o[i] = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          const F* v = &heads[2][u * hs];
          for (std::size_t i = 0; i < hs; ++i) o[i] += a[u] * v[i];
        }
        T* pre_row = preatt + ((b * NH + h) * Tn + t) * Tn;
        T* att_row = att + ((b * NH + h) * Tn + t) * Tn;
        for (std::size_t u = 0; u < Tn; ++u) {
          pre_row[u] = store<T>(pre[u]);
          att_row[u] = store<T>(a[u]);
        }
        T* out_row = out + (b * Tn + t) * C + h * hs;
        for (std::size_t i = 0; i < hs; ++i) out_row[i] = store<T>(o[i]);
      }
    }
  });
}

template <typename T>
void attention_backward(T* dqkv, T* dscores, const T* dout, const T* qkv, const T* att, std::size_t B, std::size_t Tn,
                        std::size_t C, std::size_t NH) {
  parallel_for(B * NH, 1, [&](std::size_t bh_begin, std::size_t bh_end) {
    BackwardScratch<T> scratch(Tn, C / NH);
    for (std::size_t bh = bh_begin; bh < bh_end; ++bh)
      backward_head(dqkv, dscores, dout, qkv, att, bh / NH, bh % NH, Tn, C, NH, scratch);
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void attention_forward<T>(T*, T*, T*, const T*, std::size_t, std::size_t, std::size_t, std::size_t);  \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t, std::size_t,        \
                                      std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
