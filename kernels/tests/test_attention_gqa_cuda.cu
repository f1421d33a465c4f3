// Grouped-query attention (GQA, kernels/attention_heads.h) on CUDA against the CPU reference, with
// Hkv K/V heads shared by groups of H/Hkv query heads, read in place:
//   - every flash attention version (v1, v2, v3; kernels/cuda/flash_attention*.cu) and cuDNN's SDPA
//     (kernels/cuda/cudnn_attention.cpp), bf16 and fp16, against the fp32 materialized reference
//     (cpu::attention_reference_*) within the per-element bounds of flash_attention_bounds.h,
//     whose dk and dv count the sums over a group (2 gamma(group T + 2)); for cuDNN also one
//     16-bit rounding of each query head's dk, dv before the group is added (its GQA backward
//     may do so: cudnn-frontend reduces per-head "full-head" dK, dV in the I/O type);
//   - the naive attention (kernels/cuda/attention.cu: cuBLAS strided-batched GEMMs, one call per
//     group member), fp32, bf16 and fp16, against the CPU naive kernel in the same type, with the
//     tolerances of test_kernels_cuda.cu / test_kernels_dtype_cuda.cu (fp32: GEMMs and softmax
//     chained, 1e-4 + 1e-3 relative; 16 bits: 8u for the chained roundings), plus, for dk and dv,
//     one 16-bit rounding of the running sum per group member (group u more).
// Inputs as in test_flash_attention_cuda.cu: q, k uniform in [-2, 2], v and dout in [-1, 1],
// rounded to the type under test; outputs and workspaces poisoned (0xff: NaN) first.
// Without a usable GPU every test that launches a kernel is skipped, and says why; the refusals of
// a K/V head count that does not divide H throw before any CUDA call and run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cudnn_attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/attention_cuda_test_support.cuh"
#include "kernels/tests/attention_test_support.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using attention_test::grouped_shape;
using attention_test::part;
using cuda::Half16;
using namespace gpu_test;
using namespace attention_cuda_test;  // Reference, check_forward, the shared test bodies

// ------------------------------------------------------------------------------------ cases

// H = 8 with Hkv = 1 (multi-query) and 2, H = 4 with Hkv = 2; T = 1, 100, 257 (none a multiple of
// the tiles but 1); D = 64 and 128; causal and not.
std::vector<AttentionShape> gqa_cases() {
  std::vector<AttentionShape> out;
  for (std::size_t D : {64u, 128u})
    for (bool causal : {false, true})
      for (std::size_t T : {1u, 100u, 257u})
        for (auto [H, Hkv] : {std::pair<std::size_t, std::size_t>{8, 1}, {8, 2}, {4, 2}})
          out.push_back(grouped_shape(2, T, H, Hkv, D, causal));
  return out;
}

// This file's inputs of a case (attention_test::random_attention_inputs), seeded by the case; the
// bounds both plain and with one rounding per query head's dk, dv (for cuDNN).
const Reference& reference(Half16 dtype, const AttentionShape& s) {
  const auto seed = static_cast<unsigned>(2000 + s.T * 7 + s.D * 3 + s.H * 11 + s.kv_heads() * 13 +
                                          (s.causal ? 1 : 0) + static_cast<int>(dtype));
  return cached_reference(dtype, s, seed, /*with_per_head_bound=*/true);
}

// ------------------------------------------------------------------------------------ flash versions

class AttentionGqaFlashCuda : public ::testing::TestWithParam<int> {};

TEST_P(AttentionGqaFlashCuda, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_flash_forward_matches_reference(GetParam(), gqa_cases(), reference);
}

// Within the plain bounds: the flash versions sum a group's dk, dv in fp32.
TEST_P(AttentionGqaFlashCuda, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_flash_backward_matches_reference(GetParam(), gqa_cases(), reference);
}

// dk and dv of a K/V head are summed over its group in a fixed order inside one block: two runs
// give the same bits (dq goes through v2/v3's atomic fp32 accumulator, so it is not compared).
TEST_P(AttentionGqaFlashCuda, KvGradientsAreDeterministic) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  const Half16 dtype = Half16::bf16;
  const AttentionShape s = grouped_shape(2, 257, 8, 2, 64, false);
  const Reference& r = reference(dtype, s);
  DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out16), d_dqkv(r.qkv16.size());
  DeviceBuffer<float> d_lse(r.lse);
  DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, s));
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    d_dqkv.poison();
    cuda::flash_attention_backward(nullptr, version, dtype, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                   d_lse.get(), workspace.get(), s);
    finish();
    const std::vector<float> dqkv = from16(dtype, d_dqkv.download());
    std::vector<float> kv = part(dqkv, s, 1);
    const std::vector<float> dv = part(dqkv, s, 2);
    kv.insert(kv.end(), dv.begin(), dv.end());
    if (run == 0) first = kv;
    else EXPECT_TRUE(all_close("dk, dv of the second run", kv, first, Tolerance{0.0, 0.0}));
  }
}

// The backward on the forward's own out and lse, as training runs them: the cases with T = 257, bf16.
TEST_P(AttentionGqaFlashCuda, ForwardThenBackwardOnItsOwnOutputs) {
  SKIP_WITHOUT_GPU();
  std::vector<AttentionShape> long_cases;
  for (const AttentionShape& s : gqa_cases())
    if (s.T == 257) long_cases.push_back(s);
  expect_flash_forward_then_backward_within_bounds(GetParam(), long_cases, reference);
}

// Refused before anything runs (no GPU needed: nothing reaches CUDA).
TEST_P(AttentionGqaFlashCuda, RefusesKvHeadsThatDoNotDivideH) {
  const int version = GetParam();
  for (std::size_t Hkv : {3u, 8u}) {
    const AttentionShape s = grouped_shape(1, 16, 4, Hkv, 64, true);
    EXPECT_THROW(cuda::flash_attention_forward(nullptr, version, Half16::bf16, nullptr, nullptr, nullptr, s),
                 std::invalid_argument);
    EXPECT_THROW(cuda::flash_attention_backward_workspace_bytes(version, s), std::invalid_argument);
    EXPECT_THROW(cuda::flash_attention_backward(nullptr, version, Half16::bf16, nullptr, nullptr, nullptr, nullptr,
                                                nullptr, nullptr, s),
                 std::invalid_argument);
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, AttentionGqaFlashCuda, ::testing::Range(1, cuda::flash_attention_versions() + 1),
                         [](const ::testing::TestParamInfo<int>& info) { return "v" + std::to_string(info.param); });

// ------------------------------------------------------------------------------------ cuDNN

TEST(AttentionGqaCudnn, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_cudnn_forward_matches_reference(gqa_cases(), reference);
}

// Within the bounds with one 16-bit rounding of each query head's dk, dv before the group is
// added: cuDNN's GQA backward may round so.
TEST(AttentionGqaCudnn, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_cudnn_backward_matches_reference(gqa_cases(), reference, CudnnKvSum::rounded_per_head);
}

TEST(AttentionGqaCudnn, RefusesKvHeadsThatDoNotDivideH) {
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  const AttentionShape s = grouped_shape(1, 16, 4, 3, 64, true);
  EXPECT_THROW(cudnn::attention_forward_workspace_bytes(Half16::bf16, s), std::invalid_argument);
  EXPECT_THROW(cudnn::attention_backward_workspace_bytes(Half16::bf16, s), std::invalid_argument);
#endif
}

// ------------------------------------------------------------------------------------ naive (cuBLAS)

template <typename T>
class AttentionGqaNaiveCuda : public ::testing::Test {};
using NaiveTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(AttentionGqaNaiveCuda, NaiveTypes, dtype_test::DtypeNames);

// Outputs compared as the floats they stand for.
template <typename T>
::testing::AssertionResult close(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                                 Tolerance tol) {
  return all_close(what + " (" + dtype_name<T>() + ")", dtype_test::widen(gpu), dtype_test::widen(cpu), tol);
}

TYPED_TEST(AttentionGqaNaiveCuda, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const bool fp32 = std::is_same_v<T, float>;
  const double u = fp32 ? 0.0 : dtype_test::unit_roundoff<T>();
  // fp32: test_kernels_cuda.cu's kAttention; 16 bits: test_kernels_dtype_cuda.cu's chained 8u.
  const Tolerance chained = fp32 ? Tolerance{1e-4, 1e-3} : Tolerance{8 * u, 8 * u};
  TestStream stream;
  std::uint64_t seed = 700;
  struct Shape {
    std::size_t B, T, H, Hkv, hs;
  };
  // T = 70: rows longer than a warp; T = 1 the smallest; Hkv = 1 (multi-query) and 2.
  for (const Shape& sh : {Shape{2, 13, 8, 2, 24}, Shape{1, 70, 4, 1, 8}, Shape{3, 1, 4, 2, 5}}) {
    const std::size_t B = sh.B, Tn = sh.T, NH = sh.H, NKV = sh.Hkv, C = NH * sh.hs, W = C + 2 * NKV * sh.hs;
    const std::size_t group = NH / NKV, scores = B * NH * Tn * Tn;
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(Tn) + " NH=" + std::to_string(NH) +
                 " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(sh.hs));
    // dk and dv: the running sum over the group rounded once per member in 16 bits.
    const Tolerance kv_sum = fp32 ? chained : Tolerance{(8.0 + static_cast<double>(group)) * u,
                                                        (8.0 + static_cast<double>(group)) * u};
    const std::vector<T> qkv = dtype_test::random_values<T>(B * Tn * W, ++seed, -1.0, 1.0);
    std::vector<T> out(B * Tn * C), preatt(scores), att(scores);
    cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, Tn, C, NH, NKV);
    DeviceBuffer<T> d_qkv(qkv), d_out(out.size()), d_preatt(scores), d_att(scores);
    d_out.poison();
    d_preatt.poison();
    d_att.poison();
    cuda::attention_forward<T>(stream.get(), d_out.get(), d_preatt.get(), d_att.get(), d_qkv.get(), B, Tn, C, NH, NKV);
    finish();
    EXPECT_TRUE(close("attention preatt", d_preatt.download(), preatt, chained));
    EXPECT_TRUE(close("attention att", d_att.download(), att, chained));
    EXPECT_TRUE(close("attention out", d_out.download(), out, chained));

    // Backward from the CPU's att on both sides.
    const std::vector<T> dout = dtype_test::random_values<T>(B * Tn * C, ++seed, -1.0, 1.0);
    std::vector<T> dqkv(qkv.size()), dpreatt(scores);
    cpu::attention_backward(dqkv.data(), dpreatt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH, NKV);
    DeviceBuffer<T> d_att_in(att), d_dout(dout), d_dqkv(qkv.size()), d_dscores(scores);
    d_dqkv.poison();  // written in full (q, k and v parts), never accumulated
    d_dscores.poison();
    cuda::attention_backward<T>(stream.get(), d_dqkv.get(), d_dscores.get(), d_dout.get(), d_qkv.get(), d_att_in.get(),
                                B, Tn, C, NH, NKV);
    finish();
    EXPECT_TRUE(close("attention dpreatt (dscores on return)", d_dscores.download(), dpreatt, chained));
    const std::vector<T> got = d_dqkv.download();
    std::vector<T> got_q, want_q, got_kv, want_kv;  // the q part, and the k and v parts
    for (std::size_t row = 0; row < B * Tn; ++row)
      for (std::size_t i = 0; i < W; ++i) {
        (i < C ? got_q : got_kv).push_back(got[row * W + i]);
        (i < C ? want_q : want_kv).push_back(dqkv[row * W + i]);
      }
    EXPECT_TRUE(close("attention dq", got_q, want_q, chained));
    EXPECT_TRUE(close("attention dk, dv (summed over the group)", got_kv, want_kv, kv_sum));
  }
}

TEST(AttentionGqaNaiveCudaArguments, RefusesKvHeadsThatDoNotDivideH) {
  EXPECT_THROW(cuda::attention_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 8, 4, 3),
               std::invalid_argument);
  EXPECT_THROW(cuda::attention_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 8, 4, 8),
               std::invalid_argument);
}

}  // namespace
}  // namespace trainmem::kernels
