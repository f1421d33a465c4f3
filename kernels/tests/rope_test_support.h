// What the RoPE tests (test_rope_cpu.cpp, test_rope_cuda.cu) share: the model's layout of a fused
// qkv row, the model's two calls on it (q, then k) on either backend, the inputs (random in the
// rotated heads, poison elsewhere), the CPU kernel's results on them, and the checks that columns
// outside the rotated heads keep their bits. Host code only.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/kernel_stream.h"
#include "kernels/rope.h"
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels::rope_test {

using dtype_test::bits_of;

// The model's layout: rows of [q heads (H) | k heads (Hkv) | v heads (Hkv) | pad], each head D wide.
struct RopeLayout {
  std::size_t B, Tn, H, Hkv, D, pad;
  std::size_t row_stride() const { return (H + 2 * Hkv) * D + pad; }
  std::size_t rows() const { return B * Tn; }
  std::size_t size() const { return rows() * row_stride(); }
  std::size_t rotated_width() const { return (H + Hkv) * D; }  // q and k: columns [0, (H+Hkv)*D)
  bool rotated(std::size_t k) const { return k % row_stride() < rotated_width(); }
  std::size_t position(std::size_t k) const { return (k / row_stride()) % Tn; }
  // The element paired with element k (of a rotated column): i <-> i + D/2 within its head.
  std::size_t partner(std::size_t k) const {
    const std::size_t in_head = (k % row_stride()) % D;
    return in_head < D / 2 ? k + D / 2 : k - D / 2;
  }
  std::string describe() const {
    return "B=" + std::to_string(B) + " Tn=" + std::to_string(Tn) + " H=" + std::to_string(H) +
           " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D) + " pad=" + std::to_string(pad);
  }
};

// The two calls the model makes on each row: q (first_column 0, H heads), then k (first_column
// H*D, Hkv heads).
struct RopeCall {
  std::size_t first_column, heads;
};
inline std::array<RopeCall, 2> rope_calls(const RopeLayout& L) {
  return {RopeCall{0, L.H}, RopeCall{L.H * L.D, L.Hkv}};
}

// What the model does: rotate q, then k, of every row (forward or backward), through the
// dispatcher: the CPU kernel by default, the CUDA one with a cuda Stream (device pointers).
template <typename T>
void rope_qk(bool forward, T* out, const T* inp, const RopeLayout& L, const RopeFrequencies& frequencies,
             const Stream& s = kCpuStream) {
  for (const RopeCall& call : rope_calls(L)) {
    if (forward)
      kernels::rope_forward<T>(s, out, inp, L.B, L.Tn, call.heads, L.D, L.row_stride(), call.first_column, frequencies);
    else
      kernels::rope_backward<T>(s, out, inp, L.B, L.Tn, call.heads, L.D, L.row_stride(), call.first_column, frequencies);
  }
}

// Every byte 0xff: NaN in fp32, bf16, fp16 and double.
template <typename T>
T rope_poison() {
  T x;
  std::memset(&x, 0xff, sizeof(T));
  return x;
}

// Random values in [-1, 1] (never zero) in the rotated columns, poison everywhere else.
template <typename T>
std::vector<T> rope_input(const RopeLayout& L, std::uint64_t seed) {
  std::vector<T> v = dtype_test::random_values<T>(L.size(), seed, -1.0, 1.0);
  for (std::size_t k = 0; k < v.size(); ++k)
    if (!L.rotated(k)) v[k] = rope_poison<T>();
  return v;
}

// The CPU kernel's results of one case, out of place: y = forward(x) and dx = backward(dy), each
// written into a copy of `poisoned` (every element poison), which the columns outside the rotated
// heads must still hold afterwards.
template <typename T>
struct RopeOutputs {
  std::vector<T> poisoned, y, dx;
};
template <typename T>
RopeOutputs<T> cpu_rope(const std::vector<T>& x, const std::vector<T>& dy, const RopeLayout& L,
                        const RopeFrequencies& frequencies) {
  RopeOutputs<T> r{std::vector<T>(L.size(), rope_poison<T>()), {}, {}};
  r.y = r.dx = r.poisoned;
  rope_qk(true, r.y.data(), x.data(), L, frequencies);
  rope_qk(false, r.dx.data(), dy.data(), L, frequencies);
  return r;
}

// The rotated columns of a buffer, in order.
template <typename T>
std::vector<T> rotated_part(const std::vector<T>& v, const RopeLayout& L) {
  std::vector<T> out;
  for (std::size_t k = 0; k < v.size(); ++k)
    if (L.rotated(k)) out.push_back(v[k]);
  return out;
}

// Every column outside the rotated heads has the bits it had before the call.
template <typename T>
::testing::AssertionResult untouched(const std::string& what, const std::vector<T>& got, const std::vector<T>& before,
                                     const RopeLayout& L) {
  std::size_t changed = 0, first = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (L.rotated(k) || bits_of(got[k]) == bits_of(before[k])) continue;
    if (changed++ == 0) first = k;
  }
  if (changed == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name<T>() << "): " << changed
                                       << " elements outside the rotated heads changed; the first at row "
                                       << first / L.row_stride() << ", column " << first % L.row_stride();
}

// sqrt(x_k^2 + x_partner^2): the length of the pair element k belongs to.
inline double pair_norm(const std::vector<double>& x, const RopeLayout& L, std::size_t k) {
  return std::hypot(x[k], x[L.partner(k)]);
}

}  // namespace trainmem::kernels::rope_test
