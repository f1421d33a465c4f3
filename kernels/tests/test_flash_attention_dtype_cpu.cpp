// The CPU flash attention in each storage type T (fp32, bf16, fp16; kernels/dtype.h), on fresh
// random inputs (seeded, never zero), causal and not, with tiles that do not divide T:
//   (a) bit for bit equal to the float version on the widened inputs, outputs rounded to T (lse,
//       always fp32, equal as is): what kernels/flash_attention.h promises;
//   (b) within rounded_once<T>(...) of the double version on the same inputs: each output is
//       rounded once, so u(T) = 2^-8 (bf16, 8 significant bits), 2^-11 (fp16, 11), 2^-24 (fp32)
//       relative, plus the kernel's fp32 arithmetic (sums of up to 37 products of values near 1,
//       exps: 1e-5 absolute).
// The backward runs from this forward's own (rounded) out and lse, given to both references.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;

template <typename T>
class FlashAttentionDtypeCpu : public ::testing::Test {};
TYPED_TEST_SUITE(FlashAttentionDtypeCpu, StorageTypes, DtypeNames);

constexpr std::size_t kBlockQ = 16, kBlockK = 8;  // 37 rows: 3 query tiles and 5 key tiles, the last ones short

TYPED_TEST(FlashAttentionDtypeCpu, ForwardAndBackwardRoundEachOutputOnce) {
  using T = TypeParam;
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    AttentionShape s;
    s.B = 2;
    s.T = 37;
    s.H = 2;
    s.D = 16;
    s.causal = causal;
    const std::size_t qkv_n = s.B * s.T * 3 * s.C(), out_n = s.B * s.T * s.C(), lse_n = s.B * s.H * s.T;
    const std::vector<T> qkv = random_values<T>(qkv_n, causal ? 1 : 2, -1.0, 1.0);
    const std::vector<T> dout = random_values<T>(out_n, causal ? 3 : 4, -1.0, 1.0);

    std::vector<T> out(out_n), dqkv(qkv_n);
    std::vector<float> lse(lse_n);
    cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s, kBlockQ, kBlockK);
    cpu::flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), s, kBlockQ, kBlockK);

    // (a)
    const std::vector<float> qkv32 = widen(qkv), dout32 = widen(dout), out_in32 = widen(out);
    std::vector<float> out32(out_n), lse32(lse_n), dqkv32(qkv_n);
    cpu::flash_attention_forward(out32.data(), lse32.data(), qkv32.data(), s, kBlockQ, kBlockK);
    cpu::flash_attention_backward(dqkv32.data(), dout32.data(), qkv32.data(), out_in32.data(), lse.data(), s, kBlockQ,
                                  kBlockK);
    EXPECT_TRUE(same_bits("flash out", out, narrow<T>(out32)));
    EXPECT_TRUE(same_bits("flash lse", lse, lse32));
    EXPECT_TRUE(same_bits("flash dqkv", dqkv, narrow<T>(dqkv32)));

    // (b)
    const std::vector<double> qkvd = to_double(qkv), doutd = to_double(dout), out_ind = to_double(out),
                              lse_ind = to_double(lse);
    std::vector<double> outd(out_n), lsed(lse_n), dqkvd(qkv_n);
    cpu::flash_attention_forward(outd.data(), lsed.data(), qkvd.data(), s, kBlockQ, kBlockK);
    cpu::flash_attention_backward(dqkvd.data(), doutd.data(), qkvd.data(), out_ind.data(), lse_ind.data(), s, kBlockQ,
                                  kBlockK);
    EXPECT_TRUE(close_to("flash out vs double", out, outd, rounded_once<T>(1e-6, 1e-5)));
    EXPECT_TRUE(close_to("flash lse vs double", lse, lsed, rounded_once<float>(1e-6, 1e-5)));
    EXPECT_TRUE(close_to("flash dqkv vs double", dqkv, dqkvd, rounded_once<T>(1e-6, 1e-5)));
  }
}

// The materialized reference takes the same storage types, with the same promise.
TYPED_TEST(FlashAttentionDtypeCpu, ReferenceRoundsEachOutputOnce) {
  using T = TypeParam;
  AttentionShape s;
  s.B = 1;
  s.T = 21;
  s.H = 3;
  s.D = 8;
  const std::size_t qkv_n = s.B * s.T * 3 * s.C(), out_n = s.B * s.T * s.C(), lse_n = s.B * s.H * s.T;
  const std::vector<T> qkv = random_values<T>(qkv_n, 5, -1.0, 1.0), dout = random_values<T>(out_n, 6, -1.0, 1.0);
  std::vector<T> out(out_n), dqkv(qkv_n);
  std::vector<float> lse(lse_n);
  cpu::attention_reference_forward(out.data(), lse.data(), qkv.data(), s);
  cpu::attention_reference_backward(dqkv.data(), dout.data(), qkv.data(), s);

  const std::vector<float> qkv32 = widen(qkv), dout32 = widen(dout);
  std::vector<float> out32(out_n), lse32(lse_n), dqkv32(qkv_n);
  cpu::attention_reference_forward(out32.data(), lse32.data(), qkv32.data(), s);
  cpu::attention_reference_backward(dqkv32.data(), dout32.data(), qkv32.data(), s);
  EXPECT_TRUE(same_bits("reference out", out, narrow<T>(out32)));
  EXPECT_TRUE(same_bits("reference lse", lse, lse32));
  EXPECT_TRUE(same_bits("reference dqkv", dqkv, narrow<T>(dqkv32)));

  const std::vector<double> qkvd = to_double(qkv), doutd = to_double(dout);
  std::vector<double> outd(out_n), lsed(lse_n), dqkvd(qkv_n);
  cpu::attention_reference_forward(outd.data(), lsed.data(), qkvd.data(), s);
  cpu::attention_reference_backward(dqkvd.data(), doutd.data(), qkvd.data(), s);
  EXPECT_TRUE(close_to("reference out vs double", out, outd, rounded_once<T>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("reference lse vs double", lse, lsed, rounded_once<float>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("reference dqkv vs double", dqkv, dqkvd, rounded_once<T>(1e-6, 1e-5)));
}

}  // namespace
}  // namespace trainmem::kernels
