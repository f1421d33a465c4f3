// CPU reference: SwiGLU forward and backward (formulas in kernels/swiglu.h). Each element is loaded
// into the compute type F (fp32, or double for double; kernels/dtype.h), computed there and each
// output stored once. The elements are split over the cores (kernels/cpu/parallel_for.h: the same
// bits as one loop).
//
// One exp per element, e = exp(-|g|), from kernels/cpu/vector_exp.h in fp32 (the loops vectorize,
// kernels/cpu/simd_clones.h; the sign of g picks s or 1 - s with a select, not a branch) and
// std::exp in double. From e in (0, 1] both sigma(g) and 1 - sigma(g) are accurate to a few ulps
// relative, with no cancellation and no overflow:
//   r = 1 / (1 + e),   g >= 0:  s = r,      1 - s = e r
//                      g <  0:  s = e r,    1 - s = r
#include <cmath>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd_clones.h"
#include "kernels/cpu/vector_exp.h"
#include "kernels/swiglu.h"

namespace trainmem::kernels::cpu {

namespace {
constexpr std::size_t kSwigluMinPerThread = 32768;  // elements; each costs about 1 ns

// exp(-a) for a = |g| >= 0. In fp32 the vectorized exp clamps its argument at -87 (it returns
// exp(-87) for anything below): beyond a = 87 this returns 0 instead, so that sigma(g) of a
// large negative g is 0, not 1.7e-38 (which g * 1.7e-38 would turn into a wrong silu for g
// near -1e38, bf16's and fp32's range). double's std::exp needs no such care.
inline float swiglu_exp_minus(float a) { return a > 87.0f ? 0.0f : exp_of(-a); }
inline double swiglu_exp_minus(double a) { return exp_of(-a); }

// Elements [begin, end): the loops, one copy per instruction set (simd_clones.h).
template <typename T>
TRAINMEM_SIMD_CLONES void swiglu_forward_range(T* out, const T* gate, const T* up, std::size_t begin,
                                               std::size_t end) {
  using F = compute_t<T>;
  for (std::size_t i = begin; i < end; ++i) {
    const F g = load(gate[i]);
    const F u = load(up[i]);
    const F e = swiglu_exp_minus(std::abs(g));
    const F r = F(1) / (F(1) + e);
    const F s = g >= F(0) ? r : e * r;  // sigma(g)
    out[i] = store<T>((g * s) * u);     // silu(g) * up
  }
}

template <typename T>
TRAINMEM_SIMD_CLONES void swiglu_backward_range(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                                std::size_t begin, std::size_t end) {
  using F = compute_t<T>;
  for (std::size_t i = begin; i < end; ++i) {
    // Every input of index i is read before either output of index i is written: in place is safe.
    const F g = load(gate[i]);
    const F u = load(up[i]);
    const F d = load(dout[i]);
    const F e = swiglu_exp_minus(std::abs(g));
    const F r = F(1) / (F(1) + e);
    const F s = g >= F(0) ? r : e * r;  // sigma(g)
    const F q = g >= F(0) ? e * r : r;  // 1 - sigma(g)
    const F silu = g * s;
    const F dsilu = s * (F(1) + g * q);  // silu'(g) = s (1 + g (1 - s))
    dgate[i] = store<T>((d * u) * dsilu);
    dup[i] = store<T>(d * silu);
  }
}
}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, std::size_t n) {
  parallel_for(n, kSwigluMinPerThread,
               [&](std::size_t begin, std::size_t end) { swiglu_forward_range(out, gate, up, begin, end); });
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::size_t n) {
  parallel_for(n, kSwigluMinPerThread, [&](std::size_t begin, std::size_t end) {
    swiglu_backward_range(dgate, dup, dout, gate, up, begin, end);
  });
}

#define TRAINMEM_INSTANTIATE(T)                                          \
  template void swiglu_forward<T>(T*, const T*, const T*, std::size_t); \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t);
TRAINMEM_INSTANTIATE(float)
TRAINMEM_INSTANTIATE(double)
TRAINMEM_INSTANTIATE(bf16)
TRAINMEM_INSTANTIATE(fp16)
#undef TRAINMEM_INSTANTIATE

}  // namespace trainmem::kernels::cpu
