// Every CUDA kernel in bf16 and fp16 against the CPU kernel in the same storage type (which
// kernels/tests/test_kernels_dtype_cpu.cpp checks against "widen, fp32 kernel, round" and double).
//
// As in test_kernels_cuda.cu: fresh random inputs (seeded, never zero, in fp16's range); written
// outputs poisoned first (0xffff is NaN in bf16 and fp16); accumulated outputs start from the same
// random values on both sides; in-place calls as the model makes them. Outputs are compared as the
// floats they stand for: |gpu - cpu| <= atol + rtol * |cpu|.
//
// Why the tolerances are what they are. Both sides widen the same 16-bit inputs exactly, compute
// in fp32 and round each output once, so they differ only where their fp32 values differ (another
// order of the sums, tanhf/expf against the C library, FMA contraction) and that difference moves
// a value across a 16-bit rounding boundary: one unit in the last place, 2u relative, with
// u = 2^-8 for bf16 (8 significant bits) and 2^-11 for fp16 (11). So the basic tolerance is
// rtol = 2u plus the fp32 difference itself (the atol of the fp32 test of the same op). Where the
// GPU rounds a value that the CPU keeps in fp32 (the naive attention's chained arrays), each extra
// rounding adds up to u relative of the values it feeds: rtol and atol 8u there. Ops whose GPU
// order of operations is the CPU's are compared bit for bit.
// Without a usable GPU every test is skipped, and says why ("GPU test skipped: ...").
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/tests/dtype_test_support.h"
#include "kernels/tests/gpu_kernel_runs.cuh"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace cuda_test;  // the GPU runs, PoisonedBuffer, all_close<T> and the names they use

template <typename T>
class KernelsDtypeCuda : public ::testing::Test {};
using SixteenBitTypes = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(KernelsDtypeCuda, SixteenBitTypes, dtype_test::DtypeNames);

// One ulp of T (2u) plus the fp32 difference fp32_abs.
template <typename T>
Tolerance one_ulp(double fp32_abs) {
  return {fp32_abs, 2 * unit_roundoff<T>() + 1e-5};
}
constexpr Tolerance kExact{0.0, 0.0};

// More elements than the elementwise kernels' blocks cover at once, and not a multiple of 32.
constexpr std::size_t kLongVector = 100003;

// ---------------------------------------------------------------------------------------- GELU, residual

TYPED_TEST(KernelsDtypeCuda, GeluForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t n = kLongVector;
  const std::vector<T> inp = random_values<T>(n, 101, -5.0, 5.0), dout = random_values<T>(n, 102, -1.0, 1.0);
  std::vector<T> out(n), dinp(n);
  cpu::gelu_forward(out.data(), inp.data(), n);
  cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);

  TestStream stream;
  EXPECT_TRUE(all_close("gelu out", gpu_gelu_forward(stream.get(), inp), out, one_ulp<T>(1e-5)));
  EXPECT_TRUE(all_close("gelu dinp", gpu_gelu_backward(stream.get(), inp, dout, false), dinp, one_ulp<T>(1e-5)));
  // In place: dinp overwrites dout.
  EXPECT_TRUE(all_close("gelu dinp (in place over dout)", gpu_gelu_backward(stream.get(), inp, dout, true), dinp,
                        one_ulp<T>(1e-5)));
}

TYPED_TEST(KernelsDtypeCuda, ResidualForward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t n = 37 * 72 + 5;
  const std::vector<T> a = random_values<T>(n, 103, -1.0, 1.0), b = random_values<T>(n, 104, -1.0, 1.0);
  std::vector<T> out(n);
  cpu::residual_forward(out.data(), a.data(), b.data(), n);

  TestStream stream;
  // one fp32 add, one rounding
  EXPECT_TRUE(all_close("residual out", gpu_residual_forward(stream.get(), a, b), out, kExact));
}

// ---------------------------------------------------------------------------------------- LayerNorm

TYPED_TEST(KernelsDtypeCuda, LayerNormForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  std::uint64_t seed = 200;
  for (const auto& [N, C] : {std::pair<std::size_t, std::size_t>{37, 72}, {300, 1031}, {5, 7}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const std::vector<T> x = random_values<T>(N * C, ++seed, -1.5, 2.5);  // rows with a non-zero mean
    const std::vector<T> weight = random_values<T>(C, ++seed, 0.5, 1.5), bias = random_values<T>(C, ++seed, -0.5, 0.5);
    std::vector<T> out(N * C);
    std::vector<float> mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);

    const LayerNormForwardResult<T> gpu = gpu_layernorm_forward(stream.get(), x, weight, bias, N, C);
    // fp32 statistics against the CPU's double ones: 1e-4 (as the fp32 test)
    EXPECT_TRUE(all_close("layernorm out", gpu.out, out, one_ulp<T>(1e-4)));
    EXPECT_TRUE(all_close("layernorm mean", gpu.mean, mean, Tolerance{1e-4, 1e-4}));
    EXPECT_TRUE(all_close("layernorm rstd", gpu.rstd, rstd, Tolerance{1e-4, 1e-4}));

    // Backward from the CPU's mean and rstd; dx, dweight, dbias accumulate onto the same random values.
    const std::vector<T> dout = random_values<T>(N * C, ++seed, -1.0, 1.0);
    std::vector<T> dx = random_values<T>(N * C, ++seed, -1.0, 1.0), dw = random_values<T>(C, ++seed, -1.0, 1.0),
                   db = random_values<T>(C, ++seed, -1.0, 1.0);
    const LayerNormGrads<T> gpu_grads =
        gpu_layernorm_backward<T>(stream.get(), {dx, dw, db}, dout, x, weight, mean, rstd, N, C);
    cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), weight.data(), mean.data(),
                            rstd.data(), N, C);
    // sums over C (dx) or N (dweight, dbias) in another fp32 order: 1e-4 (as the fp32 test)
    EXPECT_TRUE(all_close("layernorm dx (accumulated)", gpu_grads.dx, dx, one_ulp<T>(1e-4)));
    EXPECT_TRUE(all_close("layernorm dweight (accumulated)", gpu_grads.dweight, dw, one_ulp<T>(1e-4)));
    EXPECT_TRUE(all_close("layernorm dbias (accumulated)", gpu_grads.dbias, db, one_ulp<T>(1e-4)));
  }
}

// ---------------------------------------------------------------------------------------- matmul

// Through the dispatcher: kernels::matmul_forward<bf16> on the cuda backend is cuBLASLt (matmul16).
TYPED_TEST(KernelsDtypeCuda, MatmulThroughTheDispatcher) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream created;
  Stream s;
  s.backend = Backend::cuda;
  s.cuda_stream = created.get();
  std::uint64_t seed = 300;
  for (const auto& [N, C, OC] : {std::array<std::size_t, 3>{37, 72, 101}, {259, 300, 203}, {2, 3, 5}})
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
                   (with_bias ? " bias, dinp, dbias" : " no bias, dweight only"));
      const std::vector<T> inp = random_values<T>(N * C, ++seed, -1.0, 1.0);
      const std::vector<T> weight = random_values<T>(OC * C, ++seed, -1.0, 1.0);
      const std::vector<T> bias = random_values<T>(OC, ++seed, -1.0, 1.0);
      const std::vector<T> dout = random_values<T>(N * OC, ++seed, -1.0, 1.0);
      std::vector<T> out(N * OC), dinp(N * C);
      std::vector<T> dw = random_values<T>(OC * C, ++seed, -1.0, 1.0), db = random_values<T>(OC, ++seed, -1.0, 1.0);
      DeviceBuffer<T> d_inp(inp), d_w(weight), d_b(bias), d_dout(dout), d_dw(dw), d_db(db);
      PoisonedBuffer<T> d_out(N * OC), d_dinp(N * C);
      cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);
      cpu::matmul_backward(with_bias ? dinp.data() : nullptr, dw.data(), with_bias ? db.data() : nullptr, dout.data(),
                           inp.data(), weight.data(), N, C, OC);
      matmul_forward<T>(s, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, C, OC);
      matmul_backward<T>(s, with_bias ? d_dinp.get() : nullptr, d_dw.get(), with_bias ? d_db.get() : nullptr,
                         d_dout.get(), d_inp.get(), d_w.get(), N, C, OC);
      finish();
      // fp32 sums of K products of values in [-1, 1] in another order: K * 2^-24 absolute
      EXPECT_TRUE(all_close("matmul out", d_out.download(), out, one_ulp<T>(static_cast<double>(C + 1) * 0x1p-24)));
      if (with_bias) {
        EXPECT_TRUE(all_close("matmul dinp", d_dinp.download(), dinp, one_ulp<T>(static_cast<double>(OC) * 0x1p-24)));
      }
      EXPECT_TRUE(all_close("matmul dweight (accumulated)", d_dw.download(), dw,
                            one_ulp<T>(static_cast<double>(N + 1) * 0x1p-24)));
      EXPECT_TRUE(all_close("matmul dbias (accumulated; untouched when null)", d_db.download(), db,
                            one_ulp<T>(static_cast<double>(N + 1) * 0x1p-24)));
    }
  // cuBLASLt's rule, kept by the dispatcher: a dimension of 1 is refused.
  DeviceBuffer<T> one(8);
  EXPECT_THROW(matmul_forward<T>(s, one.get(), one.get(), one.get(), nullptr, 1, 2, 2), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------- embedding

TYPED_TEST(KernelsDtypeCuda, EmbeddingForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  // A vocabulary of 7 for 39 positions: every token repeats (several positions per dwte row).
  const std::size_t B = 3, Tn = 13, C = 300;  // C > 256: two column blocks in the dwte kernel
  const std::int32_t V = 7;
  const std::vector<std::int32_t> tokens = random_tokens(B * Tn, 400, V);
  const std::vector<T> wte = random_values<T>(static_cast<std::size_t>(V) * C, 401, -1.0, 1.0);
  const std::vector<T> wpe = random_values<T>(Tn * C, 402, -1.0, 1.0);
  const std::vector<T> dout = random_values<T>(B * Tn * C, 403, -1.0, 1.0);
  std::vector<T> out(B * Tn * C);
  std::vector<T> dwte = random_values<T>(static_cast<std::size_t>(V) * C, 404, -1.0, 1.0);  // accumulated
  std::vector<T> dwpe = random_values<T>(Tn * C, 405, -1.0, 1.0);                            // accumulated

  TestStream stream;
  const std::vector<T> gpu_out = gpu_embedding_forward(stream.get(), tokens, wte, wpe, B, Tn, C);
  const EmbeddingGrads<T> gpu_grads = gpu_embedding_backward<T>(stream.get(), {dwte, dwpe}, dout, tokens, B, Tn, C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);
  // One fp32 add; and sums in the CPU's order (positions in order, from the old value): bit for bit.
  EXPECT_TRUE(all_close("embedding out", gpu_out, out, kExact));
  EXPECT_TRUE(all_close("embedding dwte (accumulated)", gpu_grads.dwte, dwte, kExact));
  EXPECT_TRUE(all_close("embedding dwpe (accumulated)", gpu_grads.dwpe, dwpe, kExact));
}

// ---------------------------------------------------------------------------------------- attention

TYPED_TEST(KernelsDtypeCuda, AttentionForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  // Chained roundings (file comment): 8u relative and absolute (values and sums near 1).
  const Tolerance chained{8 * unit_roundoff<T>(), 8 * unit_roundoff<T>()};
  TestStream stream;
  std::uint64_t seed = 500;
  for (const auto& [B, Tn, C, NH] : {std::array<std::size_t, 4>{2, 13, 72, 3}, {1, 70, 40, 5}, {3, 1, 10, 2}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(Tn) + " C=" + std::to_string(C) +
                 " NH=" + std::to_string(NH));
    const std::size_t scores = B * NH * Tn * Tn;
    const std::vector<T> qkv = random_values<T>(B * Tn * 3 * C, ++seed, -1.0, 1.0);
    std::vector<T> out(B * Tn * C), preatt(scores), att(scores);
    cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, Tn, C, NH);
    const AttentionForwardResult<T> gpu = gpu_attention_forward(stream.get(), qkv, B, Tn, C, NH);
    EXPECT_TRUE(all_close("attention preatt", gpu.preatt, preatt, one_ulp<T>(1e-5)));  // one GEMM
    EXPECT_TRUE(all_close("attention att", gpu.att, att, chained));
    EXPECT_TRUE(all_close("attention out", gpu.out, out, chained));

    // Backward from the CPU's att on both sides.
    const std::vector<T> dout = random_values<T>(B * Tn * C, ++seed, -1.0, 1.0);
    std::vector<T> dqkv(B * Tn * 3 * C), dpreatt(scores);
    cpu::attention_backward(dqkv.data(), dpreatt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);
    const AttentionBackwardResult<T> gpu_grads = gpu_attention_backward(stream.get(), dout, qkv, att, B, Tn, C, NH);
    EXPECT_TRUE(all_close("attention dpreatt (dscores on return)", gpu_grads.dpreatt, dpreatt, chained));
    EXPECT_TRUE(all_close("attention dqkv", gpu_grads.dqkv, dqkv, chained));
  }
}

// ---------------------------------------------------------------------------------------- cross-entropy

TYPED_TEST(KernelsDtypeCuda, CrossEntropyForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  const float dloss = 0.75f;
  std::uint64_t seed = 600;
  // V classes in rows of Vp logits (the model pads V to a multiple of 64); the padded columns hold
  // NaN (never read) and get dlogits of exactly 0.
  struct Shape {
    std::size_t N, V, Vp;
  };
  for (const Shape& shape : {Shape{37, 101, 128}, Shape{5, 5003, 5056}, Shape{3, 1, 1}}) {
    const std::size_t N = shape.N, V = shape.V, Vp = shape.Vp;
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp));
    std::vector<T> logits = random_values<T>(N * Vp, ++seed, -4.0, 4.0);
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t v = V; v < Vp; ++v) logits[n * Vp + v] = store<T>(std::nanf(""));
    const std::vector<std::int32_t> targets = random_tokens(N, ++seed, static_cast<std::int32_t>(V));
    std::vector<float> losses(N);
    std::vector<T> dlogits(N * Vp);
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    std::vector<float> fused_losses(N);
    cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V,
                                        Vp);

    const std::vector<float> gpu_losses = gpu_cross_entropy_forward(stream.get(), logits, targets, N, V, Vp);
    const CrossEntropyResult<T> fused =
        gpu_cross_entropy_forward_backward(stream.get(), logits, targets, dloss, N, V, Vp, false);
    EXPECT_TRUE(all_close("cross-entropy losses (fused)", fused.losses, losses, Tolerance{1e-4, 1e-4}));
    // losses are fp32 from the same 16-bit logits: the fp32 test's 1e-4
    EXPECT_TRUE(all_close("cross-entropy losses", gpu_losses, losses, Tolerance{1e-4, 1e-4}));
    // probabilities down to ~1e-7: the fp32 test's 1e-7 absolute
    const std::vector<T>& out_of_place = fused.dlogits;
    EXPECT_TRUE(all_close("cross-entropy dlogits", out_of_place, dlogits, one_ulp<T>(1e-7)));
    // In place, as the GPT head calls it: dlogits == logits.
    const std::vector<T> in_place =
        gpu_cross_entropy_forward_backward(stream.get(), logits, targets, dloss, N, V, Vp, true).dlogits;
    EXPECT_TRUE(all_close("cross-entropy dlogits (in place over logits)", in_place, dlogits, one_ulp<T>(1e-7)));
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t v = V; v < Vp; ++v) {
        EXPECT_EQ(load(out_of_place[n * Vp + v]), 0.0f) << "padded column " << v << " (out of place)";
        EXPECT_EQ(load(in_place[n * Vp + v]), 0.0f) << "padded column " << v << " (in place)";
      }
  }
}

// ---------------------------------------------------------------------------------------- optimizer

TYPED_TEST(KernelsDtypeCuda, AdamWUpdatesTheMasterAndRoundsTheParameter) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::size_t n = kLongVector;
  std::vector<T> param = random_values<T>(n, 700, -1.0, 1.0);
  std::vector<float> master = widen(param);
  std::vector<float> m = random_values<float>(n, 701, -0.1, 0.1);
  std::vector<float> v = random_values<float>(n, 702, 1e-4, 1e-2);  // a second moment is positive
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  const float grad_scale = 0.5f;
  const Tolerance fp32_state{1e-7, 1e-5};  // the fp32 test's: elementwise, v as small as 1e-4

  TestStream stream;
  DeviceBuffer<T> d_param(param), d_grad(n);
  DeviceBuffer<float> d_master(master), d_m(m), d_v(v);
  for (const long step : {1L, 2L, 7L}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<T> grad = random_values<T>(n, 710 + static_cast<std::uint64_t>(step), -1.0, 1.0);
    d_grad.upload(grad);
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hyper, step, grad_scale, master.data());
    cuda::adamw_update<T>(stream.get(), d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hyper, step, grad_scale,
                          d_master.get());
    finish();
    EXPECT_TRUE(all_close("adamw master", d_master.download(), master, fp32_state));
    EXPECT_TRUE(all_close("adamw m", d_m.download(), m, fp32_state));
    EXPECT_TRUE(all_close("adamw v", d_v.download(), v, fp32_state));
    EXPECT_TRUE(all_close("adamw param (the master, rounded)", d_param.download(), param, one_ulp<T>(1e-7)));
    // Continue both sides from the same state.
    d_param.upload(param);
    d_master.upload(master);
    d_m.upload(m);
    d_v.upload(v);
  }
  // 16-bit parameters need a master copy.
  EXPECT_THROW(cuda::adamw_update<T>(stream.get(), d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hyper, 1,
                                     grad_scale, nullptr),
               std::invalid_argument);
}

TYPED_TEST(KernelsDtypeCuda, SumOfSquaresAccumulate) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::vector<T> x = random_values<T>(3000001, 800, -1.0, 1.0);
  const float start = 0.3f;
  const double expected = static_cast<double>(start) + cpu::sum_of_squares<T>(x.data(), x.size());
  TestStream stream;
  DeviceBuffer<T> d_x(x);
  DeviceBuffer<float> d_acc(std::vector<float>{start});
  cuda::sum_of_squares_accumulate<T>(stream.get(), d_acc.get(), d_x.get(), x.size());
  finish();
  // As the fp32 test: ~1000 rounded block partials added into one float, rtol 1e-5.
  EXPECT_TRUE(gpu_test::all_close("sum of squares", d_acc.download(), {static_cast<float>(expected)},
                                  Tolerance{1e-6, 1e-5}));
}

// ---------------------------------------------------------------------------------------- edge cases

TYPED_TEST(KernelsDtypeCuda, EmptySizesDoNothing) {
  SKIP_WITHOUT_GPU();
  using T = TypeParam;
  TestStream stream;
  void* s = stream.get();
  float master = 0.0f;  // 16-bit AdamW needs a master pointer, even for no elements
  // Zero sizes launch nothing (a zero-block launch would be an error) and touch no pointer.
  EXPECT_NO_THROW(cuda::gelu_forward<T>(s, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::gelu_backward<T>(s, nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::residual_forward<T>(s, nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::layernorm_forward<T>(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72));
  EXPECT_NO_THROW(
      cuda::layernorm_backward<T>(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72));
  EXPECT_NO_THROW(cuda::embedding_forward<T>(s, nullptr, nullptr, nullptr, nullptr, 0, 13, 72));
  EXPECT_NO_THROW(cuda::embedding_backward<T>(s, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 13, 72));
  EXPECT_NO_THROW(cuda::attention_forward<T>(s, nullptr, nullptr, nullptr, nullptr, 0, 13, 72, 3));
  EXPECT_NO_THROW(cuda::attention_backward<T>(s, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 13, 72, 3));
  EXPECT_NO_THROW(cuda::cross_entropy_forward<T>(s, nullptr, nullptr, nullptr, 0, 101, 128));
  EXPECT_NO_THROW(cuda::cross_entropy_forward_backward<T>(s, nullptr, nullptr, nullptr, nullptr, 1.0f, 0, 101, 128));
  EXPECT_NO_THROW(cuda::adamw_update<T>(s, nullptr, nullptr, nullptr, nullptr, 0, AdamWHyper{}, 1, 1.0f, &master));
  EXPECT_NO_THROW(cuda::sum_of_squares_accumulate<T>(s, nullptr, nullptr, 0));
  EXPECT_NO_THROW(finish());
}

}  // namespace
}  // namespace trainmem::kernels
