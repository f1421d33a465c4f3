// The CUDA RoPE kernel (kernels/rope.h) against the CPU kernel in the same storage type (fp32,
// bf16, fp16; test_rope_cpu.cpp checks the CPU one), in the model's layout: q then k heads of a
// fused qkv row, v heads and padding poisoned in the input, the whole output poisoned first (0xff
// bytes: NaN), on a non-default stream. Out of place and in place (on a buffer only 2-byte aligned
// in 16 bits). The layouts: a small padded one with positions restarting at row Tn, a Llama-sized
// one (32 q heads, 8 k heads of 128), and 131072 rows of one small head -- a 128k context, where an
// fp32 angle would be off by ~1e-2 (rope.h) and fail the fp32 tolerance.
//
// Why the tolerance is what it is. Both sides compute freq_i, the angle and its cos/sin in double
// and round cos/sin to fp32. The exponent -2i/D is the same IEEE quotient on both; CUDA's pow, sin
// and cos are within 2 ulps (its math API's table), glibc's within 1, so the two freq_i differ by
// <= 6 * 2^-53 relative, the two angles (each product rounded once) by <= 8 * 2^-53 t < 2^-33
// (t < 2^17), and the double cos (sin) by < 2^-33 + 3 * 2^-53 < 2^-32. Each side rounds that to
// fp32 (within 2^-25), so the fp32 cos (sin) differ by |delta| <= 2^-24 + 2^-32 <= 1.01 * 2^-24.
// Each side then rotates in fp32 -- the CPU with two products and a sum, the GPU perhaps with an
// FMA -- within 2 * 2^-24 (|lo c| + |hi s|) <= 2 * 2^-24 n of the rotation by its own cos/sin
// (n = |pair| <= sqrt(2) for inputs in [-1, 1]), and the cos/sin difference moves an output by
// <= (|lo| + |hi|) 1.01 * 2^-24 <= 1.43 * 2^-24 n. So the fp32 outputs differ by
// <= 5.5 * 2^-24 n <= 6 * 2^-24 * sqrt(2) =: d. In 16 bits each side rounds its fp32 value once:
// |rd(a) - rd(b)| <= d + u(T)(|a| + |b|), i.e. rtol 2u(T) and atol d (1 + u(T)), plus 2 * 2^-25
// for fp16's subnormals.
// Without a usable GPU every test but the argument check is skipped, and says why.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/rope.h"
#include "kernels/tests/cuda_test_support.cuh"
#include "kernels/tests/rope_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace cuda_test;  // PoisonedBuffer, all_close<T> and the names they use
using namespace rope_test;

template <typename T>
Tolerance rope_cuda_tolerance() {
  const double d = 6 * 0x1p-24 * std::sqrt(2.0);
  if constexpr (std::is_same_v<T, float>) {
    return {d, 0.0};
  } else {
    const double u = unit_roundoff<T>();
    return {d * (1 + u) + (std::is_same_v<T, fp16> ? 0x1p-24 : 0.0), 2 * u};
  }
}

template <typename T>
::testing::AssertionResult rotated_close(const std::string& what, const std::vector<T>& gpu, const std::vector<T>& cpu,
                                         const RopeLayout& L) {
  return all_close(what, rotated_part(gpu, L), rotated_part(cpu, L), rope_cuda_tolerance<T>());
}

template <typename T>
class RopeCuda : public ::testing::Test {};
TYPED_TEST_SUITE(RopeCuda, dtype_test::StorageTypes, dtype_test::DtypeNames);

TYPED_TEST(RopeCuda, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const RopeLayout layouts[] = {{2, 37, 4, 2, 16, 3}, {2, 129, 32, 8, 128, 0}, {1, 131072, 1, 0, 16, 0}};
  TestStream stream;
  const Stream gpu{Backend::cuda, stream.get()};  // rope_qk on the CUDA kernel, on our stream
  std::uint64_t seed = 500;
  for (const RopeLayout& L : layouts) {
    // Both bases, and Llama 3.1's scaling of the frequencies (rope_frequencies.h: the same double
    // arithmetic on both backends).
    for (const RopeFrequencies& theta :
         {RopeFrequencies(10000.0), RopeFrequencies(500000.0), RopeFrequencies::llama3(500000.0, 32, 1, 4, 8192)}) {
      SCOPED_TRACE(L.describe() + " theta=" + std::to_string(theta.theta) + (theta.scaled() ? " llama3-scaled" : ""));
      const std::vector<T> x = rope_input<T>(L, ++seed), dy = rope_input<T>(L, ++seed);
      const auto [poisoned, y, dx] = cpu_rope(x, dy, L, theta);

      // Out of place, into poisoned outputs.
      DeviceBuffer<T> d_x(x), d_dy(dy);
      PoisonedBuffer<T> d_y(L.size()), d_dx(L.size());
      rope_qk(true, d_y.get(), d_x.get(), L, theta, gpu);
      rope_qk(false, d_dx.get(), d_dy.get(), L, theta, gpu);
      finish();
      const std::vector<T> gy = d_y.download(), gdx = d_dx.download();
      EXPECT_TRUE(rotated_close("rope forward", gy, y, L));
      EXPECT_TRUE(rotated_close("rope backward", gdx, dx, L));
      EXPECT_TRUE(untouched("forward, out of place", gy, poisoned, L));
      EXPECT_TRUE(untouched("backward, out of place", gdx, poisoned, L));
      EXPECT_TRUE(dtype_test::same_bits("forward's input, unchanged", d_x.download(), x));

      // In place, as the model calls it, on a buffer one element into its allocation.
      DeviceBuffer<T> d_inplace(x, 1);
      rope_qk(true, d_inplace.get(), d_inplace.get(), L, theta, gpu);
      finish();
      const std::vector<T> gy_inplace = d_inplace.download();
      EXPECT_TRUE(rotated_close("rope forward in place", gy_inplace, y, L));
      EXPECT_TRUE(untouched("forward, in place", gy_inplace, x, L));
      d_inplace.upload(dy);
      rope_qk(false, d_inplace.get(), d_inplace.get(), L, theta, gpu);
      finish();
      const std::vector<T> gdx_inplace = d_inplace.download();
      EXPECT_TRUE(rotated_close("rope backward in place", gdx_inplace, dx, L));
      EXPECT_TRUE(untouched("backward, in place", gdx_inplace, dy, L));
    }
  }
}

// Empty shapes launch nothing (and raise no error); through the dispatcher on the cuda backend.
TYPED_TEST(RopeCuda, EmptyShapesDoNothing) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  const Stream s{Backend::cuda, stream.get()};
  DeviceBuffer<T> d(64);
  d.poison();
  rope_forward<T>(s, d.get(), d.get(), 0, 4, 2, 8, 32, 0, 10000.0);   // B = 0
  rope_forward<T>(s, d.get(), d.get(), 2, 0, 2, 8, 32, 0, 10000.0);   // Tn = 0
  rope_backward<T>(s, d.get(), d.get(), 2, 4, 0, 8, 32, 0, 10000.0);  // no heads
  finish();
  const std::vector<T> after = d.download();
  const std::vector<T> poisoned(64, rope_poison<T>());
  EXPECT_TRUE(dtype_test::same_bits("buffer after empty calls", after, poisoned));
}

// The CUDA path checks its arguments before it touches the device: no GPU needed.
TEST(RopeCudaArguments, RejectsShapesItCannotRotate) {
  EXPECT_THROW(cuda::rope_forward<float>(nullptr, nullptr, nullptr, 1, 2, 1, 5, 32, 0, 10000.0),
               std::invalid_argument);  // D odd
  EXPECT_THROW(cuda::rope_backward<float>(nullptr, nullptr, nullptr, 1, 2, 2, 16, 32, 8, 10000.0),
               std::invalid_argument);  // columns [8, 40) of a 32-column row
  EXPECT_THROW(cuda::rope_forward<float>(nullptr, nullptr, nullptr, 1, 2, 1, 8, 32, 0, -1.0),
               std::invalid_argument);  // theta not positive
}

}  // namespace
}  // namespace trainmem::kernels
