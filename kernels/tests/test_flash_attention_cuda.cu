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

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cuda/flash_attention_internal.cuh"
#include "kernels/cudnn_attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/flash_attention_bounds.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using cuda::Half16;
using namespace gpu_test;


// ------------------------------------------------------------------------------------ 16-bit values

std::vector<std::uint16_t> to16(Half16 dtype, const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  if (dtype == Half16::bf16) cpu::to_bf16(out.data(), x.data(), x.size());
  else cpu::to_fp16(out.data(), x.data(), x.size());
  return out;
}
std::vector<float> from16(Half16 dtype, const std::vector<std::uint16_t>& x) {
  std::vector<float> out(x.size());
  if (dtype == Half16::bf16) cpu::from_bf16(out.data(), x.data(), x.size());
  else cpu::from_fp16(out.data(), x.data(), x.size());
  return out;
}
const char* name(Half16 dtype) { return dtype == Half16::bf16 ? "bf16" : "fp16"; }

// ------------------------------------------------------------------------------------ comparison

double unit_roundoff(Half16 dtype) { return dtype == Half16::bf16 ? 0x1p-8 : 0x1p-11; }
// Rounding below the normal range: fp16's subnormals are spaced 2^-24 (bf16's start below 1e-38).
double underflow(Half16 dtype) { return dtype == Half16::bf16 ? 0.0 : 0x1p-25; }

// ------------------------------------------------------------------------------------ cases and references

struct Case {
  std::size_t B, T, H, D;
  bool causal;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::size_t D : {64u, 128u})
    for (bool causal : {false, true})
      for (std::size_t T : {1u, 100u, 257u, 1000u}) {
        if (T >= 1000) out.push_back({1, T, 2, D, causal});
        else out.push_back({2, T, 3, D, causal});
      }
  return out;
}

AttentionShape shape_of(const Case& c) { return {c.B, c.T, c.H, c.D, c.causal}; }

std::string describe(Half16 dtype, const Case& c) {
  std::ostringstream s;
  s << name(dtype) << " B=" << c.B << " T=" << c.T << " H=" << c.H << " D=" << c.D << (c.causal ? " causal" : " full");
  return s.str();
}

// Inputs in 16 bits, and the reference computed in float on their exact values.
struct Reference {
  std::vector<std::uint16_t> qkv16, dout16, out16;  // out16: the reference out, rounded
  std::vector<float> out, lse, dq, dk, dv;           // dq/dk/dv: the thirds of the reference dqkv
  flash_test::FlashBounds bound;                     // how far a kernel may be from them
};

// The q, k or v third (part 0, 1, 2) of a [B, T, 3C] array, as [B, T, C].
std::vector<float> third(const std::vector<float>& x, const Case& c, int part) {
  const std::size_t C = c.H * c.D;
  std::vector<float> out(c.B * c.T * C);
  for (std::size_t row = 0; row < c.B * c.T; ++row)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(row * 3 * C + part * C), C,
                out.begin() + static_cast<std::ptrdiff_t>(row * C));
  return out;
}

const Reference& reference(Half16 dtype, const Case& c) {
  static std::map<std::tuple<int, std::size_t, std::size_t, std::size_t, std::size_t, bool>, Reference> cache;
  const auto key = std::make_tuple(static_cast<int>(dtype), c.B, c.T, c.H, c.D, c.causal);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  std::mt19937 rng(static_cast<unsigned>(1000 + c.T * 7 + c.D * 3 + (c.causal ? 1 : 0) + static_cast<int>(dtype)));
  const std::size_t C = c.H * c.D;
  std::vector<float> qkv(c.B * c.T * 3 * C), dout(c.B * c.T * C);
  std::uniform_real_distribution<float> wide(-2.0f, 2.0f), unit(-1.0f, 1.0f);
  for (std::size_t row = 0; row < c.B * c.T; ++row)
    for (std::size_t i = 0; i < 3 * C; ++i) qkv[row * 3 * C + i] = i < 2 * C ? wide(rng) : unit(rng);  // q, k | v
  for (float& x : dout) x = unit(rng);

  Reference r;
  r.qkv16 = to16(dtype, qkv);
  r.dout16 = to16(dtype, dout);
  const std::vector<float> qkv_r = from16(dtype, r.qkv16), dout_r = from16(dtype, r.dout16);
  const AttentionShape shape = shape_of(c);
  r.out.resize(c.B * c.T * C);
  r.lse.resize(c.B * c.H * c.T);
  cpu::attention_reference_forward(r.out.data(), r.lse.data(), qkv_r.data(), shape);
  r.out16 = to16(dtype, r.out);
  std::vector<float> dqkv(qkv.size());
  cpu::attention_reference_backward(dqkv.data(), dout_r.data(), qkv_r.data(), shape);
  r.dq = third(dqkv, c, 0);
  r.dk = third(dqkv, c, 1);
  r.dv = third(dqkv, c, 2);
  r.bound = flash_test::flash_attention_bounds(qkv_r, dout_r, r.out, r.lse, r.dq, r.dk, r.dv, shape,
                                               unit_roundoff(dtype), underflow(dtype));
  return cache.emplace(key, std::move(r)).first->second;
}

// ------------------------------------------------------------------------------------ the checks

// Runs `forward(stream, out, lse, qkv)` on poisoned outputs and compares with the reference.
template <typename Forward>
void check_forward(Half16 dtype, const Case& c, void* stream, Forward&& forward) {
  const Reference& r = reference(dtype, c);
  DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_out(r.out.size());
  DeviceBuffer<float> d_lse(r.lse.size());
  d_out.poison();
  d_lse.poison();
  finish();
  forward(stream, d_out.get(), d_lse.get(), d_qkv.get());
  finish();
  EXPECT_TRUE(flash_test::within_bounds("out", from16(dtype, d_out.download()), r.out, r.bound.out));
  EXPECT_TRUE(flash_test::within_bounds("lse", d_lse.download(), r.lse, r.bound.lse));
}

// Runs `backward(stream, dqkv, dout, qkv, out, lse)` on a poisoned dqkv and compares dq, dk, dv.
template <typename Backward>
void check_backward(Half16 dtype, const Case& c, void* stream, Backward&& backward) {
  const Reference& r = reference(dtype, c);
  DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out16), d_dqkv(r.qkv16.size());
  DeviceBuffer<float> d_lse(r.lse);
  d_dqkv.poison();
  finish();
  backward(stream, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get());
  finish();
  const std::vector<float> dqkv = from16(dtype, d_dqkv.download());
  EXPECT_TRUE(flash_test::within_bounds("dq", third(dqkv, c, 0), r.dq, r.bound.dq));
  EXPECT_TRUE(flash_test::within_bounds("dk", third(dqkv, c, 1), r.dk, r.bound.dk));
  EXPECT_TRUE(flash_test::within_bounds("dv", third(dqkv, c, 2), r.dv, r.bound.dv));
}

// ------------------------------------------------------------------------------------ flash versions

class FlashAttentionCuda : public ::testing::TestWithParam<int> {};

TEST_P(FlashAttentionCuda, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  TestStream stream;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, c));
      check_forward(dtype, c, stream.get(), [&](void* s, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
        cuda::flash_attention_forward(s, version, dtype, out, lse, qkv, shape_of(c));
      });
    }
}

TEST_P(FlashAttentionCuda, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  TestStream stream;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, c));
      const AttentionShape shape = shape_of(c);
      DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, shape));
      workspace.poison();  // the kernels must not count on a zeroed workspace
      check_backward(dtype, c, stream.get(),
                     [&](void* s, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                         const std::uint16_t* out, const float* lse) {
                       cuda::flash_attention_backward(s, version, dtype, dqkv, dout, qkv, out, lse, workspace.get(),
                                                      shape);
                     });
    }
}

// Forward then backward of the same version, the backward on the forward's own out and lse (as
// training runs them), on the default stream.
TEST_P(FlashAttentionCuda, ForwardThenBackwardOnItsOwnOutputs) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  const Half16 dtype = Half16::bf16;
  for (const Case& c : {Case{2, 257, 3, 64, true}, Case{1, 1000, 2, 128, false}}) {
    SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, c));
    const Reference& r = reference(dtype, c);
    const AttentionShape shape = shape_of(c);
    DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out.size()), d_dqkv(r.qkv16.size());
    DeviceBuffer<float> d_lse(r.lse.size());
    DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, shape));
    d_out.poison();
    d_lse.poison();
    d_dqkv.poison();
    workspace.poison();
    cuda::flash_attention_forward(nullptr, version, dtype, d_out.get(), d_lse.get(), d_qkv.get(), shape);
    cuda::flash_attention_backward(nullptr, version, dtype, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                   d_lse.get(), workspace.get(), shape);
    finish();
    const std::vector<float> dqkv = from16(dtype, d_dqkv.download());
    // The backward from the kernel's own out and lse: the bounds hold for any out and lse within
    // theirs (flash_attention_bounds.h), which the forward test checks.
    EXPECT_TRUE(flash_test::within_bounds("dq", third(dqkv, c, 0), r.dq, r.bound.dq));
    EXPECT_TRUE(flash_test::within_bounds("dk", third(dqkv, c, 1), r.dk, r.bound.dk));
    EXPECT_TRUE(flash_test::within_bounds("dv", third(dqkv, c, 2), r.dv, r.bound.dv));
  }
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

#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
#define SKIP_WITHOUT_CUDNN_FRONTEND() \
  do {                                \
  } while (0)
#else
#define SKIP_WITHOUT_CUDNN_FRONTEND()                                                                            \
  GTEST_SKIP() << "cuDNN SDPA test skipped: not compiled (cuDNN or the cudnn-frontend headers were not found at " \
                  "configure time; pip install nvidia-cudnn-frontend)"
#endif

// Runs `run(dtype, case)` for every case; cases cuDNN does not support on this device are listed
// (and the test is skipped if it supports none).
template <typename Run>
void for_cudnn_cases(Run&& run) {
  std::vector<std::string> unsupported;
  std::size_t ran = 0;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const Case& c : cases()) {
      SCOPED_TRACE(describe(dtype, c));
      try {
        run(dtype, c);
        ++ran;
      } catch (const cudnn::NotSupported& e) {
        unsupported.push_back(describe(dtype, c) + ": " + e.what());
      }
    }
  for (const std::string& u : unsupported) std::cout << "[   INFO   ] not supported by cuDNN here: " << u << '\n';
  if (ran == 0) GTEST_SKIP() << "cuDNN SDPA test skipped: cuDNN supports none of the cases on this device (first: "
                             << unsupported.front() << ")";
}

TEST(CudnnAttention, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  std::cout << "[   INFO   ] " << cudnn::version() << '\n';
  TestStream stream;
  for_cudnn_cases([&](Half16 dtype, const Case& c) {
    const AttentionShape shape = shape_of(c);
    DeviceBuffer<unsigned char> workspace(cudnn::attention_forward_workspace_bytes(dtype, shape));
    check_forward(dtype, c, stream.get(), [&](void* s, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
      cudnn::attention_forward(s, dtype, out, lse, qkv, workspace.get(), shape);
    });
  });
#endif
}

TEST(CudnnAttention, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  TestStream stream;
  for_cudnn_cases([&](Half16 dtype, const Case& c) {
    const AttentionShape shape = shape_of(c);
    DeviceBuffer<unsigned char> workspace(cudnn::attention_backward_workspace_bytes(dtype, shape));
    check_backward(dtype, c, stream.get(),
                   [&](void* s, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                       const std::uint16_t* out, const float* lse) {
                     cudnn::attention_backward(s, dtype, dqkv, dout, qkv, out, lse, workspace.get(), shape);
                   });
  });
#endif
}

}  // namespace
}  // namespace trainmem::kernels
