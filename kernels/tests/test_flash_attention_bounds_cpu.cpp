// The derived flash attention bounds (kernels/tests/flash_attention_bounds.h, which the CUDA test
// compares the GPU kernels with) hold for the CPU tiled flash attention in bf16 and fp16 against the
// fp32 materialized reference, on the inputs of the CUDA test (q, k uniform in [-2, 2], v, dout in
// [-1, 1]): out, lse, dq, dk, dv, causal and not, T not a multiple of the tiles. The backward runs
// from the reference's out rounded to 16 bits and its lse, as in the CUDA test.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/flash_attention_bounds.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;

template <typename T>
class FlashAttentionBoundsCpu : public ::testing::Test {};
using SixteenBitTypes = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(FlashAttentionBoundsCpu, SixteenBitTypes, DtypeNames);

// The q, k or v third (part 0, 1, 2) of a [B, T, 3C] array, as [B, T, C].
std::vector<float> third(const std::vector<float>& x, const AttentionShape& s, std::size_t part) {
  const std::size_t C = s.C();
  std::vector<float> out(s.B * s.T * C);
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    for (std::size_t c = 0; c < C; ++c) out[row * C + c] = x[row * 3 * C + part * C + c];
  return out;
}

TYPED_TEST(FlashAttentionBoundsCpu, TheCpuFlashIsWithinTheDerivedBounds) {
  using T = TypeParam;
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const AttentionShape s{1, 100, 2, 64, causal};
    const std::size_t C = s.C();
    std::mt19937 rng(causal ? 31 : 32);
    std::uniform_real_distribution<float> wide(-2.0f, 2.0f), unit(-1.0f, 1.0f);
    std::vector<float> qkv_in(s.B * s.T * 3 * C), dout_in(s.B * s.T * C);
    for (std::size_t row = 0; row < s.B * s.T; ++row)
      for (std::size_t i = 0; i < 3 * C; ++i) qkv_in[row * 3 * C + i] = i < 2 * C ? wide(rng) : unit(rng);
    for (float& x : dout_in) x = unit(rng);
    const std::vector<T> qkv = narrow<T>(qkv_in), dout = narrow<T>(dout_in);
    const std::vector<float> qkv32 = widen(qkv), dout32 = widen(dout);

    // The fp32 materialized reference.
    std::vector<float> out_ref(s.B * s.T * C), lse_ref(s.B * s.H * s.T), dqkv_ref(qkv.size());
    cpu::attention_reference_forward(out_ref.data(), lse_ref.data(), qkv32.data(), s);
    cpu::attention_reference_backward(dqkv_ref.data(), dout32.data(), qkv32.data(), s);
    const std::vector<float> dq_ref = third(dqkv_ref, s, 0), dk_ref = third(dqkv_ref, s, 1),
                             dv_ref = third(dqkv_ref, s, 2);
    const flash_test::FlashBounds bound = flash_test::flash_attention_bounds(
        qkv32, dout32, out_ref, lse_ref, dq_ref, dk_ref, dv_ref, s, unit_roundoff<T>(),
        std::is_same_v<T, fp16> ? 0x1p-25 : 0.0);

    // The CPU flash in T; its backward from the reference's out (rounded) and lse.
    std::vector<T> out(out_ref.size()), dqkv(qkv.size());
    std::vector<float> lse(lse_ref.size());
    cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s);
    const std::vector<T> out16 = narrow<T>(out_ref);
    cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out16.data(), lse_ref.data(), s);
    const std::vector<float> dqkv32 = widen(dqkv);
    EXPECT_TRUE(flash_test::within_bounds("out", widen(out), out_ref, bound.out));
    EXPECT_TRUE(flash_test::within_bounds("lse", lse, lse_ref, bound.lse));
    EXPECT_TRUE(flash_test::within_bounds("dq", third(dqkv32, s, 0), dq_ref, bound.dq));
    EXPECT_TRUE(flash_test::within_bounds("dk", third(dqkv32, s, 1), dk_ref, bound.dk));
    EXPECT_TRUE(flash_test::within_bounds("dv", third(dqkv32, s, 2), dv_ref, bound.dv));
  }
}

}  // namespace
}  // namespace trainmem::kernels
