// CPU reference: the mixture-of-experts kernels (formulas in kernels/moe.h). Each element is loaded
// into the compute type A (fp32, or double for double; kernels/dtype.h), computed there, and each
// output stored once. Work is split over the cores by tokens (kernels/cpu/parallel_for.h: every
// token's outputs are its own, so the bits are one loop's on any number of threads); the sums over
// tokens (the probability sums, the shared gate's dweight) and the plan stay serial, in n order.
//
// The router's exponentials are the library's (std::exp: within 1 ulp; a row has only E of them,
// and exp(x - max) may then underflow to 0 instead of stopping at vector_exp.h's exp(-87)).
#include "kernels/moe.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace trainmem::kernels::cpu {

namespace {
// (Names start with moe/Moe: a unity build may put this file beside the others.)
constexpr std::size_t kMoeMinPerThread = 32768;  // elements (logits, or row elements) per thread at least

// Rows of `per_row` elements each: at least kMoeMinPerThread elements a thread.
std::size_t moe_min_rows(std::size_t per_row) { return kMoeMinPerThread / (per_row > 0 ? per_row : 1) + 1; }

// The router's order of experts: a ranks before b if its probability is larger, or equal with the
// lower index. A NaN probability is taken as -1 (below every probability, which is >= 0), so the
// order is total and the top-k always finds k distinct experts.
template <typename A>
A moe_rank_key(A p) {
  return p == p ? p : A(-1);
}
template <typename A>
bool moe_ranks_before(A key_a, std::size_t a, A key_b, std::size_t b) {
  return key_a > key_b || (key_a == key_b && a < b);
}

// sigma(g) and 1 - sigma(g) from e = exp(-|g|) in (0, 1], which never overflows (as SwiGLU's):
//   r = 1 / (1 + e),   g >= 0:  s = r,  1 - s = e r;     g < 0:  s = e r,  1 - s = r
template <typename A>
void moe_sigmoid(A g, A& s, A& one_minus_s) {
  const A e = std::exp(-std::abs(g));
  const A r = A(1) / (A(1) + e);
  s = g >= A(0) ? r : e * r;
  one_minus_s = g >= A(0) ? e * r : r;
}

void moe_check_shared(const char* op, const void* shared_out, const void* shared_gate) {
  check_moe_shared(op, shared_out != nullptr, shared_gate != nullptr);
}
}  // namespace

// ---------------------------------------------------------------------------------------- router

template <typename T>
void moe_router_forward(compute_t<T>* probs, std::int32_t* experts, compute_t<T>* weights, const T* logits,
                        std::size_t N, std::size_t E, std::size_t k, bool renormalize) {
  using A = compute_t<T>;
  check_moe_top_k("moe_router_forward", E, k);
  parallel_for(N, moe_min_rows(E), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* x = logits + n * E;
      A* p = probs + n * E;
      // softmax: p_e = exp(x_e - m) / sum_i exp(x_i - m), m = max_i x_i (so no exp overflows)
      A m = load(x[0]);
      for (std::size_t e = 1; e < E; ++e)
        if (load(x[e]) > m) m = load(x[e]);
      A sum = 0;
      for (std::size_t e = 0; e < E; ++e) {
        p[e] = std::exp(load(x[e]) - m);  // kept, then divided by the sum
        sum += p[e];
      }
      for (std::size_t e = 0; e < E; ++e) p[e] = p[e] / sum;

      // top-k: pick j is the first expert of the order (moe_ranks_before) among those ranked after
      // pick j - 1; so the picks come largest first, each expert at most once.
      std::int32_t* chosen = experts + n * k;
      A* w = weights + n * k;
      A prev_key = 0;
      std::size_t prev = 0;
      A selected_sum = 0;  // S = sum_j p_j, in j order
      for (std::size_t j = 0; j < k; ++j) {
        bool found = false;
        A best_key = 0;
        std::size_t best = 0;
        for (std::size_t e = 0; e < E; ++e) {
          const A key = moe_rank_key(p[e]);
          if (j > 0 && !moe_ranks_before(prev_key, prev, key, e)) continue;  // picked already
          if (!found || moe_ranks_before(key, e, best_key, best)) {
            found = true;
            best_key = key;
            best = e;
          }
        }
        chosen[j] = static_cast<std::int32_t>(best);
        w[j] = p[best];
        selected_sum += p[best];
        prev_key = best_key;
        prev = best;
      }
      // w_j = p_j / S (renormalize) or p_j, rounded to T as the model's hidden states would hold it
      for (std::size_t j = 0; j < k; ++j) w[j] = load(store<T>(renormalize ? w[j] / selected_sum : w[j]));
    }
  });
}

template <typename T>
void moe_router_backward(T* dlogits, const compute_t<T>* dweights, const compute_t<T>* aux_dprobs,
                         const compute_t<T>* probs, const std::int32_t* experts, std::size_t N, std::size_t E,
                         std::size_t k, bool renormalize) {
  using A = compute_t<T>;
  check_moe_top_k("moe_router_backward", E, k);
  parallel_for(N, moe_min_rows(E), [&](std::size_t begin, std::size_t end) {
    std::vector<A> dp(E);  // d loss / d probs of one row
    for (std::size_t n = begin; n < end; ++n) {
      const A* p = probs + n * E;
      const std::int32_t* chosen = experts + n * k;
      const A* dw = dweights + n * k;
      for (std::size_t e = 0; e < E; ++e) dp[e] = aux_dprobs ? aux_dprobs[e] : A(0);
      if (renormalize) {
        // w_i = p_i / S:  d w_i / d p_j = (delta_ij - w_i) / S,  so  dp_j += (dw_j - sum_i dw_i w_i) / S
        A S = 0;
        for (std::size_t j = 0; j < k; ++j) S += p[chosen[j]];
        A dot = 0;
        for (std::size_t i = 0; i < k; ++i) dot += dw[i] * (p[chosen[i]] / S);
        for (std::size_t j = 0; j < k; ++j) dp[chosen[j]] += (dw[j] - dot) / S;
      } else {
        for (std::size_t j = 0; j < k; ++j) dp[chosen[j]] += dw[j];  // w_j = p_j
      }
      // softmax backward: dlogits_e = p_e (dp_e - sum_i p_i dp_i)
      A dot = 0;
      for (std::size_t e = 0; e < E; ++e) dot += p[e] * dp[e];
      T* d = dlogits + n * E;
      for (std::size_t e = 0; e < E; ++e) d[e] = store<T>(p[e] * (dp[e] - dot));
    }
  });
}

template <typename A>
void moe_expert_prob_sums(A* sums, const A* probs, std::size_t N, std::size_t E) {
  // One running double per expert, the rows added in order: the result depends on the values alone.
  std::vector<double> acc(E, 0.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t e = 0; e < E; ++e) acc[e] += static_cast<double>(probs[n * E + e]);
  for (std::size_t e = 0; e < E; ++e) sums[e] = static_cast<A>(acc[e]);
}

// ---------------------------------------------------------------------------------------- plan

void moe_plan(std::int32_t* rows, std::int32_t* counts, const std::int32_t* experts, std::size_t N, std::size_t E,
              std::size_t k) {
  check_moe_rows("moe_plan", N, k);
  const std::size_t assignments = N * k;
  // counts[e], checking every id first (nothing is written for a bad routing but counts)
  for (std::size_t e = 0; e < E; ++e) counts[e] = 0;
  for (std::size_t i = 0; i < assignments; ++i) {
    const std::int32_t e = experts[i];
    if (e < 0 || static_cast<std::size_t>(e) >= E)
      throw std::invalid_argument("moe_plan: assignment " + std::to_string(i) + " (token " + std::to_string(i / k) +
                                  ") names expert " + std::to_string(e) + " of " + std::to_string(E));
    ++counts[e];
  }
  // next[e] = offset[e] + the assignments of e placed so far; (n, j) visited in order n, then j
  std::vector<std::int64_t> next(E);
  std::int64_t offset = 0;
  for (std::size_t e = 0; e < E; ++e) {
    next[e] = offset;
    offset += counts[e];
  }
  for (std::size_t i = 0; i < assignments; ++i) rows[i] = static_cast<std::int32_t>(next[experts[i]]++);
}

// ---------------------------------------------------------------------------------------- dispatch

template <typename T>
void moe_dispatch(T* grouped, const T* x, const std::int32_t* rows, std::size_t N, std::size_t k, std::size_t C) {
  parallel_for(N, moe_min_rows(k * C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n)
      for (std::size_t j = 0; j < k; ++j) {
        T* g = grouped + static_cast<std::size_t>(rows[n * k + j]) * C;
        const T* xr = x + n * C;
        for (std::size_t c = 0; c < C; ++c) g[c] = xr[c];  // a copy, in the storage type
      }
  });
}

template <typename T>
void moe_dispatch_backward(T* dx, const T* dgrouped, const std::int32_t* rows, std::size_t N, std::size_t k,
                           std::size_t C) {
  using A = compute_t<T>;
  parallel_for(N, moe_min_rows(k * C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n)
      for (std::size_t c = 0; c < C; ++c) {
        // dx[n,c] = sum_j dgrouped[rows[n,j], c], j in order
        A sum = 0;
        for (std::size_t j = 0; j < k; ++j) sum += load(dgrouped[static_cast<std::size_t>(rows[n * k + j]) * C + c]);
        dx[n * C + c] = store<T>(sum);
      }
  });
}

// ---------------------------------------------------------------------------------------- combine

template <typename T>
void moe_combine(T* out, const T* residual, const T* expert_out, const compute_t<T>* weights, const std::int32_t* rows,
                 const T* shared_out, const T* shared_gate, std::size_t N, std::size_t k, std::size_t C) {
  using A = compute_t<T>;
  moe_check_shared("moe_combine", shared_out, shared_gate);
  parallel_for(N, moe_min_rows((k + 1) * C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      A s = 0, one_minus_s = 0;
      if (shared_out) moe_sigmoid(load(shared_gate[n]), s, one_minus_s);
      for (std::size_t c = 0; c < C; ++c) {
        // y = sum_j w_j expert_out[rows[n,j], c] (+ s shared_out[n,c]);  out = residual + y
        A y = 0;
        for (std::size_t j = 0; j < k; ++j)
          y += weights[n * k + j] * load(expert_out[static_cast<std::size_t>(rows[n * k + j]) * C + c]);
        if (shared_out) y += s * load(shared_out[n * C + c]);
        out[n * C + c] = store<T>(load(residual[n * C + c]) + y);  // out may be residual: read first
      }
    }
  });
}

template <typename T>
void moe_combine_backward(T* dexpert_out, compute_t<T>* dweights, T* dshared, T* dshared_gate, const T* dout,
                          const T* expert_out, const compute_t<T>* weights, const std::int32_t* rows,
                          const T* shared_out, const T* shared_gate, std::size_t N, std::size_t k, std::size_t C) {
  using A = compute_t<T>;
  moe_check_shared("moe_combine_backward", shared_out, shared_gate);
  moe_check_shared("moe_combine_backward", shared_out, dshared);
  moe_check_shared("moe_combine_backward", shared_out, dshared_gate);
  parallel_for(N, moe_min_rows((k + 1) * C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const T* d = dout + n * C;
      for (std::size_t j = 0; j < k; ++j) {
        const std::size_t r = static_cast<std::size_t>(rows[n * k + j]);
        // dweights[n,j] = sum_c dout[n,c] expert_out[r,c]: the whole row is read here, before the
        // loop below may overwrite it (dexpert_out == expert_out)
        A dot = 0;
        for (std::size_t c = 0; c < C; ++c) dot += load(d[c]) * load(expert_out[r * C + c]);
        dweights[n * k + j] = dot;
        const A w = weights[n * k + j];
        for (std::size_t c = 0; c < C; ++c) dexpert_out[r * C + c] = store<T>(w * load(d[c]));
      }
      if (shared_out) {
        A s, one_minus_s;
        moe_sigmoid(load(shared_gate[n]), s, one_minus_s);
        // d gate logit = s (1 - s) sum_c dout shared_out (the row read before dshared overwrites it)
        A dot = 0;
        for (std::size_t c = 0; c < C; ++c) dot += load(d[c]) * load(shared_out[n * C + c]);
        dshared_gate[n] = store<T>((s * one_minus_s) * dot);
        for (std::size_t c = 0; c < C; ++c) dshared[n * C + c] = store<T>(s * load(d[c]));
      }
    }
  });
}

// ---------------------------------------------------------------------------------------- shared gate

template <typename T>
void moe_shared_gate_forward(T* logits, const T* x, const T* weight, std::size_t N, std::size_t C) {
  using A = compute_t<T>;
  parallel_for(N, moe_min_rows(C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      A dot = 0;  // logits[n] = sum_c x[n,c] weight[c]
      for (std::size_t c = 0; c < C; ++c) dot += load(x[n * C + c]) * load(weight[c]);
      logits[n] = store<T>(dot);
    }
  });
}

template <typename T>
void moe_shared_gate_backward(T* dx, T* dweight, const T* dlogits, const T* x, const T* weight, std::size_t N,
                              std::size_t C) {
  using A = compute_t<T>;
  // dweight[c] += sum_n dlogits[n] x[n,c]: a sum over tokens, so serial in n (one running sum per
  // column, the rows read in order), the old value added to the sum and rounded once. Before dx:
  // x is only read.
  std::vector<A> sum(C, A(0));
  for (std::size_t n = 0; n < N; ++n) {
    const A g = load(dlogits[n]);
    for (std::size_t c = 0; c < C; ++c) sum[c] += g * load(x[n * C + c]);
  }
  for (std::size_t c = 0; c < C; ++c) dweight[c] = store<T>(load(dweight[c]) + sum[c]);
  // dx[n,c] += dlogits[n] weight[c] (elementwise: split over the cores)
  parallel_for(N, moe_min_rows(C), [&](std::size_t begin, std::size_t end) {
    for (std::size_t n = begin; n < end; ++n) {
      const A g = load(dlogits[n]);
      for (std::size_t c = 0; c < C; ++c) dx[n * C + c] = store<T>(load(dx[n * C + c]) + g * load(weight[c]));
    }
  });
}

#define TRAINMEM_INSTANTIATE(T)                                                                                     \
  template void moe_router_forward<T>(compute_t<T>*, std::int32_t*, compute_t<T>*, const T*, std::size_t,          \
                                      std::size_t, std::size_t, bool);                                             \
  template void moe_router_backward<T>(T*, const compute_t<T>*, const compute_t<T>*, const compute_t<T>*,          \
                                       const std::int32_t*, std::size_t, std::size_t, std::size_t, bool);          \
  template void moe_dispatch<T>(T*, const T*, const std::int32_t*, std::size_t, std::size_t, std::size_t);         \
  template void moe_dispatch_backward<T>(T*, const T*, const std::int32_t*, std::size_t, std::size_t, std::size_t); \
  template void moe_combine<T>(T*, const T*, const T*, const compute_t<T>*, const std::int32_t*, const T*,         \
                               const T*, std::size_t, std::size_t, std::size_t);                                   \
  template void moe_combine_backward<T>(T*, compute_t<T>*, T*, T*, const T*, const T*, const compute_t<T>*,        \
                                        const std::int32_t*, const T*, const T*, std::size_t, std::size_t,         \
                                        std::size_t);                                                              \
  template void moe_shared_gate_forward<T>(T*, const T*, const T*, std::size_t, std::size_t);                      \
  template void moe_shared_gate_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE
template void moe_expert_prob_sums<float>(float*, const float*, std::size_t, std::size_t);
template void moe_expert_prob_sums<double>(double*, const double*, std::size_t, std::size_t);

}  // namespace trainmem::kernels::cpu
