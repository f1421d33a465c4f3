// What the CUDA attention tests share (test_flash_attention_cuda.cu: multi-head attention;
// test_attention_gqa_cuda.cu: grouped K/V heads): each runs the flash versions and cuDNN's SDPA
// on its own cases against the fp32 reference, the same way:
//   - 16-bit values (bf16, fp16 as cuda::Half16) and their rounding;
//   - Reference: a case's inputs in 16 bits and the fp32 reference on their exact values, with
//     its bounds (attention_test_support.h, flash_attention_bounds.h), computed once per case;
//   - check_forward, check_backward: a kernel on poisoned outputs (0xff: NaN, so an element it
//     forgets fails), compared with the reference;
//   - the bodies of the tests both files run (ForwardMatchesReference and so on), given a file's
//     cases and its `reference` (each file seeds its own inputs);
//   - cuDNN: SKIP_WITHOUT_CUDNN_FRONTEND and the loop that lists the cases cuDNN does not support.
// CUDA tests only (gpu_test_support.h needs the CUDA runtime); CPU tests use
// attention_test_support.h alone.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/convert.h"
#include "kernels/cudnn_attention.h"
#include "kernels/flash_attention.h"
#include "kernels/tests/attention_test_support.h"
#include "kernels/tests/flash_attention_bounds.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels::attention_cuda_test {

using cuda::Half16;

// ------------------------------------------------------------------------------------ 16-bit values

inline std::vector<std::uint16_t> to16(Half16 dtype, const std::vector<float>& x) {
  std::vector<std::uint16_t> out(x.size());
  if (dtype == Half16::bf16) cpu::to_bf16(out.data(), x.data(), x.size());
  else cpu::to_fp16(out.data(), x.data(), x.size());
  return out;
}
inline std::vector<float> from16(Half16 dtype, const std::vector<std::uint16_t>& x) {
  std::vector<float> out(x.size());
  if (dtype == Half16::bf16) cpu::from_bf16(out.data(), x.data(), x.size());
  else cpu::from_fp16(out.data(), x.data(), x.size());
  return out;
}
inline const char* half16_name(Half16 dtype) { return dtype == Half16::bf16 ? "bf16" : "fp16"; }
inline double unit_roundoff(Half16 dtype) { return dtype == Half16::bf16 ? 0x1p-8 : 0x1p-11; }
// Rounding below the normal range: fp16's subnormals are spaced 2^-24 (bf16's start below 1e-38).
inline double underflow(Half16 dtype) { return dtype == Half16::bf16 ? 0.0 : 0x1p-25; }

// "bf16 B=2 T=100 H=8 Hkv=2 D=64 causal"; Hkv only where the case gives it (grouped K/V heads).
inline std::string describe(Half16 dtype, const AttentionShape& s) {
  std::ostringstream o;
  o << half16_name(dtype) << " B=" << s.B << " T=" << s.T << " H=" << s.H;
  if (s.Hkv != 0) o << " Hkv=" << s.kv_heads();
  o << " D=" << s.D << (s.causal ? " causal" : " full");
  return o.str();
}

// ------------------------------------------------------------------------------------ references

// A case's inputs in 16 bits, and the fp32 reference computed on their exact values (out, lse,
// dq, dk, dv and `bound`, how far a kernel may be from them). bound_per_head (where asked for):
// the bounds with one more 16-bit rounding of each query head's dk, dv before the group is added
// (cuDNN's GQA backward may round so).
struct Reference : attention_test::Fp32Reference {
  std::vector<std::uint16_t> qkv16, dout16, out16;  // out16: the reference out, rounded
  flash_test::FlashBounds bound_per_head;
};

// The reference of one case, computed on its first use (the bounds cost O(T^2 D) per head in
// double) and kept for the rest of the run.
inline const Reference& cached_reference(Half16 dtype, const AttentionShape& s, unsigned seed,
                                         bool with_per_head_bound) {
  static std::map<std::tuple<int, std::size_t, std::size_t, std::size_t, std::size_t, std::size_t, bool, unsigned>,
                  Reference>
      cache;
  const auto key = std::make_tuple(static_cast<int>(dtype), s.B, s.T, s.H, s.kv_heads(), s.D, s.causal, seed);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;

  const attention_test::AttentionInputs in = attention_test::random_attention_inputs(s, seed);
  Reference r;
  r.qkv16 = to16(dtype, in.qkv);
  r.dout16 = to16(dtype, in.dout);
  const std::vector<float> qkv_r = from16(dtype, r.qkv16), dout_r = from16(dtype, r.dout16);
  const double u = unit_roundoff(dtype), a = underflow(dtype);
  attention_test::Fp32Reference& fp32 = r;  // out, lse, dq, dk, dv and bound
  fp32 = attention_test::fp32_reference(qkv_r, dout_r, s, u, a);
  r.out16 = to16(dtype, r.out);
  if (with_per_head_bound)
    r.bound_per_head = flash_test::flash_attention_bounds(qkv_r, dout_r, r.out, r.lse, r.dq, r.dk, r.dv, s, u, a, u);
  return cache.emplace(key, std::move(r)).first->second;
}

// A test file's reference of a case: cached_reference with that file's seed.
using ReferenceOf = const Reference& (*)(Half16 dtype, const AttentionShape& s);

// ------------------------------------------------------------------------------------ the checks

// Runs `forward(stream, out, lse, qkv)` on poisoned outputs and compares with the reference.
template <typename Forward>
void check_forward(const Reference& r, Half16 dtype, void* stream, Forward&& forward) {
  gpu_test::DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_out(r.out.size());
  gpu_test::DeviceBuffer<float> d_lse(r.lse.size());
  d_out.poison();
  d_lse.poison();
  gpu_test::finish();
  forward(stream, d_out.get(), d_lse.get(), d_qkv.get());
  gpu_test::finish();
  EXPECT_TRUE(flash_test::within_bounds("out", from16(dtype, d_out.download()), r.out, r.bound.out));
  EXPECT_TRUE(flash_test::within_bounds("lse", d_lse.download(), r.lse, r.bound.lse));
}

// Runs `backward(stream, dqkv, dout, qkv, out, lse)` on a poisoned dqkv, from the reference's out
// (rounded) and lse, and compares dq, dk, dv within `bound` (r.bound or r.bound_per_head).
template <typename Backward>
void check_backward(const Reference& r, const flash_test::FlashBounds& bound, Half16 dtype, const AttentionShape& s,
                    void* stream, Backward&& backward) {
  gpu_test::DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out16), d_dqkv(r.qkv16.size());
  gpu_test::DeviceBuffer<float> d_lse(r.lse);
  d_dqkv.poison();
  gpu_test::finish();
  backward(stream, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get());
  gpu_test::finish();
  attention_test::expect_gradients_within_bounds(from16(dtype, d_dqkv.download()), r, bound, s);
}

// ------------------------------------------------------------------------------------ flash versions

// Runs `run(dtype, shape)` for every case, bf16 and fp16, each traced with the version's name.
template <typename Run>
void for_flash_cases(int version, const std::vector<AttentionShape>& cases, Run&& run) {
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const AttentionShape& s : cases) {
      SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, s));
      run(dtype, s);
    }
}

// The body of ForwardMatchesReference: flash version `version` on every case, on a non-default
// stream.
inline void expect_flash_forward_matches_reference(int version, const std::vector<AttentionShape>& cases,
                                                   ReferenceOf reference) {
  gpu_test::TestStream stream;
  for_flash_cases(version, cases, [&](Half16 dtype, const AttentionShape& s) {
    check_forward(reference(dtype, s), dtype, stream.get(),
                  [&](void* st, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
                    cuda::flash_attention_forward(st, version, dtype, out, lse, qkv, s);
                  });
  });
}

// The body of BackwardMatchesReference: the same for the backward, within the plain bounds (the
// flash versions sum a group's dk, dv in fp32).
inline void expect_flash_backward_matches_reference(int version, const std::vector<AttentionShape>& cases,
                                                    ReferenceOf reference) {
  gpu_test::TestStream stream;
  for_flash_cases(version, cases, [&](Half16 dtype, const AttentionShape& s) {
    gpu_test::DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, s));
    workspace.poison();  // the kernels must not count on a zeroed workspace
    const Reference& r = reference(dtype, s);
    check_backward(r, r.bound, dtype, s, stream.get(),
                   [&](void* st, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                       const std::uint16_t* out, const float* lse) {
                     cuda::flash_attention_backward(st, version, dtype, dqkv, dout, qkv, out, lse, workspace.get(), s);
                   });
  });
}

// The body of ForwardThenBackwardOnItsOwnOutputs: forward then backward of one version in bf16,
// the backward on the forward's own out and lse (as training runs them), on the default stream.
// The bounds hold for any out and lse within theirs (flash_attention_bounds.h), which the forward
// test checks.
inline void expect_flash_forward_then_backward_within_bounds(int version, const std::vector<AttentionShape>& cases,
                                                             ReferenceOf reference) {
  const Half16 dtype = Half16::bf16;
  for (const AttentionShape& s : cases) {
    SCOPED_TRACE(std::string(cuda::flash_attention_version_name(version)) + " | " + describe(dtype, s));
    const Reference& r = reference(dtype, s);
    gpu_test::DeviceBuffer<std::uint16_t> d_qkv(r.qkv16), d_dout(r.dout16), d_out(r.out.size()),
        d_dqkv(r.qkv16.size());
    gpu_test::DeviceBuffer<float> d_lse(r.lse.size());
    gpu_test::DeviceBuffer<unsigned char> workspace(cuda::flash_attention_backward_workspace_bytes(version, s));
    d_out.poison();
    d_lse.poison();
    d_dqkv.poison();
    workspace.poison();
    cuda::flash_attention_forward(nullptr, version, dtype, d_out.get(), d_lse.get(), d_qkv.get(), s);
    cuda::flash_attention_backward(nullptr, version, dtype, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(),
                                   d_lse.get(), workspace.get(), s);
    gpu_test::finish();
    attention_test::expect_gradients_within_bounds(from16(dtype, d_dqkv.download()), r, r.bound, s);
  }
}

// ------------------------------------------------------------------------------------ cuDNN

// cuDNN's SDPA is compiled only where configure found cuDNN and the cudnn-frontend headers; its
// tests say so and skip elsewhere.
inline constexpr const char kCudnnNotCompiled[] =
    "cuDNN SDPA test skipped: not compiled (cuDNN or the cudnn-frontend headers were not found at configure time; "
    "pip install nvidia-cudnn-frontend)";
#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
#define SKIP_WITHOUT_CUDNN_FRONTEND() \
  do {                                \
  } while (0)
#else
#define SKIP_WITHOUT_CUDNN_FRONTEND() GTEST_SKIP() << ::trainmem::kernels::attention_cuda_test::kCudnnNotCompiled
#endif

// Runs `run(dtype, shape)` for every case, bf16 and fp16; cases cuDNN does not support on this
// device are listed (and the test is skipped if it supports none).
template <typename Run>
void for_cudnn_cases(const std::vector<AttentionShape>& cases, Run&& run) {
  std::vector<std::string> unsupported;
  std::size_t ran = 0;
  for (Half16 dtype : {Half16::bf16, Half16::fp16})
    for (const AttentionShape& s : cases) {
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

// How cuDNN's backward may sum a K/V head's dk, dv over its group: which bound it is held to.
enum class CudnnKvSum {
  in_fp32,            // multi-head attention: no group to sum (r.bound)
  rounded_per_head,   // grouped K/V heads: one 16-bit rounding per query head first (r.bound_per_head)
};

#if defined(TRAINMEM_WITH_CUDNN_FRONTEND) && TRAINMEM_WITH_CUDNN_FRONTEND
// The body of the cuDNN ForwardMatchesReference test (with cuDNN's version printed first).
inline void expect_cudnn_forward_matches_reference(const std::vector<AttentionShape>& cases, ReferenceOf reference) {
  std::cout << "[   INFO   ] " << cudnn::version() << '\n';
  gpu_test::TestStream stream;
  for_cudnn_cases(cases, [&](Half16 dtype, const AttentionShape& s) {
    gpu_test::DeviceBuffer<unsigned char> workspace(cudnn::attention_forward_workspace_bytes(dtype, s));
    check_forward(reference(dtype, s), dtype, stream.get(),
                  [&](void* st, std::uint16_t* out, float* lse, const std::uint16_t* qkv) {
                    cudnn::attention_forward(st, dtype, out, lse, qkv, workspace.get(), s);
                  });
  });
}

// The body of the cuDNN BackwardMatchesReference test.
inline void expect_cudnn_backward_matches_reference(const std::vector<AttentionShape>& cases, ReferenceOf reference,
                                                    CudnnKvSum kv_sum) {
  gpu_test::TestStream stream;
  for_cudnn_cases(cases, [&](Half16 dtype, const AttentionShape& s) {
    gpu_test::DeviceBuffer<unsigned char> workspace(cudnn::attention_backward_workspace_bytes(dtype, s));
    const Reference& r = reference(dtype, s);
    check_backward(r, kv_sum == CudnnKvSum::rounded_per_head ? r.bound_per_head : r.bound, dtype, s, stream.get(),
                   [&](void* st, std::uint16_t* dqkv, const std::uint16_t* dout, const std::uint16_t* qkv,
                       const std::uint16_t* out, const float* lse) {
                     cudnn::attention_backward(st, dtype, dqkv, dout, qkv, out, lse, workspace.get(), s);
                   });
  });
}
#else
// Not compiled: the tests skip, saying why.
inline void expect_cudnn_forward_matches_reference(const std::vector<AttentionShape>&, ReferenceOf) {
  GTEST_SKIP() << kCudnnNotCompiled;
}
inline void expect_cudnn_backward_matches_reference(const std::vector<AttentionShape>&, ReferenceOf, CudnnKvSum) {
  GTEST_SKIP() << kCudnnNotCompiled;
}
#endif

}  // namespace trainmem::kernels::attention_cuda_test
