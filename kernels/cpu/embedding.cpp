// CPU reference: token + position embedding (formulas in kernels/embedding.h).
#include "kernels/embedding.h"

namespace trainmem::kernels::cpu {

template <typename T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, std::size_t B, std::size_t Tn,
                       std::size_t C) {
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < Tn; ++t) {
      T* o = out + (b * Tn + t) * C;
      const T* tok = wte + static_cast<std::size_t>(tokens[b * Tn + t]) * C;
      const T* pos = wpe + t * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = tok[c] + pos[c];
    }
}

template <typename T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, std::size_t B, std::size_t Tn,
                        std::size_t C) {
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < Tn; ++t) {
      const T* d = dout + (b * Tn + t) * C;
      T* dtok = dwte + static_cast<std::size_t>(tokens[b * Tn + t]) * C;
      T* dpos = dwpe + t * C;
      for (std::size_t c = 0; c < C; ++c) {
        dtok[c] += d[c];
        dpos[c] += d[c];
      }
    }
}

template void embedding_forward<float>(float*, const std::int32_t*, const float*, const float*, std::size_t,
                                       std::size_t, std::size_t);
template void embedding_forward<double>(double*, const std::int32_t*, const double*, const double*, std::size_t,
                                        std::size_t, std::size_t);
template void embedding_backward<float>(float*, float*, const float*, const std::int32_t*, std::size_t, std::size_t,
                                        std::size_t);
template void embedding_backward<double>(double*, double*, const double*, const std::int32_t*, std::size_t,
                                         std::size_t, std::size_t);

}  // namespace trainmem::kernels::cpu
