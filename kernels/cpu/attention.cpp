// CPU reference: naive causal self-attention (formulas in kernels/attention.h). The loops are
// the definition, written to be read: one (batch, head, query row) at a time.
#include "kernels/attention.h"

#include <cmath>
#include <limits>

namespace trainmem::kernels::cpu {

template <typename T>
void attention_forward(T* out, T* preatt, T* att, const T* qkv, std::size_t B, std::size_t Tn, std::size_t C,
                       std::size_t NH) {
  const std::size_t hs = C / NH;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        const T* q = qkv + (b * Tn + t) * 3 * C + h * hs;
        T* pre = preatt + ((b * NH + h) * Tn + t) * Tn;
        T* a = att + ((b * NH + h) * Tn + t) * Tn;
        // scores for keys u <= t, and their max (for a stable softmax)
        T maxval = -std::numeric_limits<T>::infinity();
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * Tn + u) * 3 * C + C + h * hs;
          T dot = 0;
          for (std::size_t i = 0; i < hs; ++i) dot += q[i] * k[i];
          pre[u] = dot * scale;
          if (pre[u] > maxval) maxval = pre[u];
        }
        T sum = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          a[u] = std::exp(pre[u] - maxval);
          sum += a[u];
        }
        for (std::size_t u = 0; u <= t; ++u) a[u] /= sum;
        for (std::size_t u = t + 1; u < Tn; ++u) a[u] = pre[u] = 0;  // masked: the future
        // out = att @ v
        T* o = out + (b * Tn + t) * C + h * hs;
        for (std::size_t i = 0; i < hs; ++i) o[i] = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* v = qkv + (b * Tn + u) * 3 * C + 2 * C + h * hs;
          for (std::size_t i = 0; i < hs; ++i) o[i] += a[u] * v[i];
        }
      }
}

template <typename T>
void attention_backward(T* dqkv, T* dpreatt, T* datt, const T* dout, const T* qkv, const T* att, std::size_t B,
                        std::size_t Tn, std::size_t C, std::size_t NH) {
  const std::size_t hs = C / NH;
  const T scale = T(1) / std::sqrt(static_cast<T>(hs));
  for (std::size_t i = 0; i < B * Tn * 3 * C; ++i) dqkv[i] = 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < NH; ++h)
      for (std::size_t t = 0; t < Tn; ++t) {
        const T* a = att + ((b * NH + h) * Tn + t) * Tn;
        T* da = datt + ((b * NH + h) * Tn + t) * Tn;
        T* dpre = dpreatt + ((b * NH + h) * Tn + t) * Tn;
        const T* d = dout + (b * Tn + t) * C + h * hs;
        // out = att @ v:  datt[u] = dout . v[u];  dv[u] += att[u] * dout
        for (std::size_t u = 0; u < Tn; ++u) da[u] = dpre[u] = 0;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* v = qkv + (b * Tn + u) * 3 * C + 2 * C + h * hs;
          T* dv = dqkv + (b * Tn + u) * 3 * C + 2 * C + h * hs;
          T dot = 0;
          for (std::size_t i = 0; i < hs; ++i) {
            dot += d[i] * v[i];
            dv[i] += a[u] * d[i];
          }
          da[u] = dot;
        }
        // softmax backward: dpre[u] = att[u] * (datt[u] - sum_w att[w] datt[w])
        T weighted = 0;
        for (std::size_t u = 0; u <= t; ++u) weighted += a[u] * da[u];
        for (std::size_t u = 0; u <= t; ++u) dpre[u] = a[u] * (da[u] - weighted);
        // preatt = q . k * scale:  dq += dpre[u] k[u] scale;  dk[u] += dpre[u] q scale
        const T* q = qkv + (b * Tn + t) * 3 * C + h * hs;
        T* dq = dqkv + (b * Tn + t) * 3 * C + h * hs;
        for (std::size_t u = 0; u <= t; ++u) {
          const T* k = qkv + (b * Tn + u) * 3 * C + C + h * hs;
          T* dk = dqkv + (b * Tn + u) * 3 * C + C + h * hs;
          for (std::size_t i = 0; i < hs; ++i) {
            dq[i] += dpre[u] * k[i] * scale;
            dk[i] += dpre[u] * q[i] * scale;
          }
        }
      }
}

template void attention_forward<float>(float*, float*, float*, const float*, std::size_t, std::size_t, std::size_t,
                                       std::size_t);
template void attention_forward<double>(double*, double*, double*, const double*, std::size_t, std::size_t,
                                        std::size_t, std::size_t);
template void attention_backward<float>(float*, float*, float*, const float*, const float*, const float*, std::size_t,
                                        std::size_t, std::size_t, std::size_t);
template void attention_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         std::size_t, std::size_t, std::size_t, std::size_t);

}  // namespace trainmem::kernels::cpu
