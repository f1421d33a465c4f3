// The derived flash attention bounds (kernels/tests/flash_attention_bounds.h, which the CUDA test
// compares the GPU kernels with) hold for the CPU tiled flash attention in bf16 and fp16 against the
// fp32 materialized reference, on the inputs of the CUDA test (q, k uniform in [-2, 2], v, dout in
// [-1, 1]): out, lse, dq, dk, dv, causal and not, T not a multiple of the tiles. The backward runs
// from the reference's out rounded to 16 bits and its lse, as in the CUDA test.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/tests/attention_test_support.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/flash_attention_bounds.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;

template <typename T>
class FlashAttentionBoundsCpu : public ::testing::Test {};
using SixteenBitTypes = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(FlashAttentionBoundsCpu, SixteenBitTypes, DtypeNames);

TYPED_TEST(FlashAttentionBoundsCpu, TheCpuFlashIsWithinTheDerivedBounds) {
  using T = TypeParam;
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const AttentionShape s{1, 100, 2, 64, causal};
    const attention_test::AttentionInputs in = attention_test::random_attention_inputs(s, causal ? 31 : 32);
    const std::vector<T> qkv = narrow<T>(in.qkv), dout = narrow<T>(in.dout);

    // The fp32 materialized reference on the rounded inputs, and the bounds.
    const attention_test::Fp32Reference ref = attention_test::fp32_reference_for<T>(widen(qkv), widen(dout), s);

    // The CPU flash in T; its backward from the reference's out (rounded) and lse.
    std::vector<T> out(ref.out.size()), dqkv(qkv.size());
    std::vector<float> lse(ref.lse.size());
    cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s);
    const std::vector<T> out16 = narrow<T>(ref.out);
    cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out16.data(), ref.lse.data(), s);
    EXPECT_TRUE(flash_test::within_bounds("out", widen(out), ref.out, ref.bound.out));
    EXPECT_TRUE(flash_test::within_bounds("lse", lse, ref.lse, ref.bound.lse));
    attention_test::expect_gradients_within_bounds(widen(dqkv), ref, ref.bound, s);
  }
}

}  // namespace
}  // namespace trainmem::kernels
