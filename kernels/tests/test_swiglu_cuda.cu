// The CUDA SwiGLU (kernels/cuda/swiglu.cu) against the CPU reference (kernels/cpu/swiglu.cpp) in
// each storage type, with poisoned outputs (an element never written reads as NaN and fails) on a
// non-default stream; the in-place calls; extreme gates; zero sizes. Skips where no GPU answers.
//
// Tolerance, derived from the two kernels' bounds against the exact function (u = 2^-24):
//   CPU (kernels/tests/test_swiglu_cpu.cpp): out, dup 9u relative; dgate 11u relative + 3u |dout up|
//   GPU: the same arithmetic with expf (2 ulps, 4u, instead of 1 ulp): e 4u, 1 + e 3u, r 4u,
//        s and 1 - s 9u, silu 10u, out and dup 11u -> 12u; dgate (10/e) u |dout up| + 13u |dgate|
//        -> 4u |dout up| + 14u |dgate| (a fused multiply-add only removes roundings)
// and each is then rounded once to T (u(T) relative; fp16 subnormals 2^-25 absolute), so
//   |gpu - cpu| <= 2 u(T) + 21u relative (out, dup);  2 u(T) + 25u relative + 7u |dout up| (dgate)
// plus 2 * 2^-25 absolute in fp16. Beyond |gate| = 87 the CPU returns exactly 0 or g where the GPU
// computes exp(-|g|) down to its subnormals: a difference below 2^-119 |up|.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/swiglu.h"
#include "kernels/tests/cuda_test_support.cuh"
#include "kernels/tests/swiglu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace cuda_test;    // PoisonedBuffer, all_close<T> and the names they use
using namespace swiglu_test;  // the inputs and the CPU reference, as the CPU test has them

template <typename T>
class SwigluCuda : public ::testing::Test {};
using SwigluCudaTypes = ::testing::Types<float, bf16, fp16>;
TYPED_TEST_SUITE(SwigluCuda, SwigluCudaTypes, dtype_test::DtypeNames);

constexpr double kSwigluU = 0x1p-24;

// The file comment's tolerances: max_dout_up bounds |dout up|; extra is added to the absolute part.
template <typename T>
Tolerance swiglu_value_tolerance(double extra) {
  const double subnormal = std::is_same_v<T, fp16> ? 2 * 0x1p-25 : 0.0;
  return {subnormal + extra, 2 * unit_roundoff<T>() + 21 * kSwigluU};
}
template <typename T>
Tolerance swiglu_dgate_tolerance(double max_dout_up, double extra) {
  const double subnormal = std::is_same_v<T, fp16> ? 2 * 0x1p-25 : 0.0;
  return {subnormal + 7 * kSwigluU * max_dout_up + extra, 2 * unit_roundoff<T>() + 25 * kSwigluU};
}

// The forward and backward on the GPU from the given device inputs, into poisoned outputs (out
// starting out_offset elements into its allocation): what they wrote.
template <typename T>
SwigluOutputs<T> gpu_swiglu(void* stream, const DeviceBuffer<T>& gate, const DeviceBuffer<T>& up,
                            const DeviceBuffer<T>& dout, std::size_t n, std::size_t out_offset = 0) {
  PoisonedBuffer<T> out(n, out_offset), dgate(n), dup(n);
  cuda::swiglu_forward<T>(stream, out.get(), gate.get(), up.get(), n);
  cuda::swiglu_backward<T>(stream, dgate.get(), dup.get(), dout.get(), gate.get(), up.get(), n);
  finish();
  return {out.download(), dgate.download(), dup.download()};
}

TYPED_TEST(SwigluCuda, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t n = 100003;
  const auto [gate, up, dout] = random_swiglu_inputs<T>(n, 301);
  const auto [out, dgate, dup] = cpu_swiglu(gate, up, dout);

  TestStream stream;
  // Offset 1: 16-bit pointers only 2-byte aligned, as a slice of a larger tensor can be.
  DeviceBuffer<T> d_gate(gate, 1), d_up(up), d_dout(dout);
  const SwigluOutputs<T> gpu = gpu_swiglu(stream.get(), d_gate, d_up, d_dout, n, 1);
  EXPECT_TRUE(all_close("swiglu out", gpu.out, out, swiglu_value_tolerance<T>(0.0)));
  EXPECT_TRUE(all_close("swiglu dgate", gpu.dgate, dgate, swiglu_dgate_tolerance<T>(2.0, 0.0)));
  EXPECT_TRUE(all_close("swiglu dup", gpu.dup, dup, swiglu_value_tolerance<T>(0.0)));

  // In place, as the model may call it: dgate over gate and dup over up (the GPU's own
  // out-of-place result, bit for bit: each thread reads its inputs before it writes).
  cuda::swiglu_backward<T>(stream.get(), d_gate.get(), d_up.get(), d_dout.get(), d_gate.get(), d_up.get(), n);
  finish();
  EXPECT_TRUE(all_close("swiglu dgate (in place over gate)", d_gate.download(), gpu.dgate, Tolerance{0.0, 0.0}));
  EXPECT_TRUE(all_close("swiglu dup (in place over up)", d_up.download(), gpu.dup, Tolerance{0.0, 0.0}));

  // The forward in place over its gate.
  d_gate.upload(gate);
  cuda::swiglu_forward<T>(stream.get(), d_gate.get(), d_gate.get(), d_up.get(), n);
  finish();
  EXPECT_TRUE(all_close("swiglu out (in place over gate)", d_gate.download(), gpu.out, Tolerance{0.0, 0.0}));
}

// Gates far out on both sides (the CPU test's): finite on the GPU too, and close to the CPU.
TYPED_TEST(SwigluCuda, ExtremeGatesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const auto [gate, up, dout] = extreme_swiglu_inputs<T>();
  const std::size_t n = gate.size();
  const auto [out, dgate, dup] = cpu_swiglu(gate, up, dout);

  TestStream stream;
  const DeviceBuffer<T> d_gate(gate), d_up(up), d_dout(dout);
  const SwigluOutputs<T> gpu = gpu_swiglu(stream.get(), d_gate, d_up, d_dout, n);
  for (std::size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("gate = " + std::to_string(load(gate[i])));
    EXPECT_TRUE(std::isfinite(load(gpu.out[i])));
    EXPECT_TRUE(std::isfinite(load(gpu.dgate[i])));
    EXPECT_TRUE(std::isfinite(load(gpu.dup[i])));
  }
  constexpr double flush = 0x1p-119;
  EXPECT_TRUE(all_close("swiglu out, extreme gates", gpu.out, out, swiglu_value_tolerance<T>(flush)));
  EXPECT_TRUE(all_close("swiglu dgate, extreme gates", gpu.dgate, dgate, swiglu_dgate_tolerance<T>(0.375, flush)));
  EXPECT_TRUE(all_close("swiglu dup, extreme gates", gpu.dup, dup, swiglu_value_tolerance<T>(flush)));
}

// Zero elements launch nothing (a zero-block launch would be an error) and touch no pointer.
TYPED_TEST(SwigluCuda, ZeroElementsLaunchNothing) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  EXPECT_NO_THROW(cuda::swiglu_forward<T>(stream.get(), nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::swiglu_backward<T>(stream.get(), nullptr, nullptr, nullptr, nullptr, nullptr, 0));
  finish();
}

}  // namespace
}  // namespace trainmem::kernels
