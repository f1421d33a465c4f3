// The CUDA RMSNorm (kernels/cuda/rmsnorm.cu) against the CPU one (kernels/cpu/rmsnorm.cpp, which
// test_rmsnorm_cpu.cpp checks against its definition and double) in each storage type: fp32, bf16,
// fp16. Fresh random inputs (seeded, never zero); written outputs (out, rstd) and the workspace
// poisoned first (0xff bytes: NaN in every float format, so an element the kernel forgets shows
// up); accumulated outputs (dx, dweight) start from the same random values on both sides; every
// kernel runs on a non-default stream. Each element must be within the bound derived in
// kernels/tests/rmsnorm_gpu_bounds.h (from fp32's unit roundoff and each side's order of
// summation), evaluated on these inputs. Shapes are not multiples of 32 (the warp), except Llama's
// C = 4096; N = 20000 gives 254 bands of dweight partials.
// Without a usable GPU every test is skipped, and says why ("GPU test skipped: ...").
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/rmsnorm.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_test_support.h"
#include "kernels/tests/rmsnorm_gpu_bounds.h"

namespace trainmem::kernels {
namespace {

using dtype_test::random_values;
using dtype_test::widen;
using gpu_test::DeviceBuffer;
using gpu_test::finish;
using gpu_test::TestStream;
using rmsnorm_test::StorageRounding;

template <typename T>
StorageRounding storage_rounding() {
  if constexpr (std::is_same_v<T, float>) {
    return {};  // fp32 outputs are the fp32 values: no second rounding
  } else {
    return {dtype_test::unit_roundoff<T>(), std::is_same_v<T, fp16> ? 0x1p-25 : 0.0};
  }
}

// Element by element |gpu - cpu| <= bound (NaN never passes), compared as the floats they stand for.
template <typename T>
::testing::AssertionResult within_bounds(const std::string& what, const std::vector<T>& gpu_t,
                                         const std::vector<T>& cpu_t, const std::vector<double>& bound) {
  const std::vector<float> gpu = widen(gpu_t), cpu = widen(cpu_t);
  if (gpu.size() != cpu.size() || bound.size() != cpu.size())
    return ::testing::AssertionFailure() << what << ": " << gpu.size() << " GPU values, " << cpu.size() << " CPU, "
                                         << bound.size() << " bounds";
  std::size_t wrong = 0, nans = 0;
  double worst_ratio = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
    if (diff <= bound[i]) continue;  // false for NaN: a poisoned element fails
    if (std::isnan(gpu[i])) ++nans;
    else worst_ratio = std::max(worst_ratio, diff / bound[i]);
    if (wrong < 5)
      first << "\n    [" << i << "] gpu " << gpu[i] << "  cpu " << cpu[i] << "  |diff| " << diff << "  bound " << bound[i];
    ++wrong;
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " (" << dtype_name<T>() << "): " << wrong << " of " << cpu.size()
                                       << " elements beyond their bounds (" << nans << " NaN, worst finite |diff| "
                                       << worst_ratio << " times its bound); first ones:" << first.str();
}

template <typename T>
class RmsNormCuda : public ::testing::Test {};
TYPED_TEST_SUITE(RmsNormCuda, dtype_test::StorageTypes, dtype_test::DtypeNames);

struct RmsNormCase {
  std::size_t N, C;
  double eps;
};
// eps 0.1 (near the rows' mean square of 1.3 when C = 7): a kernel that drops eps fails.
constexpr RmsNormCase kRmsNormCases[] = {{37, 72, 1e-5}, {300, 1031, 1e-6}, {5, 7, 0.1}, {8, 4096, 1e-5},
                                         {20000, 7, 1e-5}};

TYPED_TEST(RmsNormCuda, ForwardAndBackwardMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const StorageRounding rounding = storage_rounding<T>();
  TestStream stream;
  std::uint64_t seed = 500;
  for (const auto [N, C, eps] : kRmsNormCases) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " eps=" + std::to_string(eps));
    const std::vector<T> x = random_values<T>(N * C, ++seed, -1.5, 2.5), weight = random_values<T>(C, ++seed, 0.5, 1.5);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), weight.data(), N, C, eps);

    // x one element into its allocation: a 16-bit slice is only 2-byte aligned.
    DeviceBuffer<T> d_x(x, 1), d_w(weight), d_out(N * C);
    DeviceBuffer<float> d_rstd(N);
    d_out.poison();
    d_rstd.poison();
    cuda::rmsnorm_forward<T>(stream.get(), d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C,
                             static_cast<float>(eps));
    finish();
    std::vector<double> rstd_bound(N);
    for (std::size_t n = 0; n < N; ++n) rstd_bound[n] = rmsnorm_test::rmsnorm_rstd_rtol(C) * rstd[n];
    const std::vector<float> x32 = widen(x), w32 = widen(weight);
    EXPECT_TRUE(within_bounds("rmsnorm rstd", d_rstd.download(), rstd, rstd_bound));
    EXPECT_TRUE(within_bounds("rmsnorm out", d_out.download(), out,
                              rmsnorm_test::rmsnorm_out_bounds(x32, w32, rstd, widen(out), N, C, rounding)));

    // Backward from the CPU's rstd; dx and dweight accumulate onto the same random values.
    const std::vector<T> dout = random_values<T>(N * C, ++seed, -1.0, 1.0);
    const std::vector<T> dx0 = random_values<T>(N * C, ++seed, -1.0, 1.0), dw0 = random_values<T>(C, ++seed, -1.0, 1.0);
    std::vector<T> dx = dx0, dw = dw0;
    cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), weight.data(), rstd.data(), N, C);

    DeviceBuffer<T> d_dout(dout), d_dx(dx0, 1), d_dw(dw0);
    DeviceBuffer<float> d_rstd_in(rstd), d_workspace(rmsnorm_backward_workspace_bytes(N, C) / sizeof(float));
    d_workspace.poison();  // the band partials are written before they are read
    cuda::rmsnorm_backward<T>(stream.get(), d_dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(),
                              d_rstd_in.get(), d_workspace.get(), N, C);
    finish();
    const std::vector<T> gpu_dx = d_dx.download(), gpu_dw = d_dw.download();
    const rmsnorm_test::RmsNormBackwardBounds bounds = rmsnorm_test::rmsnorm_backward_bounds(
        widen(dout), x32, w32, rstd, widen(dx0), widen(dw0), widen(dx), widen(dw), N, C, rounding);
    EXPECT_TRUE(within_bounds("rmsnorm dx (accumulated)", gpu_dx, dx, bounds.dx));
    EXPECT_TRUE(within_bounds("rmsnorm dweight (accumulated)", gpu_dw, dw, bounds.dweight));

    // Deterministic: the same call from the same starting values gives the same bits (no atomics).
    d_dx.upload(dx0);
    d_dw.upload(dw0);
    d_workspace.poison();
    cuda::rmsnorm_backward<T>(stream.get(), d_dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(),
                              d_rstd_in.get(), d_workspace.get(), N, C);
    finish();
    EXPECT_TRUE(dtype_test::same_bits("rmsnorm dx, run again", d_dx.download(), gpu_dx));
    EXPECT_TRUE(dtype_test::same_bits("rmsnorm dweight, run again", d_dw.download(), gpu_dw));
  }
}

// Through the dispatcher on the cuda backend (eps given in double, passed on in fp32): the same
// bits as the cuda:: calls.
TEST(RmsNormCuda, TheDispatcherRunsTheCudaKernels) {
  SKIP_WITHOUT_GPU();
  const std::size_t N = 19, C = 45;
  const double eps = 1e-5;
  TestStream created;
  const Stream s{Backend::cuda, created.get()};
  const std::vector<bf16> x = random_values<bf16>(N * C, 600, -1.5, 2.5), w = random_values<bf16>(C, 601, 0.5, 1.5);
  const std::vector<bf16> dout = random_values<bf16>(N * C, 602, -1.0, 1.0), dx0 = random_values<bf16>(N * C, 603, -1.0, 1.0),
                          dw0 = random_values<bf16>(C, 604, -1.0, 1.0);
  DeviceBuffer<bf16> d_x(x), d_w(w), d_dout(dout), d_out(N * C), d_out_direct(N * C), d_dx(dx0), d_dw(dw0),
      d_dx_direct(dx0), d_dw_direct(dw0);
  DeviceBuffer<float> d_rstd(N), d_rstd_direct(N), d_workspace(rmsnorm_backward_workspace_bytes(N, C) / sizeof(float));
  rmsnorm_forward<bf16>(s, d_out.get(), d_rstd.get(), d_x.get(), d_w.get(), N, C, eps);
  cuda::rmsnorm_forward<bf16>(s.cuda_stream, d_out_direct.get(), d_rstd_direct.get(), d_x.get(), d_w.get(), N, C,
                              static_cast<float>(eps));
  rmsnorm_backward<bf16>(s, d_dx.get(), d_dw.get(), d_dout.get(), d_x.get(), d_w.get(), d_rstd.get(), d_workspace.get(),
                         N, C);
  cuda::rmsnorm_backward<bf16>(s.cuda_stream, d_dx_direct.get(), d_dw_direct.get(), d_dout.get(), d_x.get(), d_w.get(),
                               d_rstd.get(), d_workspace.get(), N, C);
  finish();
  EXPECT_TRUE(dtype_test::same_bits("dispatched out", d_out.download(), d_out_direct.download()));
  EXPECT_TRUE(dtype_test::same_bits("dispatched rstd", d_rstd.download(), d_rstd_direct.download()));
  EXPECT_TRUE(dtype_test::same_bits("dispatched dx", d_dx.download(), d_dx_direct.download()));
  EXPECT_TRUE(dtype_test::same_bits("dispatched dweight", d_dw.download(), d_dw_direct.download()));
}

TEST(RmsNormCuda, EmptySizesDoNothingAndAMissingWorkspaceIsRejected) {
  SKIP_WITHOUT_GPU();
  TestStream stream;
  void* s = stream.get();
  // Zero sizes launch nothing (a zero-block launch would be an error) and touch no pointer.
  EXPECT_NO_THROW(cuda::rmsnorm_forward(s, nullptr, nullptr, nullptr, nullptr, 0, 72, 1e-5f));
  EXPECT_NO_THROW(cuda::rmsnorm_forward(s, nullptr, nullptr, nullptr, nullptr, 5, 0, 1e-5f));
  EXPECT_NO_THROW(cuda::rmsnorm_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72));
  EXPECT_NO_THROW(finish());
  // The workspace is checked before anything runs.
  EXPECT_THROW(cuda::rmsnorm_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 5, 72),
               std::invalid_argument);
}

}  // namespace
}  // namespace trainmem::kernels
