// Every CUDA kernel (kernels/cuda/*.cu) against the CPU reference (kernels/cpu/*.cpp, float).
//
// Each test: fresh random inputs (seeded std::mt19937, never zeros), the CPU reference on the host,
// the CUDA version on the device with every WRITTEN output poisoned first (0xff bytes = NaN, so an
// element the kernel forgets shows up as a mismatch), while ACCUMULATED outputs start from the same
// random values on both sides (so the accumulation itself is checked). Then the results are copied
// back and compared element by element:
//
//     |gpu - cpu| <= atol + rtol * |cpu|          (NaN never passes)
//
// with atol and rtol stated per op below; the mismatch count and the first few mismatches are
// printed. Shapes are deliberately not multiples of 32 (the warp size) or of the block sizes.
// Without a usable GPU every test is skipped, and says why ("GPU test skipped: ...").
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/tests/gpu_test_support.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace trainmem::kernels {
namespace {

using namespace gpu_test;



std::vector<float> uniform(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::size_t n, std::int32_t vocab) {
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (std::int32_t& x : v) x = dist(rng);
  return v;
}

// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|):
constexpr Tolerance kExact{0.0, 0.0};           // one add or a copy: bit for bit
constexpr Tolerance kElementwise{1e-5, 1e-5};   // tanhf/sqrtf/FMA contraction differ by an ulp or two
constexpr Tolerance kReduction{1e-4, 1e-4};     // sums over a row or a column in another order (layernorm,
                                                // matmul through cuBLAS, float vs the reference's double)
constexpr Tolerance kAtomics{1e-4, 1e-4};       // atomicAdd: the order of the additions varies run to run
constexpr Tolerance kAttention{1e-4, 1e-3};     // GEMMs, softmax and its backward chained
constexpr Tolerance kAdamW{1e-7, 1e-5};         // elementwise, but v is as small as 1e-4: a tight atol


// ---------------------------------------------------------------------------------------- GELU, residual

TEST(KernelsCuda, GeluForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(101);
  const std::size_t n = 100003;
  const std::vector<float> inp = uniform(rng, n, -5.0f, 5.0f);
  std::vector<float> expected(n);
  cpu::gelu_forward(expected.data(), inp.data(), n);

  TestStream stream;
  DeviceBuffer<float> d_inp(inp), d_out(n);
  d_out.poison();
  cuda::gelu_forward(stream.get(), d_out.get(), d_inp.get(), n);
  finish();
  EXPECT_TRUE(all_close("gelu out", d_out.download(), expected, kElementwise));
}

TEST(KernelsCuda, GeluBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(102);
  const std::size_t n = 100003;
  const std::vector<float> inp = uniform(rng, n, -5.0f, 5.0f);
  const std::vector<float> dout = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> expected(n);
  cpu::gelu_backward(expected.data(), inp.data(), dout.data(), n);

  TestStream stream;
  DeviceBuffer<float> d_inp(inp), d_dout(dout), d_dinp(n);
  d_dinp.poison();
  cuda::gelu_backward(stream.get(), d_dinp.get(), d_inp.get(), d_dout.get(), n);
  finish();
  EXPECT_TRUE(all_close("gelu dinp", d_dinp.download(), expected, kElementwise));

  // In place: dinp overwrites dout.
  cuda::gelu_backward(stream.get(), d_dout.get(), d_inp.get(), d_dout.get(), n);
  finish();
  EXPECT_TRUE(all_close("gelu dinp (in place over dout)", d_dout.download(), expected, kElementwise));
}

TEST(KernelsCuda, ResidualForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(103);
  const std::size_t n = 37 * 72 + 5;
  const std::vector<float> a = uniform(rng, n, -1.0f, 1.0f);
  const std::vector<float> b = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> expected(n);
  cpu::residual_forward(expected.data(), a.data(), b.data(), n);

  TestStream stream;
  DeviceBuffer<float> d_a(a), d_b(b), d_out(n);
  d_out.poison();
  cuda::residual_forward(stream.get(), d_out.get(), d_a.get(), d_b.get(), n);
  finish();
  EXPECT_TRUE(all_close("residual out", d_out.download(), expected, kExact));
}

// ---------------------------------------------------------------------------------------- LayerNorm

struct RowsCols {
  std::size_t N, C;
};
constexpr RowsCols kLayerNormShapes[] = {{37, 72}, {300, 1031}, {5, 7}};

TEST(KernelsCuda, LayerNormForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(201);
  TestStream stream;
  for (const auto [N, C] : kLayerNormShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    std::vector<float> x = uniform(rng, N * C, -2.0f, 2.0f);
    for (float& v : x) v += 0.5f;  // rows with a non-zero mean
    const std::vector<float> weight = uniform(rng, C, 0.5f, 1.5f);
    const std::vector<float> bias = uniform(rng, C, -0.5f, 0.5f);
    std::vector<float> out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);

    DeviceBuffer<float> d_x(x), d_w(weight), d_b(bias), d_out(N * C), d_mean(N), d_rstd(N);
    d_out.poison();
    d_mean.poison();
    d_rstd.poison();
    cuda::layernorm_forward(stream.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N,
                            C);
    finish();
    EXPECT_TRUE(all_close("layernorm out", d_out.download(), out, kReduction));
    EXPECT_TRUE(all_close("layernorm mean", d_mean.download(), mean, kReduction));
    EXPECT_TRUE(all_close("layernorm rstd", d_rstd.download(), rstd, kReduction));
  }
}

TEST(KernelsCuda, LayerNormBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(202);
  TestStream stream;
  for (const auto [N, C] : kLayerNormShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    std::vector<float> x = uniform(rng, N * C, -2.0f, 2.0f);
    for (float& v : x) v += 0.5f;
    const std::vector<float> weight = uniform(rng, C, 0.5f, 1.5f);
    const std::vector<float> bias = uniform(rng, C, -0.5f, 0.5f);
    std::vector<float> out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);
    const std::vector<float> dout = uniform(rng, N * C, -1.0f, 1.0f);
    // Accumulated outputs: the same random starting values on both sides.
    std::vector<float> dx = uniform(rng, N * C, -1.0f, 1.0f);
    std::vector<float> dweight = uniform(rng, C, -1.0f, 1.0f);
    std::vector<float> dbias = uniform(rng, C, -1.0f, 1.0f);

    DeviceBuffer<float> d_dx(dx), d_dw(dweight), d_db(dbias), d_dout(dout), d_x(x), d_w(weight), d_mean(mean),
        d_rstd(rstd), d_workspace(layernorm_backward_workspace_bytes(N, C) / sizeof(float));
    d_workspace.poison();  // the band partials are written before they are read
    cpu::layernorm_backward(dx.data(), dweight.data(), dbias.data(), dout.data(), x.data(), weight.data(), mean.data(),
                            rstd.data(), N, C);
    cuda::layernorm_backward(stream.get(), d_dx.get(), d_dw.get(), d_db.get(), d_dout.get(), d_x.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), d_workspace.get(), N, C);
    finish();
    EXPECT_TRUE(all_close("layernorm dx (accumulated)", d_dx.download(), dx, kReduction));
    EXPECT_TRUE(all_close("layernorm dweight (accumulated)", d_dw.download(), dweight, kReduction));
    EXPECT_TRUE(all_close("layernorm dbias (accumulated)", d_db.download(), dbias, kReduction));
  }
}

// ---------------------------------------------------------------------------------------- matmul

struct MatmulShape {
  std::size_t N, C, OC;
};
constexpr MatmulShape kMatmulShapes[] = {{37, 72, 101}, {259, 300, 203}, {1, 3, 5}};

TEST(KernelsCuda, MatmulForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(301);
  TestStream created;
  for (void* stream : {created.get(), static_cast<void*>(nullptr)})  // a stream of ours, and the default stream
    for (const auto [N, C, OC] : kMatmulShapes)
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
                     (with_bias ? " bias" : " no bias") + (stream ? " own stream" : " default stream"));
        const std::vector<float> inp = uniform(rng, N * C, -1.0f, 1.0f);
        const std::vector<float> weight = uniform(rng, OC * C, -1.0f, 1.0f);
        const std::vector<float> bias = uniform(rng, OC, -1.0f, 1.0f);
        std::vector<float> out(N * OC);
        cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);

        DeviceBuffer<float> d_inp(inp), d_w(weight), d_b(bias), d_out(N * OC);
        d_out.poison();
        cuda::matmul_forward(stream, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, C, OC);
        finish();
        EXPECT_TRUE(all_close("matmul out", d_out.download(), out, kReduction));
      }
}

TEST(KernelsCuda, MatmulBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(302);
  TestStream stream;
  for (const auto [N, C, OC] : kMatmulShapes)
    for (const bool all_outputs : {true, false}) {  // false: dinp and dbias null (as the LM head calls it)
      SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
                   (all_outputs ? " dinp, dweight, dbias" : " dweight only"));
      const std::vector<float> dout = uniform(rng, N * OC, -1.0f, 1.0f);
      const std::vector<float> inp = uniform(rng, N * C, -1.0f, 1.0f);
      const std::vector<float> weight = uniform(rng, OC * C, -1.0f, 1.0f);
      std::vector<float> dinp(N * C);                               // written
      std::vector<float> dweight = uniform(rng, OC * C, -1.0f, 1.0f);  // accumulated
      std::vector<float> dbias = uniform(rng, OC, -1.0f, 1.0f);        // accumulated

      DeviceBuffer<float> d_dinp(N * C), d_dw(dweight), d_db(dbias), d_dout(dout), d_inp(inp), d_w(weight);
      d_dinp.poison();
      cpu::matmul_backward(all_outputs ? dinp.data() : nullptr, dweight.data(), all_outputs ? dbias.data() : nullptr,
                           dout.data(), inp.data(), weight.data(), N, C, OC);
      cuda::matmul_backward(stream.get(), all_outputs ? d_dinp.get() : nullptr, d_dw.get(),
                            all_outputs ? d_db.get() : nullptr, d_dout.get(), d_inp.get(), d_w.get(), N, C, OC);
      finish();
      if (all_outputs) {
        EXPECT_TRUE(all_close("matmul dinp", d_dinp.download(), dinp, kReduction));
      }
      EXPECT_TRUE(all_close("matmul dweight (accumulated)", d_dw.download(), dweight, kReduction));
      // Untouched when null: still the starting values, which the CPU left alone as well.
      EXPECT_TRUE(all_close("matmul dbias (accumulated)", d_db.download(), dbias, kAtomics));
    }
}

// ---------------------------------------------------------------------------------------- embedding

TEST(KernelsCuda, EmbeddingForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(401);
  const std::size_t B = 3, T = 13, C = 72;
  const std::int32_t V = 101;
  const std::vector<std::int32_t> tokens = random_tokens(rng, B * T, V);
  const std::vector<float> wte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  const std::vector<float> wpe = uniform(rng, T * C, -1.0f, 1.0f);
  std::vector<float> out(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);

  TestStream stream;
  DeviceBuffer<std::int32_t> d_tokens(tokens);
  DeviceBuffer<float> d_wte(wte), d_wpe(wpe), d_out(B * T * C);
  d_out.poison();
  cuda::embedding_forward(stream.get(), d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C);
  finish();
  EXPECT_TRUE(all_close("embedding out", d_out.download(), out, kExact));
}

// Without a position table (Llama): the token rows copied, and only dwte accumulated.
TEST(KernelsCuda, EmbeddingWithoutPositionTable) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(403);
  const std::size_t B = 3, T = 13, C = 72;
  const std::int32_t V = 7;
  const std::vector<std::int32_t> tokens = random_tokens(rng, B * T, V);
  const std::vector<float> wte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  const std::vector<float> dout = uniform(rng, B * T * C, -1.0f, 1.0f);
  std::vector<float> out(B * T * C), dwte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), static_cast<const float*>(nullptr), B, T, C);

  TestStream stream;
  DeviceBuffer<std::int32_t> d_tokens(tokens);
  DeviceBuffer<float> d_wte(wte), d_out(B * T * C), d_dout(dout), d_dwte(dwte);
  DeviceBuffer<std::uint32_t> d_workspace(embedding_backward_workspace_bytes(B * T) / sizeof(std::uint32_t));
  d_out.poison();
  cuda::embedding_forward(stream.get(), d_out.get(), d_tokens.get(), d_wte.get(), static_cast<const float*>(nullptr), B,
                          T, C);
  cpu::embedding_backward(dwte.data(), static_cast<float*>(nullptr), dout.data(), tokens.data(), B, T, C);
  cuda::embedding_backward(stream.get(), d_dwte.get(), static_cast<float*>(nullptr), d_dout.get(), d_tokens.get(),
                           d_workspace.get(), B, T, C);
  finish();
  EXPECT_TRUE(all_close("embedding out (no position table)", d_out.download(), out, kExact));
  EXPECT_TRUE(all_close("embedding dwte (no position table)", d_dwte.download(), dwte, kExact));
}

TEST(KernelsCuda, EmbeddingBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(402);
  // A vocabulary of 7 for 39 positions: every token repeats (several positions per dwte row).
  const std::size_t B = 3, T = 13, C = 72;
  const std::int32_t V = 7;
  const std::vector<std::int32_t> tokens = random_tokens(rng, B * T, V);
  const std::vector<float> dout = uniform(rng, B * T * C, -1.0f, 1.0f);
  std::vector<float> dwte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);  // accumulated
  std::vector<float> dwpe = uniform(rng, T * C, -1.0f, 1.0f);                            // accumulated

  TestStream stream;
  DeviceBuffer<std::int32_t> d_tokens(tokens);
  DeviceBuffer<float> d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  DeviceBuffer<std::uint32_t> d_workspace(embedding_backward_workspace_bytes(B * T) / sizeof(std::uint32_t));
  d_workspace.poison();
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  cuda::embedding_backward(stream.get(), d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), d_workspace.get(),
                           B, T, C);
  finish();
  // Each row summed in the CPU's order (positions in order, from the old value): bit for bit.
  EXPECT_TRUE(all_close("embedding dwte (accumulated)", d_dwte.download(), dwte, kExact));
  EXPECT_TRUE(all_close("embedding dwpe (accumulated)", d_dwpe.download(), dwpe, kElementwise));
}

// ---------------------------------------------------------------------------------------- attention

struct AttentionShape {
  std::size_t B, T, C, NH;
};
// hs = 24, 8 and 5; T = 70 gives rows longer than a warp (lanes loop), T = 1 the smallest.
constexpr AttentionShape kAttentionShapes[] = {{2, 13, 72, 3}, {1, 70, 40, 5}, {3, 1, 10, 2}};

TEST(KernelsCuda, AttentionForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(501);
  TestStream stream;
  for (const auto [B, T, C, NH] : kAttentionShapes) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                 " NH=" + std::to_string(NH));
    const std::size_t scores = B * NH * T * T;
    const std::vector<float> qkv = uniform(rng, B * T * 3 * C, -1.0f, 1.0f);
    std::vector<float> out(B * T * C), preatt(scores), att(scores);
    cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);

    DeviceBuffer<float> d_qkv(qkv), d_out(B * T * C), d_preatt(scores), d_att(scores);
    d_out.poison();
    d_preatt.poison();
    d_att.poison();
    cuda::attention_forward(stream.get(), d_out.get(), d_preatt.get(), d_att.get(), d_qkv.get(), B, T, C, NH);
    finish();
    EXPECT_TRUE(all_close("attention preatt", d_preatt.download(), preatt, kAttention));
    EXPECT_TRUE(all_close("attention att", d_att.download(), att, kAttention));
    EXPECT_TRUE(all_close("attention out", d_out.download(), out, kAttention));
  }
}

TEST(KernelsCuda, AttentionBackward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(502);
  TestStream stream;
  for (const auto [B, T, C, NH] : kAttentionShapes) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                 " NH=" + std::to_string(NH));
    const std::size_t scores = B * NH * T * T;
    const std::vector<float> qkv = uniform(rng, B * T * 3 * C, -1.0f, 1.0f);
    std::vector<float> out(B * T * C), preatt(scores), att(scores);
    cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);  // att: the input
    const std::vector<float> dout = uniform(rng, B * T * C, -1.0f, 1.0f);
    std::vector<float> dqkv(B * T * 3 * C), dpreatt(scores);
    cpu::attention_backward(dqkv.data(), dpreatt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);

    DeviceBuffer<float> d_qkv(qkv), d_att(att), d_dout(dout), d_dqkv(B * T * 3 * C), d_dscores(scores);
    d_dqkv.poison();  // written in full (q, k and v thirds), never accumulated
    d_dscores.poison();
    cuda::attention_backward(stream.get(), d_dqkv.get(), d_dscores.get(), d_dout.get(), d_qkv.get(), d_att.get(), B, T,
                             C, NH);
    finish();
    EXPECT_TRUE(all_close("attention dpreatt (dscores on return)", d_dscores.download(), dpreatt, kAttention));
    EXPECT_TRUE(all_close("attention dqkv", d_dqkv.download(), dqkv, kAttention));
  }
}

// ---------------------------------------------------------------------------------------- cross-entropy

struct RowsClasses {
  std::size_t N, V, Vp;  // rows, classes, logits a row (the model pads V to a multiple of 64)
};
// V = 5003 is longer than the 512-thread block (threads loop); V = 101 leaves most threads idle.
// Vp > V: the padded columns hold NaN (never read) and get dlogits of exactly 0.
constexpr RowsClasses kCrossEntropyShapes[] = {{37, 101, 128}, {5, 5003, 5056}, {3, 1, 1}};

// Logits for N rows of V classes in rows of Vp, the padded columns NaN.
std::vector<float> padded_logits(std::mt19937& rng, const RowsClasses& shape) {
  std::vector<float> logits = uniform(rng, shape.N * shape.Vp, -4.0f, 4.0f);
  for (std::size_t n = 0; n < shape.N; ++n)
    for (std::size_t v = shape.V; v < shape.Vp; ++v) logits[n * shape.Vp + v] = std::nanf("");
  return logits;
}

// Every padded column's dlogit is exactly 0 (a tolerance would let a wrong write pass).
void expect_padding_zero(const std::vector<float>& dlogits, const RowsClasses& shape, const char* what) {
  std::size_t wrong = 0;
  for (std::size_t n = 0; n < shape.N; ++n)
    for (std::size_t v = shape.V; v < shape.Vp; ++v) wrong += dlogits[n * shape.Vp + v] != 0.0f;
  EXPECT_EQ(wrong, 0u) << what << ": padded columns with a nonzero dlogit";
}

TEST(KernelsCuda, CrossEntropyForward) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(601);
  TestStream stream;
  for (const RowsClasses& shape : kCrossEntropyShapes) {
    const auto [N, V, Vp] = shape;
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp));
    const std::vector<float> logits = padded_logits(rng, shape);
    const std::vector<std::int32_t> targets = random_tokens(rng, N, static_cast<std::int32_t>(V));
    std::vector<float> losses(N);
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);

    DeviceBuffer<float> d_logits(logits), d_losses(N);
    DeviceBuffer<std::int32_t> d_targets(targets);
    d_losses.poison();
    cuda::cross_entropy_forward(stream.get(), d_losses.get(), d_logits.get(), d_targets.get(), N, V, Vp);
    finish();
    EXPECT_TRUE(all_close("cross-entropy losses", d_losses.download(), losses, kReduction));
  }
}

TEST(KernelsCuda, CrossEntropyForwardBackwardOutOfPlaceAndInPlace) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(602);
  TestStream stream;
  // dloss = 0.75 keeps the gradients near 1/V..1 in size; softmax probabilities here reach down to
  // ~1e-7, so atol is 1e-7 and rtol 1e-4 (an exp of a row statistic that is off in its last bits).
  constexpr Tolerance kCrossEntropyGrad{1e-7, 1e-4};
  const float dloss = 0.75f;
  for (const RowsClasses& shape : kCrossEntropyShapes) {
    const auto [N, V, Vp] = shape;
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp));
    const std::vector<float> logits = padded_logits(rng, shape);
    const std::vector<std::int32_t> targets = random_tokens(rng, N, static_cast<std::int32_t>(V));
    std::vector<float> dlogits(N * Vp), losses(N);
    cpu::cross_entropy_forward_backward(losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V, Vp);

    DeviceBuffer<float> d_logits(logits), d_dlogits(N * Vp), d_losses(N);
    DeviceBuffer<std::int32_t> d_targets(targets);
    d_dlogits.poison();
    d_losses.poison();
    cuda::cross_entropy_forward_backward(stream.get(), d_losses.get(), d_dlogits.get(), d_logits.get(), d_targets.get(),
                                         dloss, N, V, Vp);
    finish();
    EXPECT_TRUE(all_close("cross-entropy losses (fused)", d_losses.download(), losses, kReduction));
    const std::vector<float> out_of_place = d_dlogits.download();
    EXPECT_TRUE(all_close("cross-entropy dlogits (out of place)", out_of_place, dlogits, kCrossEntropyGrad));
    expect_padding_zero(out_of_place, shape, "out of place");
    const std::vector<float> left = d_logits.download();
    for (std::size_t i = 0; i < left.size(); ++i)  // bit for bit, NaN padding included
      ASSERT_EQ(std::memcmp(&left[i], &logits[i], sizeof(float)), 0) << "cross-entropy changed logit " << i;

    // In place, as the GPT head calls it: dlogits == logits.
    d_losses.poison();
    cuda::cross_entropy_forward_backward(stream.get(), d_losses.get(), d_logits.get(), d_logits.get(), d_targets.get(),
                                         dloss, N, V, Vp);
    finish();
    EXPECT_TRUE(all_close("cross-entropy losses (fused, in place)", d_losses.download(), losses, kReduction));
    const std::vector<float> in_place = d_logits.download();
    EXPECT_TRUE(all_close("cross-entropy dlogits (in place over logits)", in_place, dlogits, kCrossEntropyGrad));
    expect_padding_zero(in_place, shape, "in place");
  }
}

// ---------------------------------------------------------------------------------------- optimizer

TEST(KernelsCuda, AdamWUpdate) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(701);
  const std::size_t n = 100003;
  std::vector<float> param = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> m = uniform(rng, n, -0.1f, 0.1f);
  std::vector<float> v = uniform(rng, n, 1e-4f, 1e-2f);  // a second moment is positive
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  const float grad_scale = 0.5f;

  TestStream stream;
  DeviceBuffer<float> d_param(param), d_m(m), d_v(v), d_grad(n);
  for (const long step : {1L, 2L, 7L}) {  // several steps: the bias corrections change with t
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> grad = uniform(rng, n, -1.0f, 1.0f);
    d_grad.upload(grad);
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hyper, step, grad_scale);
    cuda::adamw_update(stream.get(), d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hyper, step, grad_scale);
    finish();
    EXPECT_TRUE(all_close("adamw param", d_param.download(), param, kAdamW));
    EXPECT_TRUE(all_close("adamw m", d_m.download(), m, kAdamW));
    EXPECT_TRUE(all_close("adamw v", d_v.download(), v, kAdamW));
    // Continue both sides from the same state, so one step's rounding does not carry into the next.
    d_param.upload(param);
    d_m.upload(m);
    d_v.upload(v);
  }
}

TEST(KernelsCuda, SumOfSquaresAccumulate) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(801);
  // 3,000,001 elements need more blocks than the kernel launches (threads loop); 37 fewer than a warp.
  const std::vector<float> big = uniform(rng, 3000001, -1.0f, 1.0f);
  const std::vector<float> small = uniform(rng, 37, -1.0f, 1.0f);
  const float start = 0.3f;  // accumulated: the device float starts from this value
  const double expected =
      static_cast<double>(start) + cpu::sum_of_squares(big.data(), big.size()) + cpu::sum_of_squares(small.data(), small.size());

  TestStream stream;
  DeviceBuffer<float> d_big(big), d_small(small), d_acc(std::vector<float>{start});
  cuda::sum_of_squares_accumulate(stream.get(), d_acc.get(), d_big.get(), big.size());
  cuda::sum_of_squares_accumulate(stream.get(), d_acc.get(), d_small.get(), small.size());
  finish();
  // One float accumulator takes ~1000 atomicAdds of block partials: rtol 1e-5 of a sum near 1e6.
  EXPECT_TRUE(all_close("sum of squares", d_acc.download(), {static_cast<float>(expected)}, Tolerance{1e-6, 1e-5}));
}

// ---------------------------------------------------------------------------------------- edge cases

TEST(KernelsCuda, EmptySizesDoNothingAndBadHeadsAreRejected) {
  SKIP_WITHOUT_GPU();
  TestStream stream;
  void* s = stream.get();
  // Zero sizes launch nothing (a zero-block launch would be an error) and touch no pointer.
  EXPECT_NO_THROW(cuda::gelu_forward(s, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::gelu_backward(s, nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::residual_forward(s, nullptr, nullptr, nullptr, 0));
  EXPECT_NO_THROW(cuda::layernorm_forward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72));
  EXPECT_NO_THROW(
      cuda::layernorm_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72));
  EXPECT_NO_THROW(cuda::matmul_forward(s, nullptr, nullptr, nullptr, nullptr, 0, 72, 101));
  EXPECT_NO_THROW(cuda::matmul_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 72, 101));
  EXPECT_NO_THROW(cuda::embedding_forward(s, nullptr, nullptr, nullptr, nullptr, 0, 13, 72));
  EXPECT_NO_THROW(cuda::embedding_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 13, 72));
  EXPECT_NO_THROW(cuda::attention_forward(s, nullptr, nullptr, nullptr, nullptr, 0, 13, 72, 3));
  EXPECT_NO_THROW(cuda::attention_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 13, 72, 3));
  EXPECT_NO_THROW(cuda::cross_entropy_forward(s, nullptr, nullptr, nullptr, 0, 101, 128));
  EXPECT_NO_THROW(cuda::cross_entropy_forward_backward(s, nullptr, nullptr, nullptr, nullptr, 1.0f, 0, 101, 128));
  EXPECT_NO_THROW(cuda::adamw_update(s, nullptr, nullptr, nullptr, nullptr, 0, AdamWHyper{}, 1, 1.0f));
  EXPECT_NO_THROW(cuda::sum_of_squares_accumulate(s, nullptr, nullptr, 0));
  EXPECT_NO_THROW(finish());
  // Heads must divide the channels (hs = C / NH); checked before anything runs.
  EXPECT_THROW(cuda::attention_forward(s, nullptr, nullptr, nullptr, nullptr, 1, 13, 72, 5), std::invalid_argument);
  EXPECT_THROW(cuda::attention_backward(s, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 13, 72, 0),
               std::invalid_argument);
}

}  // namespace
}  // namespace trainmem::kernels
