// CPU reference: naive causal self-attention (formulas in kernels/attention.h). The loops are
// the definition, written to be read: one (batch, head, query row) at a time. Each element is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h). A row's scores,
// probabilities and gradients stay in F while the row is computed and are stored once; dqkv is
// summed in F for one (batch, head) at a time (its slice of dqkv belongs to that head alone) and
// stored once.
#include "kernels/attention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace trainmem::kernels::cpu {

template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH) {
  using F = compute_t<T>;
  const std::size_t hs = C / NH;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  std::vector<F> pre(Tn), a(Tn), o(hs);  // one row of scores and probabilities, one head of out
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        const T* q = qkv + (b * Tn + t) * 3 * C + h * hs;
        // scores for keys u <= t, and their max (for a stable softmax)
        F maxval = -std::numeric_limits<F>::infinity();
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * Tn + u) * 3 * C + C + h * hs;
          F dot = 0;
          for (std::size_t i = 0; i < hs; ++i) dot += load(q[i]) * load(k[i]);
          pre[u] = dot * scale;
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
          const T* v = qkv + (b * Tn + u) * 3 * C + 2 * C + h * hs;
          for (std::size_t i = 0; i < hs; ++i) o[i] += a[u] * load(v[i]);
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

template <typename T>
void attention_backward(T* dqkv, T* dpreatt, T* datt, const T* dout, const T* qkv, const T* att, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH) {
  using F = compute_t<T>;
  const std::size_t hs = C / NH;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  // This head's dq, dk, dv for every time step: acc[(t * 3 + part) * hs + i], part 0 = q, 1 = k, 2 = v.
  std::vector<F> acc(Tn * 3 * hs), da(Tn), dpre(Tn);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h) {
      std::fill(acc.begin(), acc.end(), F(0));
      for (std::size_t t = 0; t < Tn; ++t) {
        const T* a = att + ((b * NH + h) * Tn + t) * Tn;
        const T* d = dout + (b * Tn + t) * C + h * hs;
        // out = att @ v:  datt[u] = dout . v[u];  dv[u] += att[u] * dout
        for (std::size_t u = 0; u < Tn; ++u) da[u] = dpre[u] = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* v = qkv + (b * Tn + u) * 3 * C + 2 * C + h * hs;
          F* dv = &acc[(u * 3 + 2) * hs];
          F dot = 0;
          for (std::size_t i = 0; i < hs; ++i) {
            dot += load(d[i]) * load(v[i]);
            dv[i] += load(a[u]) * load(d[i]);
          }
          da[u] = dot;
        }
        // softmax backward: dpre[u] = att[u] * (datt[u] - sum_w att[w] datt[w])
        F weighted = 0;
        for (std::size_t u = 0; u <= t; ++u) weighted += load(a[u]) * da[u];
        for (std::size_t u = 0; u <= t; ++u) dpre[u] = load(a[u]) * (da[u] - weighted);
        // preatt = q . k * scale:  dq += dpre[u] k[u] scale;  dk[u] += dpre[u] q scale
        const T* q = qkv + (b * Tn + t) * 3 * C + h * hs;
        F* dq = &acc[(t * 3 + 0) * hs];
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * Tn + u) * 3 * C + C + h * hs;
          F* dk = &acc[(u * 3 + 1) * hs];
          for (std::size_t i = 0; i < hs; ++i) {
            dq[i] += dpre[u] * load(k[i]) * scale;
            dk[i] += dpre[u] * load(q[i]) * scale;
          }
        }
        T* da_row = datt + ((b * NH + h) * Tn + t) * Tn;
        T* dpre_row = dpreatt + ((b * NH + h) * Tn + t) * Tn;
        for (std::size_t u = 0; u < Tn; ++u) {
          da_row[u] = store<T>(da[u]);
          dpre_row[u] = store<T>(dpre[u]);
        }
      }
      // this head's slice of dqkv, written once
      for (std::size_t t = 0; t < Tn; ++t)
        for (std::size_t part = 0; part < 3; ++part) {
          T* dst = dqkv + (b * Tn + t) * 3 * C + part * C + h * hs;
          for (std::size_t i = 0; i < hs; ++i) dst[i] = store<T>(acc[(t * 3 + part) * hs + i]);
        }
    }
}

#define TRAINMEM_INSTANTIATE(T)                                                                                   \
  template void attention_forward<T>(T*, T*, T*, const T*, std::size_t, std::size_t, std::size_t, std::size_t);  \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, std::size_t, std::size_t,        \
                                      std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
