// CPU reference: token + position embedding (formulas in kernels/embedding.h). Each element is
// loaded into the compute type F (fp32, or double for double; kernels/dtype.h) and each output
// stored once.
#include "kernels/embedding.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace trainmem::kernels::cpu {

template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::size_t B, std::size_t Tn,
                       std::size_t C) {
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < Tn; ++t) {
      T* o = out + (b * Tn + t) * C;
      const T* tok = wte + static_cast<std::size_t>(tokens[b * Tn + t]) * C;
      if (wpe == nullptr) {  // no position table (Llama: RoPE): the token row, copied
        for (std::size_t c = 0; c < C; ++c) o[c] = tok[c];
        continue;
      }
      const T* pos = wpe + t * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = store<T>(load(tok[c]) + load(pos[c]));
    }
}

// Each gradient row is summed in F from its old value, adding the positions that use it in
// position order p = b*Tn + t, and stored once. For dwte the positions are first grouped by token
// (a stable sort keeps each token's positions in order), so a row used by several positions is
// rounded once, not once per position.
template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t B, std::size_t Tn,
                        std::size_t C) {
  using F = compute_t<T>;
  const std::size_t positions = B * Tn;
  std::vector<F> acc(C);

  // dwte[tokens[p], :] += dout[p, :]
  std::vector<std::size_t> by_token(positions);
  std::iota(by_token.begin(), by_token.end(), std::size_t{0});
  std::stable_sort(by_token.begin(), by_token.end(),
                   [&](std::size_t p, std::size_t q) { return tokens[p] < tokens[q]; });
  for (std::size_t i = 0; i < positions;) {
    const std::int32_t token = tokens[by_token[i]];
    T* row = dwte + static_cast<std::size_t>(token) * C;
    for (std::size_t c = 0; c < C; ++c) acc[c] = load(row[c]);
    for (; i < positions && tokens[by_token[i]] == token; ++i) {
      const T* d = dout + by_token[i] * C;
      for (std::size_t c = 0; c < C; ++c) acc[c] += load(d[c]);
    }
    for (std::size_t c = 0; c < C; ++c) row[c] = store<T>(acc[c]);
  }

  // dwpe[t, :] += sum over b of dout[b, t, :]
  if (dwpe == nullptr) return;  // no position table
  for (std::size_t t = 0; t < Tn; ++t) {
    T* row = dwpe + t * C;
    for (std::size_t c = 0; c < C; ++c) acc[c] = load(row[c]);
    for (std::size_t b = 0; b < B; ++b) {
      const T* d = dout + (b * Tn + t) * C;
      for (std::size_t c = 0; c < C; ++c) acc[c] += load(d[c]);
    }
    for (std::size_t c = 0; c < C; ++c) row[c] = store<T>(acc[c]);
  }
}

#define TRAINMEM_INSTANTIATE(T)                                                                                      \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, const T*, std::size_t, std::size_t,         \
                                     std::size_t);                                                                   \
  template void embedding_backward<T>(T*, T*, const T*, const std::int32_t*, std::size_t, std::size_t, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
