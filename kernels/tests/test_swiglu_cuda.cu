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
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using dtype_test::random_values;
using dtype_test::unit_roundoff;
using dtype_test::widen;
using gpu_test::DeviceBuffer;
using gpu_test::finish;
using gpu_test::TestStream;
using gpu_test::Tolerance;

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

template <typename T>
::testing::AssertionResult all_close(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                                     Tolerance tol) {
  return gpu_test::all_close(what + " (" + dtype_name<T>() + ")", widen(gpu), widen(cpu), tol);
}

TYPED_TEST(SwigluCuda, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t n = 100003;
  const std::vector<T> gate = random_values<T>(n, 301, -8.0, 8.0), up = random_values<T>(n, 302, -2.0, 2.0),
                       dout = random_values<T>(n, 303, -1.0, 1.0);
  std::vector<T> out(n), dgate(n), dup(n);
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);

  TestStream stream;
  // Offset 1: 16-bit pointers only 2-byte aligned, as a slice of a larger tensor can be.
  DeviceBuffer<T> d_gate(gate, 1), d_up(up), d_dout(dout), d_out(n, 1), d_dgate(n), d_dup(n);
  d_out.poison();
  d_dgate.poison();
  d_dup.poison();
  cuda::swiglu_forward<T>(stream.get(), d_out.get(), d_gate.get(), d_up.get(), n);
  cuda::swiglu_backward<T>(stream.get(), d_dgate.get(), d_dup.get(), d_dout.get(), d_gate.get(), d_up.get(), n);
  finish();
  EXPECT_TRUE(all_close("swiglu out", d_out.download(), out, swiglu_value_tolerance<T>(0.0)));
  EXPECT_TRUE(all_close("swiglu dgate", d_dgate.download(), dgate, swiglu_dgate_tolerance<T>(2.0, 0.0)));
  EXPECT_TRUE(all_close("swiglu dup", d_dup.download(), dup, swiglu_value_tolerance<T>(0.0)));

  // In place, as the model may call it: dgate over gate and dup over up (the GPU's own
  // out-of-place result, bit for bit: each thread reads its inputs before it writes).
  const std::vector<T> gpu_dgate = d_dgate.download(), gpu_dup = d_dup.download();
  cuda::swiglu_backward<T>(stream.get(), d_gate.get(), d_up.get(), d_dout.get(), d_gate.get(), d_up.get(), n);
  finish();
  EXPECT_TRUE(all_close("swiglu dgate (in place over gate)", d_gate.download(), gpu_dgate, Tolerance{0.0, 0.0}));
  EXPECT_TRUE(all_close("swiglu dup (in place over up)", d_up.download(), gpu_dup, Tolerance{0.0, 0.0}));

  // The forward in place over its gate.
  const std::vector<T> gpu_out = d_out.download();
  d_gate.upload(gate);
  cuda::swiglu_forward<T>(stream.get(), d_gate.get(), d_gate.get(), d_up.get(), n);
  finish();
  EXPECT_TRUE(all_close("swiglu out (in place over gate)", d_gate.download(), gpu_out, Tolerance{0.0, 0.0}));
}

// Gates far out on both sides (as the CPU test): finite on the GPU too, and close to the CPU.
TYPED_TEST(SwigluCuda, ExtremeGatesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::vector<double> magnitudes = {1e-3, 0.5, 1.28, 20, 86.9, 87.5, 88, 100, 1e4, dtype_test::largest_finite<T>()};
  std::vector<T> gate, up, dout;
  for (const double m : magnitudes) {
    for (const double sign : {1.0, -1.0}) {
      gate.push_back(store<T>(static_cast<float>(sign * m)));
      up.push_back(store<T>(gate.size() % 2 ? 0.75f : -0.75f));
      dout.push_back(store<T>(gate.size() % 3 ? -0.5f : 0.5f));
    }
  }
  const std::size_t n = gate.size();
  std::vector<T> out(n), dgate(n), dup(n);
  cpu::swiglu_forward(out.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);

  TestStream stream;
  DeviceBuffer<T> d_gate(gate), d_up(up), d_dout(dout), d_out(n), d_dgate(n), d_dup(n);
  d_out.poison();
  d_dgate.poison();
  d_dup.poison();
  cuda::swiglu_forward<T>(stream.get(), d_out.get(), d_gate.get(), d_up.get(), n);
  cuda::swiglu_backward<T>(stream.get(), d_dgate.get(), d_dup.get(), d_dout.get(), d_gate.get(), d_up.get(), n);
  finish();
  const std::vector<T> g_out = d_out.download(), g_dgate = d_dgate.download(), g_dup = d_dup.download();
  for (std::size_t i = 0; i < n; ++i) {
    SCOPED_TRACE("gate = " + std::to_string(load(gate[i])));
    EXPECT_TRUE(std::isfinite(load(g_out[i])));
    EXPECT_TRUE(std::isfinite(load(g_dgate[i])));
    EXPECT_TRUE(std::isfinite(load(g_dup[i])));
  }
  constexpr double flush = 0x1p-119;
  EXPECT_TRUE(all_close("swiglu out, extreme gates", g_out, out, swiglu_value_tolerance<T>(flush)));
  EXPECT_TRUE(all_close("swiglu dgate, extreme gates", g_dgate, dgate, swiglu_dgate_tolerance<T>(0.375, flush)));
  EXPECT_TRUE(all_close("swiglu dup, extreme gates", g_dup, dup, swiglu_value_tolerance<T>(flush)));
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
