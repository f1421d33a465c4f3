// The CUDA kernels at sizes the other tests do not reach, in every storage type (fp32, bf16, fp16),
// against the CPU reference (kernels/cpu):
//   - more rows than a grid dimension holds (65,535): layernorm and cross-entropy at N = 70,001;
//   - layernorm's dweight/dbias over many bands of rows, the last band partial;
//   - the embedding backward's sort: long runs of one token, all-distinct tokens above 2^16;
//   - element indices above 2^31 (GELU, cross-entropy's logits): a 32-bit index would wrap.
// The last ones allocate up to 17 GB on the GPU (fine on an 80 GB card) and compare the elements
// beyond 2^31 only, to keep the host's work small. Inputs are fresh random values (never zero);
// written outputs are poisoned first (NaN), accumulated ones start from random values.
// Without a usable GPU every test is skipped, and says why ("GPU test skipped: ...").
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_kernel_runs.cuh"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace cuda_test;  // the GPU runs, PoisonedBuffer, all_close<T> and the names they use
using dtype_test::close_to;
using dtype_test::same_bits;
using dtype_test::to_double;
using gpu_test::check;

template <typename T>
class KernelsLargeCuda : public ::testing::Test {};
TYPED_TEST_SUITE(KernelsLargeCuda, dtype_test::StorageTypes, dtype_test::DtypeNames);

// For the ops whose code path does not change with the size, the smaller tests' tolerance
// (kernels/tests/test_kernels_dtype_cuda.cu says why): one unit in the last place of T (2u
// relative) plus the fp32 tests' difference, fp32_abs absolute and 1e-4 relative.
template <typename T>
Tolerance one_ulp(double fp32_abs) {
  return {fp32_abs, 2 * unit_roundoff<T>() + 1e-4};
}

// Copies host values into a device array from element `offset` on (a part of a large buffer).
template <typename T>
void upload_at(const DeviceBuffer<T>& buffer, std::size_t offset, const std::vector<T>& host) {
  check(cudaMemcpy(buffer.get() + offset, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
template <typename T>
std::vector<T> download_at(const DeviceBuffer<T>& buffer, std::size_t offset, std::size_t n) {
  std::vector<T> host(n);
  check(cudaMemcpy(host.data(), buffer.get() + offset, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}
// Every byte 0x3f: a non-zero value in every storage type (fp32 0.747, bf16 0.746, fp16 1.81).
template <typename T>
void fill_nonzero(const DeviceBuffer<T>& buffer, std::size_t n) {
  check(cudaMemset(buffer.get(), 0x3f, n * sizeof(T)), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// ---------------------------------------------------------------------------------------- LayerNorm

// N = 70,001 rows (> 65,535) and C = 200 (7 column tiles, the last of 8 columns). The backward's
// bands (layernorm_backward_bands): 256 bands of 274 rows, the last of 131.
//
// dweight and dbias are compared with the exact sums (the double reference on the same inputs), with
// a bound derived from the fp32 arithmetic of the kernel. dweight[c] = dw0 + sum_r t_r with
// t_r = dout[r,c] * xhat[r,c]. Each term reaches the GPU's result through at most
//   k = 3 + ceil(rows/8) + 7 + bands   roundings in fp32 (u = 2^-24):
// 2 for xhat = (x - mean) * rstd, 1 for the product, up to ceil(rows/8) additions in its row lane
// (the lane walks every 8th row of its band), 7 adding the 8 lanes, and up to `bands` in the
// finishing sum (old value, then band 0, 1, ...). For any such evaluation order
//   |fp32 sum - exact sum| <= gamma_k * sum_r |t_r|,   gamma_k = k u / (1 - k u)
// (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., eq. 3.4 and section 4.2). The
// result is then rounded once to T: at most u_T of its value. So
//   |gpu - exact| <= u_T |exact| + (1 + u_T) gamma_k max_c sum_r |t_r,c|   (+ 2^-25 for fp16).
// The double reference is exact to far below that (53-bit sums of N terms: N 2^-53 relative).
// Here k = 301 and sum |t| is about 28,000, so the bound is about 0.5 on sums of size ~130: a band
// left out or added twice (error ~ sqrt(274) * 0.5 ~ 8) fails it; so does a shifted column.
// dbias is the same with t_r = dout[r,c] (no product: k is smaller; the same k is used).
TYPED_TEST(KernelsLargeCuda, LayerNormBeyondTheGridLimitAndOverManyBands) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t N = 70001, C = 200;
  const LayerNormBands bands = layernorm_backward_bands(N);
  ASSERT_EQ(bands.count, 256u);
  ASSERT_NE(N % bands.rows, 0u) << "the last band should be partial";

  const std::vector<T> x = random_values<T>(N * C, 2001, -1.5, 2.5);
  const std::vector<T> weight = random_values<T>(C, 2002, 0.5, 1.5), bias = random_values<T>(C, 2003, -0.5, 0.5);
  std::vector<T> out(N * C);
  std::vector<float> mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);

  TestStream stream;
  const LayerNormForwardResult<T> gpu = gpu_layernorm_forward(stream.get(), x, weight, bias, N, C);
  // The small tests' tolerances: the forward is one warp per row whatever N is.
  EXPECT_TRUE(all_close("layernorm out", gpu.out, out, one_ulp<T>(1e-4)));
  EXPECT_TRUE(gpu_test::all_close("layernorm mean", gpu.mean, mean, Tolerance{1e-4, 1e-4}));
  EXPECT_TRUE(gpu_test::all_close("layernorm rstd", gpu.rstd, rstd, Tolerance{1e-4, 1e-4}));

  // Backward from the CPU's mean and rstd; dx, dweight, dbias accumulate onto random values.
  const std::vector<T> dout = random_values<T>(N * C, 2004, -1.0, 1.0);
  const std::vector<T> dx0 = random_values<T>(N * C, 2005, -1.0, 1.0);
  const std::vector<T> dw0 = random_values<T>(C, 2006, -1.0, 1.0), db0 = random_values<T>(C, 2007, -1.0, 1.0);
  std::vector<T> dx = dx0, dw = dw0, db = db0;
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), weight.data(), mean.data(),
                          rstd.data(), N, C);
  // The exact sums: the reference in double on the same (widened) inputs.
  const std::vector<double> dout_d = to_double(dout), x_d = to_double(x), w_d = to_double(weight);
  const std::vector<double> mean_d(mean.begin(), mean.end()), rstd_d(rstd.begin(), rstd.end());
  std::vector<double> dx_d = to_double(dx0), dw_d = to_double(dw0), db_d = to_double(db0);
  cpu::layernorm_backward(dx_d.data(), dw_d.data(), db_d.data(), dout_d.data(), x_d.data(), w_d.data(), mean_d.data(),
                          rstd_d.data(), N, C);
  double dw_magnitude = 0, db_magnitude = 0;  // max over columns of sum_r |t_r,c| (with the old value)
  for (std::size_t c = 0; c < C; ++c) {
    double dw_abs = std::fabs(load(dw0[c])), db_abs = std::fabs(load(db0[c]));
    for (std::size_t r = 0; r < N; ++r) {
      const double d = dout_d[r * C + c];
      dw_abs += std::fabs(d * (x_d[r * C + c] - mean_d[r]) * rstd_d[r]);
      db_abs += std::fabs(d);
    }
    dw_magnitude = std::max(dw_magnitude, dw_abs);
    db_magnitude = std::max(db_magnitude, db_abs);
  }
  const double u = 0x1p-24, k = 3.0 + static_cast<double>((bands.rows + 7) / 8) + 7.0 + static_cast<double>(bands.count);
  const double gamma_k = k * u / (1 - k * u), u_t = unit_roundoff<T>();
  const dtype_test::Tolerance dw_tol = dtype_test::rounded_once<T>(0.0, (1 + u_t) * gamma_k * dw_magnitude);
  const dtype_test::Tolerance db_tol = dtype_test::rounded_once<T>(0.0, (1 + u_t) * gamma_k * db_magnitude);

  // The workspace poisoned: every partial is written before it is read.
  const LayerNormGrads<T> gpu_grads =
      gpu_layernorm_backward<T>(stream.get(), {dx0, dw0, db0}, dout, x, weight, mean, rstd, N, C);
  EXPECT_TRUE(all_close("layernorm dx (accumulated)", gpu_grads.dx, dx, one_ulp<T>(1e-4)));
  EXPECT_TRUE(close_to("layernorm dweight (accumulated) vs the exact sums", gpu_grads.dweight, dw_d, dw_tol));
  EXPECT_TRUE(close_to("layernorm dbias (accumulated) vs the exact sums", gpu_grads.dbias, db_d, db_tol));

  // Deterministic: the same call from the same values gives the same bits.
  const LayerNormGrads<T> second_run =
      gpu_layernorm_backward<T>(stream.get(), {dx0, dw0, db0}, dout, x, weight, mean, rstd, N, C);
  EXPECT_TRUE(same_bits("layernorm dweight, second run", second_run.dweight, gpu_grads.dweight));
  EXPECT_TRUE(same_bits("layernorm dbias, second run", second_run.dbias, gpu_grads.dbias));
}

// ---------------------------------------------------------------------------------------- embedding

// The backward against the CPU's, bit for bit (both add each token's positions in position order
// from the old value in fp32 and round once), and the same bits on a second run.
template <typename T>
void check_embedding_backward(const std::vector<std::int32_t>& tokens, std::size_t B, std::size_t Tn, std::size_t C,
                              std::size_t V, std::uint64_t seed) {
  const std::vector<T> dout = random_values<T>(B * Tn * C, seed, -1.0, 1.0);
  const std::vector<T> dwte0 = random_values<T>(V * C, seed + 1, -1.0, 1.0);
  const std::vector<T> dwpe0 = random_values<T>(Tn * C, seed + 2, -1.0, 1.0);
  std::vector<T> dwte = dwte0, dwpe = dwpe0;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);

  TestStream stream;
  const EmbeddingGrads<T> gpu = gpu_embedding_backward<T>(stream.get(), {dwte0, dwpe0}, dout, tokens, B, Tn, C);
  EXPECT_TRUE(same_bits("embedding dwte (accumulated)", gpu.dwte, dwte));
  EXPECT_TRUE(same_bits("embedding dwpe (accumulated)", gpu.dwpe, dwpe));

  const EmbeddingGrads<T> second_run = gpu_embedding_backward<T>(stream.get(), {dwte0, dwpe0}, dout, tokens, B, Tn, C);
  EXPECT_TRUE(same_bits("embedding dwte, second run", second_run.dwte, gpu.dwte));
}

// 5 tokens for 4 x 1000 positions: runs of ~800 positions (several 256-wide windows of the run's
// end search), 16 sort tiles (the last partial), C = 300 (two column blocks).
TYPED_TEST(KernelsLargeCuda, EmbeddingBackwardManyRepeatedTokens) {
  SKIP_WITHOUT_GPU();
  const std::size_t B = 4, Tn = 1000, C = 300, V = 5;
  check_embedding_backward<TypeParam>(random_tokens(B * Tn, 2101, static_cast<std::int32_t>(V)), B, Tn, C, V, 2102);
}

// Every position a different token, drawn from [0, 131075): the sort's third digit (bits 16-23) is
// used, and the positions end up in another order than they came.
TYPED_TEST(KernelsLargeCuda, EmbeddingBackwardAllDistinctTokens) {
  SKIP_WITHOUT_GPU();
  const std::size_t B = 3, Tn = 1357, C = 40, V = (std::size_t{1} << 17) + 3;
  std::vector<std::int32_t> all(V);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937_64(2201));
  const std::vector<std::int32_t> tokens(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(B * Tn));
  ASSERT_GT(*std::max_element(tokens.begin(), tokens.end()), 1 << 16);
  check_embedding_backward<TypeParam>(tokens, B, Tn, C, V, 2202);
}

// ---------------------------------------------------------------------------------------- cross-entropy

// N = 70,001 rows: the grid holds 65,535 blocks, so rows past that are the grid-stride loop's
// second round. Tolerances as the small tests (the code path per row is the same).
TYPED_TEST(KernelsLargeCuda, CrossEntropyBeyondTheGridLimit) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t N = 70001, V = 37;
  const float dloss = 0.75f;
  const std::vector<T> logits = random_values<T>(N * V, 2301, -4.0, 4.0);
  const std::vector<std::int32_t> targets = random_tokens(N, 2302, static_cast<std::int32_t>(V));
  std::vector<float> losses(N);
  std::vector<T> dlogits(N * V);
  cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, V);
  std::vector<float> fused_losses(N);
  cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V, V);

  TestStream stream;
  const std::vector<float> gpu_losses = gpu_cross_entropy_forward(stream.get(), logits, targets, N, V, V);
  const CrossEntropyResult<T> fused = gpu_cross_entropy_forward_backward(stream.get(), logits, targets, dloss, N, V, V,
                                                                         false);
  EXPECT_TRUE(gpu_test::all_close("cross-entropy losses", gpu_losses, losses, Tolerance{1e-4, 1e-4}));
  EXPECT_TRUE(all_close("cross-entropy dlogits", fused.dlogits, dlogits, one_ulp<T>(1e-7)));
}

// ---------------------------------------------------------------------------------------- beyond 2^31

constexpr std::size_t k2To31 = std::size_t{1} << 31;

// GELU over 2^31 + 2^20 + 3 elements: the last 2^20 + 3 (random; the rest a constant) are compared.
TYPED_TEST(KernelsLargeCuda, GeluBeyond2To31Elements) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t tail = (std::size_t{1} << 20) + 3, n = k2To31 + tail;
  const std::vector<T> inp_tail = random_values<T>(tail, 2401, -5.0, 5.0);
  std::vector<T> out_tail(tail);
  cpu::gelu_forward(out_tail.data(), inp_tail.data(), tail);

  TestStream stream;
  DeviceBuffer<T> d_inp(n), d_out(n);
  fill_nonzero(d_inp, n);
  upload_at(d_inp, k2To31, inp_tail);
  d_out.poison();
  cuda::gelu_forward<T>(stream.get(), d_out.get(), d_inp.get(), n);
  finish();
  EXPECT_TRUE(all_close("gelu out beyond 2^31", download_at(d_out, k2To31, tail), out_tail, one_ulp<T>(1e-5)));
}

// Logits of N x Vp = 42,691 x 50,304 > 2^31 elements (GPT-2's vocabulary, V = 50,257, in rows
// padded to Vp as the model holds them): the first row and the last three rows are random and
// compared (the rows between hold a constant, their losses must be finite: written, not poison).
TYPED_TEST(KernelsLargeCuda, CrossEntropyBeyond2To31Logits) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t V = 50257, Vp = 50304, N = k2To31 / Vp + 1, checked = 3;
  ASSERT_GT(N * Vp, k2To31);
  const float dloss = 0.5f;
  const std::vector<T> head = random_values<T>(Vp, 2501, -4.0, 4.0);
  const std::vector<T> tail = random_values<T>(checked * Vp, 2502, -4.0, 4.0);
  const std::vector<std::int32_t> targets = random_tokens(N, 2503, static_cast<std::int32_t>(V));
  std::vector<float> head_loss(1), tail_losses(checked);
  std::vector<T> head_dlogits(Vp), tail_dlogits(checked * Vp);
  const std::int32_t* tail_targets = targets.data() + (N - checked);
  cpu::cross_entropy_forward_backward(head_loss.data(), head_dlogits.data(), head.data(), targets.data(), dloss, 1, V, Vp);
  cpu::cross_entropy_forward_backward(tail_losses.data(), tail_dlogits.data(), tail.data(), tail_targets, dloss, checked,
                                      V, Vp);

  TestStream stream;
  DeviceBuffer<T> d_logits(N * Vp);
  DeviceBuffer<float> d_losses(N);
  DeviceBuffer<std::int32_t> d_targets(targets);
  fill_nonzero(d_logits, N * Vp);
  upload_at(d_logits, 0, head);
  upload_at(d_logits, (N - checked) * Vp, tail);
  d_losses.poison();
  // In place, as the GPT head calls it.
  cuda::cross_entropy_forward_backward<T>(stream.get(), d_losses.get(), d_logits.get(), d_logits.get(), d_targets.get(),
                                          dloss, N, V, Vp);
  finish();
  const std::vector<float> losses = d_losses.download();
  EXPECT_EQ(std::count_if(losses.begin(), losses.end(), [](float l) { return !std::isfinite(l); }), 0);
  const Tolerance loss_tol{1e-4, 1e-4}, grad_tol = one_ulp<T>(1e-7);
  EXPECT_TRUE(gpu_test::all_close("cross-entropy loss, first row", {losses[0]}, head_loss, loss_tol));
  EXPECT_TRUE(gpu_test::all_close("cross-entropy losses, last rows",
                                  std::vector<float>(losses.end() - static_cast<std::ptrdiff_t>(checked), losses.end()),
                                  tail_losses, loss_tol));
  EXPECT_TRUE(all_close("cross-entropy dlogits, first row", download_at(d_logits, 0, Vp), head_dlogits, grad_tol));
  EXPECT_TRUE(all_close("cross-entropy dlogits, last rows (beyond 2^31)",
                        download_at(d_logits, (N - checked) * Vp, checked * Vp), tail_dlogits, grad_tol));
}

}  // namespace
}  // namespace trainmem::kernels
