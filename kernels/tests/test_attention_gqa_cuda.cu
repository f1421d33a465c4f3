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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cudnn_attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/dtype_test_support.h"
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
double unit_roundoff(Half16 dtype) { return dtype == Half16::bf16 ? 0x1p-8 : 0x1p-11; }
double underflow(Half16 dtype) { return dtype == Half16::bf16 ? 0.0 : 0x1p-25; }

// ------------------------------------------------------------------------------------ cases

// H = 8 with Hkv = 1 (multi-query) and 2, H = 4 with Hkv = 2; T = 1, 100, 257 (none a multiple of
// the tiles but 1); D = 64 and 128; causal and not.
std::vector<AttentionShape> gqa_cases() {
  std::vector<AttentionShape> out;
  for (std::size_t D : {64u, 128u})
    for (bool causal : {false, true})
      for (std::size_t T : {1u, 100u, 257u})
        for (auto [H, Hkv] : {std::pair<std::size_t, std::size_t>{8, 1}, {8, 2}, {4, 2}}) {
          AttentionShape s;
          s.B = 2;
          s.T = T;
          s.H = H;
          s.Hkv = Hkv;
          s.D = D;
          s.causal = causal;
          out.push_back(s);
        }
  return out;
}

std::string describe(Half16 dtype, const AttentionShape& s) {
  std::ostringstream o;
  o << name(dtype) << " B=" << s.B << " T=" << s.T << " H=" << s.H << " Hkv=" << s.kv_heads() << " D=" << s.D
    << (s.causal ? " causal" : " full");
  return o.str();
}

// Part (0 q, 1 k, 2 v) of every row of a [B, T, (H + 2 Hkv) D] array, as [B, T, heads * D].
std::vector<float> part(const std::vector<float>& x, const AttentionShape& s, int which) {
  const std::size_t W = s.qkv_width(), Ckv = s.kv_heads() * s.D;
  const std::size_t begin = which == 0 ? 0 : which == 1 ? s.C() : s.C() + Ckv, width = which == 0 ? s.C() : Ckv;
  std::vector<float> out(s.B * s.T * width);
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(row * W + begin), width,
                out.begin() + static_cast<std::ptrdiff_t>(row * width));
  return out;
}

// Inputs in 16 bits, the fp32 reference on their exact values, and the bounds (plain, and with
// one rounding per query head's dk, dv for cuDNN).
struct Reference {
  std::vector<std::uint16_t> qkv16, dout16, out16;
  std::vector<float> out, lse, dq, dk, dv;
  flash_test::FlashBounds bound, bound_per_head;
};

const Reference& reference(Half16 dtype, const AttentionShape& s) {
  static std::map<std::tuple<int, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, bool>, Reference>
      cache;
  const auto key = std::make_tuple(static_cast<int>(dtype), s.B, s.T, s.H, s.kv_heads(), s.D, s.causal);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  std::mt19937 rng(static_cast<unsigned>(2000 + s.T * 7 + s.D * 3 + s.H * 11 + s.kv_heads() * 13 +
                                         (s.causal ? 1 : 0) + static_cast<int>(dtype)));
  const std::size_t W = s.qkv_width(), qk = s.C() + s.kv_heads() * s.D;  // q and k columns, then v
  std::vector<float> qkv(s.B * s.T * W), dout(s.B * s.T * s.C());
  std::uniform_real_distribution<float> wide(-2.0f, 2.0f), unit(-1.0f, 1.0f);
  for (std::size_t row = 0; row < s.B * s.T; ++row)
    for (std::size_t i = 0; i < W; ++i) qkv[row * W + i] = i < qk ? wide(rng) : unit(rng);
  for (float& x : dout) x = unit(rng);

  Reference r;
  r.qkv16 = to16(dtype, qkv);
  r.dout16 = to16(dtype, dout);
  const std::vector<float> qkv_r = from16(dtype, r.qkv16), dout_r = from16(dtype, r.dout16);
  r.out.resize(s.B * s.T * s.C());
  r.lse.resize(s.B * s.H * s.T);
  cpu::attention_reference_forward(r.out.data(), r.lse.data(), qkv_r.data(), s);
  r.out16 = to16(dtype, r.out);
  std::vector<float> dqkv(qkv.size());
  cpu::attention_reference_backward(dqkv.data(), dout_r.data(), qkv_r.data(), s);
  r.dq = part(dqkv, s, 0);
  r.dk = part(dqkv, s, 1);
  r.dv = part(dqkv, s, 2);
  const double u = unit_roundoff(dtype), a = underflow(dtype);
  r.bound = flash_test::flash_attention_bounds(qkv_r, dout_r, r.out, r.lse, r.dq, r.dk, r.dv, s, u, a);
  r.bound_per_head = flash_test::flash_attention_bounds(qkv_r, dout_r, r.out, r.lse, r.dq, r.dk, r.dv, s, u, a, u);
  return cache.emplace(key, std::move(r)).first->second;
}

// ------------------------------------------------------------------------------------ the checks

template <typename Forward>
void check_forward(Half16 dtype, const AttentionShape& s, void* stream, Forward&& forward) {
  const Reference& r = reference(dtype, s);
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

template <typename Backward>
void check_backward(Half16 dtype, const AttentionShape& s, void* stream, bool per_head_rounding,
                    Backward&& backward) {
  const Reference& r = reference(dtype, s);
  const flash_test::FlashBounds& bound = per_head_rounding ? r.bound_per_head : r.bound;
  DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out16), d_dqkv(r.qkv16.size());
  DeviceBuffer<float> d_lse(r.lse);
  d_dqkv.poison();
  finish();
  backward(stream, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get());
  finish();
  const std::vector<float> dqkv = from16(dtype, d_dqkv.download());
  EXPECT_TRUE(flash_test::within_bounds("dq", part(dqkv, s, 0), r.dq, bound.dq));
  EXPECT_TRUE(flash_test::within_bounds("dk", part(dqkv, s, 1), r.dk, bound.dk));
  EXPECT_TRUE(flash_test::within_bounds("dv", part(dqkv, s, 2), r.dv, bound.dv));
}

// ------------------------------------------------------------------------------------ flash versions

class AttentionGqaFlashCuda : public ::testing::TestWithParam<int> {};

TEST_P(AttentionGqaFlashCuda, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  TestStream stream;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const AttentionShape& s : gqa_cases()) {
      SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, s));
      check_forward(dtype, s, stream.get(), [&](void* st, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
        cuda::flash_attention_forward(st, version, dtype, out, lse, qkv, s);
      });
    }
}

TEST_P(AttentionGqaFlashCuda, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  TestStream stream;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const AttentionShape& s : gqa_cases()) {
      SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, s));
      DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, s));
      workspace.poison();
      check_backward(dtype, s, stream.get(), false,
                     [&](void* st, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                         const std::uint16_t* out, const float* lse) {
                       cuda::flash_attention_backward(st, version, dtype, dqkv, dout, qkv, out, lse, workspace.get(),
                                                      s);
                     });
    }
}

// dk and dv of a K/V head are summed over its group in a fixed order inside one block: two runs
// give the same bits (dq goes through v2/v3's atomic fp32 accumulator, so it is not compared).
TEST_P(AttentionGqaFlashCuda, KvGradientsAreDeterministic) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  const Half16 dtype = Half16::bf16;
  AttentionShape s;
  s.B = 2;
  s.T = 257;
  s.H = 8;
  s.Hkv = 2;
  s.D = 64;
  s.causal = false;
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

// Forward then backward of the same version on its own out and lse, as training runs them.
TEST_P(AttentionGqaFlashCuda, ForwardThenBackwardOnItsOwnOutputs) {
  SKIP_WITHOUT_GPU();
  const int version = GetParam();
  const Half16 dtype = Half16::bf16;
  for (const AttentionShape& s : gqa_cases()) {
    if (s.T != 257) continue;
    SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, s));
    const Reference& r = reference(dtype, s);
    DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out.size()), d_dqkv(r.qkv16.size());
    DeviceBuffer<float> d_lse(r.lse.size());
    DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, s));
    d_out.poison();
    d_lse.poison();
    d_dqkv.poison();
    workspace.poison();
    cuda::flash_attention_forward(nullptr, version, dtype, d_out.get(), d_lse.get(), d_qkv.get(), s);
    cuda::flash_attention_backward(nullptr, version, dtype, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                   d_lse.get(), workspace.get(), s);
    finish();
    const std::vector<float> dqkv = from16(dtype, d_dqkv.download());
    EXPECT_TRUE(flash_test::within_bounds("dq", part(dqkv, s, 0), r.dq, r.bound.dq));
    EXPECT_TRUE(flash_test::within_bounds("dk", part(dqkv, s, 1), r.dk, r.bound.dk));
    EXPECT_TRUE(flash_test::within_bounds("dv", part(dqkv, s, 2), r.dv, r.bound.dv));
  }
}

// Refused before anything runs (no GPU needed: nothing reaches CUDA).
TEST_P(AttentionGqaFlashCuda, RefusesKvHeadsThatDoNotDivideH) {
  const int version = GetParam();
  for (std::size_t Hkv : {3u, 8u}) {
    AttentionShape s;
    s.B = 1;
    s.T = 16;
    s.H = 4;
    s.Hkv = Hkv;
    s.D = 64;
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

#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
#define SKIP_WITHOUT_CUDNN_FRONTEND() \
  do {                                \
  } while (0)
#else
#define SKIP_WITHOUT_CUDNN_FRONTEND()                                                                            \
  GTEST_SKIP() << "cuDNN SDPA test skipped: not compiled (cuDNN or the cudnn-frontend headers were not found at " \
                  "configure time; pip install nvidia-cudnn-frontend)"
#endif

// Runs `run(dtype, shape)` for every case; cases cuDNN does not support on this device are listed
// (and the test is skipped if it supports none).
template <typename Run>
void for_cudnn_cases(Run&& run) {
  std::vector<std::string> unsupported;
  std::size_t ran = 0;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const AttentionShape& s : gqa_cases()) {
      SCOPED_TRACE(describe(dtype, s));
      try {
        run(dtype, s);
        ++ran;
      } catch (const cudnn::NotSupported& e) {
        unsupported.push_back(describe(dtype, s) + ": " + e.what());
      }
    }
  for (const std::string& u : unsupported) std::cout << "[   INFO   ] not supported by cuDNN here: " << u << '\n';
  if (ran == 0) GTEST_SKIP() << "cuDNN SDPA test skipped: cuDNN supports none of the cases on this device (first: "
                             << unsupported.front() << ")";
}

TEST(AttentionGqaCudnn, ForwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  std::cout << "[   INFO   ] " << cudnn::version() << '\n';
  TestStream stream;
  for_cudnn_cases([&](Half16 dtype, const AttentionShape& s) {
    DeviceBuffer<unsigned char> workspace(cudnn::attention_forward_workspace_bytes(dtype, s));
    check_forward(dtype, s, stream.get(), [&](void* st, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
      cudnn::attention_forward(st, dtype, out, lse, qkv, workspace.get(), s);
    });
  });
#endif
}

TEST(AttentionGqaCudnn, BackwardMatchesReference) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  TestStream stream;
  for_cudnn_cases([&](Half16 dtype, const AttentionShape& s) {
    DeviceBuffer<unsigned char> workspace(cudnn::attention_backward_workspace_bytes(dtype, s));
    check_backward(dtype, s, stream.get(), true,
                   [&](void* st, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                       const std::uint16_t* out, const float* lse) {
                     cudnn::attention_backward(st, dtype, dqkv, dout, qkv, out, lse, workspace.get(), s);
                   });
  });
#endif
}

TEST(AttentionGqaCudnn, RefusesKvHeadsThatDoNotDivideH) {
  SKIP_WITHOUT_CUDNN_FRONTEND();
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
  AttentionShape s;
  s.B = 1;
  s.T = 16;
  s.H = 4;
  s.Hkv = 3;
  s.D = 64;
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
