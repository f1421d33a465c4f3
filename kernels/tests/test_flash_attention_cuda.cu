// Every CUDA flash attention version (kernels/cuda/flash_attention*.cu) and cuDNN's SDPA
// (kernels/cuda/cudnn_attention.cpp) against the CPU reference (kernels/cpu/flash_attention.cpp,
// the materialized attention_reference_*, in float).
//
// Inputs: random q, k (uniform in [-2, 2], so the softmax is far from uniform: score std ~1.3),
// v and dout (uniform in [-1, 1]), rounded to the 16-bit format under test; the reference runs in
// float on exactly those rounded values. The backward is given the reference's out (rounded to
// 16 bits, as a forward would have stored it) and lse, so it is checked on its own.
// Every output (out, lse, dqkv) and the backward's workspace are poisoned first (0xff bytes: NaN
// in bf16, fp16 and fp32), so an element a kernel forgets fails. Comparison, element by element:
//
//     |gpu - ref| <= atol + rtol * |ref|        (NaN never passes)
//
// Bounds (per output element; kernels/tests/flash_attention_bounds.h derives them, and
// test_flash_attention_bounds_cpu.cpp checks them on the CPU flash attention): every source of
// error is counted from the unit roundoffs, u of the 16-bit type (2^-8 bf16, 2^-11 fp16) and
// u32 = 2^-24, the sizes T and D, and the inputs' magnitudes, evaluated on the inputs in double:
//   out  (2 rho + 2 gamma(T)) sum_j p_ij |v_jd| + u |out|, rho ~ u + fp32 score error: the weights
//        p may each be rounded to 16 bits (tensor-core versions) and the scores are fp32 sums of D
//        products; the mean of v they weight moves by at most 2 rho times the mean of |v|.
//   lse  the fp32 score error and fp32 sums only (the kernels sum the unrounded p).
//   dq, dk, dv  the same weight errors carried through dS = P (dP - D_i) (D_i from out rounded to
//        16 bits, dS itself possibly rounded) and the fp32 sums over T, plus u |grad| for the
//        output's rounding.
// A kernel that drops one key, or scales out, dv by 1 + 4u, fails them (checked by perturbing
// the CPU flash attention's result against these bounds).
// T = 1, 100, 257, 1000: none a multiple of the tiles (32, 64), 1 a single row; D = 64 and 128;
// causal and not; bf16 and fp16. Mismatch counts and the first mismatches are printed.
// Without a usable GPU every test that launches a kernel is skipped, and says why ("GPU test
// skipped: ..."); the argument checks (RefusesUnsupportedHeadDim, NamesAndRange) throw before any
// CUDA call, so they run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/flash_attention_internal.cuh"
#include "kernels/flash_attention.h"
#include "kernels/tests/attention_cuda_test_support.cuh"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using cuda::Half16;
using namespace gpu_test;
using namespace attention_cuda_test;  // Reference, check_forward, the shared test bodies

// ------------------------------------------------------------------------------------ cases and references

// B = 2, H = 3 (B = 1, H = 2 at T = 1000); all multi-head (Hkv = H).
std::vector<AttentionShape> cases() {
  std::vector<AttentionShape> out;
  for (std::size_t D : {64u, 128u})
    for (bool causal : {false, true})
      for (std::size_t T : {1u, 100u, 257u, 1000u}) {
        if (T >= 1000) out.push_back({1, T, 2, D, causal});
        else out.push_back({2, T, 3, D, causal});
      }
  return out;
}

// This file's inputs of a case (attention_test::random_attention_inputs), seeded by the case.
const Reference& reference(Half16 dtype, const AttentionShape& s) {
  const auto seed = static_cast<unsigned>(1000 + s.T * 7 + s.D * 3 + (s.causal ? 1 : 0) + static_cast<int>(dtype));
  return cached_reference(dtype, s, seed, /*with_per_head_bound=*/false);
}

// ------------------------------------------------------------------------------------ flash versions

class FlashAttentionCuda : public ::testing::TestWithParam<int> {};

TEST_P(FlashAttentionCuda, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_flash_forward_matches_reference(GetParam(), cases(), reference);
}

TEST_P(FlashAttentionCuda, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_flash_backward_matches_reference(GetParam(), cases(), reference);
}

// The backward on the forward's own out and lse, as training runs them: two of the cases, bf16.
TEST_P(FlashAttentionCuda, ForwardThenBackwardOnItsOwnOutputs) {
  SKIP_WITHOUT_GPU();
  expect_flash_forward_then_backward_within_bounds(GetParam(), {{2, 257, 3, 64, true}, {1, 1000, 2, 128, false}},
                                                   reference);
}

// Bad arguments are refused before anything runs (no GPU needed: nothing reaches CUDA).
TEST_P(FlashAttentionCuda, RefusesUnsupportedHeadDim) {
  const int version = GetParam();
  const AttentionShape shape{1, 16, 1, 96, true};
  EXPECT_THROW(cuda::flash_attention_forward(nullptr, version, Half16::bf16, nullptr, nullptr, nullptr, shape),
               std::invalid_argument);
  EXPECT_THROW(cuda::flash_attention_backward_workspace_bytes(version, shape), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Versions, FlashAttentionCuda, ::testing::Range(1, cuda::flash_attention_versions() + 1),
                         [](const ::testing::TestParamInfo<int>& info) { return "v" + std::to_string(info.param); });

TEST(FlashAttentionCudaVersions, NamesAndRange) {  // no GPU needed: the version is checked first
  ASSERT_GE(cuda::flash_attention_versions(), 3);
  for (int v = 1; v <= cuda::flash_attention_versions(); ++v)
    EXPECT_EQ(std::string(cuda::flash_attention_version_name(v)).rfind("v" + std::to_string(v) + ":", 0), 0u);
  const AttentionShape shape{1, 16, 1, 64, true};
  EXPECT_THROW(cuda::flash_attention_forward(nullptr, 0, Half16::bf16, nullptr, nullptr, nullptr, shape),
               std::invalid_argument);
  EXPECT_THROW(cuda::flash_attention_forward(nullptr, cuda::flash_attention_versions() + 1, Half16::bf16, nullptr,
                                             nullptr, nullptr, shape),
               std::invalid_argument);
}

// A kernel asking for more dynamic shared memory than the device lets a block opt in to is refused
// before the launch, with the sizes (kernels/cuda/shared_memory_limit.h), not a bare "invalid argument".
__global__ void shared_memory_probe_kernel() {}

TEST(FlashAttentionCudaSharedMemory, MoreThanTheDeviceOffersIsAClearError) {
  SKIP_WITHOUT_GPU();
  int device = 0, optin = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  const std::size_t limit = static_cast<std::size_t>(optin);
  EXPECT_NO_THROW(cuda::flash::allow_shared_memory(shared_memory_probe_kernel, limit, "probe"));
  try {
    cuda::flash::allow_shared_memory(shared_memory_probe_kernel, limit + 16, "probe");
    FAIL() << "expected a refusal above " << limit << " bytes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("probe: needs " + std::to_string(limit + 16) + " bytes"), std::string::npos)
        << e.what();
  }
}

// ------------------------------------------------------------------------------------ cuDNN

TEST(CudnnAttention, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_cudnn_forward_matches_reference(cases(), reference);
}

TEST(CudnnAttention, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  expect_cudnn_backward_matches_reference(cases(), reference, CudnnKvSum::in_fp32);
}

}  // namespace
}  // namespace trainmem::kernels
