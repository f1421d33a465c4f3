// What the attention kernels' tests share (the CPU tests test_flash_attention*_cpu.cpp,
// test_attention_gqa_cpu.cpp, and, through attention_cuda_test_support.cuh, the CUDA tests):
//   - grouped_shape: a shape with grouped K/V heads, in one line;
//   - part: the q, k or v columns of a qkv (or dqkv) array;
//   - random_attention_inputs: the CUDA tests' inputs (q, k in [-2, 2], v and dout in [-1, 1]);
//   - Fp32Reference: the fp32 materialized reference on 16-bit inputs and the per-element bounds
//     of flash_attention_bounds.h, and expect_gradients_within_bounds, its dq, dk, dv check;
//   - reference_backward_check: the check that the double reference's backward is its derivative.
// Host code only (no CUDA).
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/flash_attention_bounds.h"
#include "kernels/tests/gradient_check.h"

namespace trainmem::kernels::attention_test {

// A shape with Hkv K/V heads, its arguments in the order the tests name them (AttentionShape's
// own field order puts Hkv last, after causal, where a brace list would hide it).
inline AttentionShape grouped_shape(std::size_t B, std::size_t T, std::size_t H, std::size_t Hkv, std::size_t D,
                                    bool causal) {
  return AttentionShape{B, T, H, D, causal, Hkv};
}

// Part (0 q, 1 k, 2 v) of every row of a [B, T, (H + 2 Hkv) D] array, as [B, T, heads * D]
// (Hkv = H: the thirds of a [B, T, 3C] array).
template <typename T>
std::vector<T> part(const std::vector<T>& x, const AttentionShape& s, int which) {
  const std::size_t W = s.qkv_width(), Ckv = s.kv_heads() * s.D;
  const std::size_t begin = which == 0 ? 0 : which == 1 ? s.C() : s.C() + Ckv, width = which == 0 ? s.C() : Ckv;
  std::vector<T> out(s.B * s.T * width);
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    for (std::size_t i = 0; i < width; ++i) out[row * width + i] = x[row * W + begin + i];
  return out;
}

// The CUDA tests' inputs, in float before any rounding: q, k uniform in [-2, 2] (so the softmax is
// far from uniform), v and dout uniform in [-1, 1], drawn row by row from one generator.
struct AttentionInputs {
  std::vector<float> qkv, dout;
};
inline AttentionInputs random_attention_inputs(const AttentionShape& s, unsigned seed) {
  std::mt19937 rng(seed);
  const std::size_t W = s.qkv_width(), qk = s.C() + s.kv_heads() * s.D;  // q and k columns, then v
  AttentionInputs in{std::vector<float>(s.B * s.T * W), std::vector<float>(s.B * s.T * s.C())};
  std::uniform_real_distribution<float> wide(-2.0f, 2.0f), unit(-1.0f, 1.0f);
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    for (std::size_t i = 0; i < W; ++i) in.qkv[row * W + i] = i < qk ? wide(rng) : unit(rng);
  for (float& x : in.dout) x = unit(rng);
  return in;
}

// The fp32 materialized reference (cpu::attention_reference_*) on the widened 16-bit inputs, and
// how far a 16-bit kernel may be from it, per element (flash_attention_bounds.h).
struct Fp32Reference {
  std::vector<float> out, lse, dq, dk, dv;  // dq, dk, dv: the parts of the reference dqkv
  flash_test::FlashBounds bound;
};
// u: the 16-bit type's unit roundoff, a: its absolute rounding below the normal range (2^-25 fp16,
// 0 bf16), per_head_u as flash_attention_bounds takes it.
inline Fp32Reference fp32_reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                                    const AttentionShape& s, double u, double a, double per_head_u = 0.0) {
  Fp32Reference r;
  r.out.resize(s.B * s.T * s.C());
  r.lse.resize(s.B * s.H * s.T);
  std::vector<float> dqkv(qkv.size());
  cpu::attention_reference_forward(r.out.data(), r.lse.data(), qkv.data(), s);
  cpu::attention_reference_backward(dqkv.data(), dout.data(), qkv.data(), s);
  r.dq = part(dqkv, s, 0);
  r.dk = part(dqkv, s, 1);
  r.dv = part(dqkv, s, 2);
  r.bound = flash_test::flash_attention_bounds(qkv, dout, r.out, r.lse, r.dq, r.dk, r.dv, s, u, a, per_head_u);
  return r;
}
// The same for a kernel in the 16-bit storage type T (bf16, fp16).
template <typename T>
Fp32Reference fp32_reference_for(const std::vector<float>& qkv, const std::vector<float>& dout,
                                 const AttentionShape& s) {
  return fp32_reference(qkv, dout, s, dtype_test::unit_roundoff<T>(), std::is_same_v<T, fp16> ? 0x1p-25 : 0.0);
}

// A kernel's dqkv (widened to float) within `bound` of the reference's dq, dk and dv, each
// checked (and reported) on its own.
inline void expect_gradients_within_bounds(const std::vector<float>& dqkv, const Fp32Reference& ref,
                                           const flash_test::FlashBounds& bound, const AttentionShape& s) {
  EXPECT_TRUE(flash_test::within_bounds("dq", part(dqkv, s, 0), ref.dq, bound.dq));
  EXPECT_TRUE(flash_test::within_bounds("dk", part(dqkv, s, 1), ref.dk, bound.dk));
  EXPECT_TRUE(flash_test::within_bounds("dv", part(dqkv, s, 2), ref.dv, bound.dv));
}

// The double reference's backward against central differences of its forward (gradient_check.h):
// loss = sum(out * r), so dout = r. Off by O(h^2) (~1e-12) plus the forward's rounding over 2h
// (~1e-16 / 1e-6 = 1e-10): a test asks the worst difference to be below 1e-8 of the largest
// gradient. qkv is restored as it was.
inline gradient_check::DerivativeCheck reference_backward_check(std::vector<double>& qkv, const std::vector<double>& r,
                                                                const AttentionShape& s) {
  std::vector<double> out(r.size()), lse(s.B * s.H * s.T), dqkv(qkv.size());
  cpu::attention_reference_backward(dqkv.data(), r.data(), qkv.data(), s);
  return gradient_check::central_differences(qkv, dqkv, [&] {
    cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += out[i] * r[i];
    return l;
  });
}

}  // namespace trainmem::kernels::attention_test
