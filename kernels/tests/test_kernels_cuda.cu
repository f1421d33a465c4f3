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

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
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
#include "kernels/tests/gpu_kernel_runs.cuh"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace gpu_test;
using namespace cuda_test;  // the GPU runs; on float vectors all_close is still gpu_test's (the exact match)

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

// More elements than the elementwise kernels' blocks cover at once, and not a multiple of 32.
constexpr std::size_t kLongVector = 100003;

// Every test skips without a GPU, and else runs on a non-default stream (stream()).
class KernelsCuda : public cuda_test::GpuTest {};

// ---------------------------------------------------------------------------------------- GELU, residual

TEST_F(KernelsCuda, GeluForward) {
  std::mt19937 rng(101);
  const std::size_t n = kLongVector;
  const std::vector<float> inp = uniform(rng, n, -5.0f, 5.0f);
  std::vector<float> expected(n);
  cpu::gelu_forward(expected.data(), inp.data(), n);
  EXPECT_TRUE(all_close("gelu out", gpu_gelu_forward(stream(), inp), expected, kElementwise));
}

TEST_F(KernelsCuda, GeluBackward) {
  std::mt19937 rng(102);
  const std::size_t n = kLongVector;
  const std::vector<float> inp = uniform(rng, n, -5.0f, 5.0f);
  const std::vector<float> dout = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> expected(n);
  cpu::gelu_backward(expected.data(), inp.data(), dout.data(), n);
  EXPECT_TRUE(all_close("gelu dinp", gpu_gelu_backward(stream(), inp, dout, false), expected, kElementwise));
  // In place: dinp overwrites dout.
  EXPECT_TRUE(all_close("gelu dinp (in place over dout)", gpu_gelu_backward(stream(), inp, dout, true), expected,
                        kElementwise));
}

TEST_F(KernelsCuda, ResidualForward) {
  std::mt19937 rng(103);
  const std::size_t n = 37 * 72 + 5;
  const std::vector<float> a = uniform(rng, n, -1.0f, 1.0f);
  const std::vector<float> b = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> expected(n);
  cpu::residual_forward(expected.data(), a.data(), b.data(), n);
  EXPECT_TRUE(all_close("residual out", gpu_residual_forward(stream(), a, b), expected, kExact));
}

// ---------------------------------------------------------------------------------------- LayerNorm

struct RowsCols {
  std::size_t N, C;
};
constexpr RowsCols kLayerNormShapes[] = {{37, 72}, {300, 1031}, {5, 7}};

// What both LayerNorm tests draw first (rows with a non-zero mean), and the CPU forward on it.
struct LayerNormCase {
  std::vector<float> x, weight, bias;
  std::vector<float> out, mean, rstd;
};
LayerNormCase layernorm_case(std::mt19937& rng, std::size_t N, std::size_t C) {
  LayerNormCase c;
  c.x = uniform(rng, N * C, -2.0f, 2.0f);
  for (float& v : c.x) v += 0.5f;
  c.weight = uniform(rng, C, 0.5f, 1.5f);
  c.bias = uniform(rng, C, -0.5f, 0.5f);
  c.out.resize(N * C);
  c.mean.resize(N);
  c.rstd.resize(N);
  cpu::layernorm_forward(c.out.data(), c.mean.data(), c.rstd.data(), c.x.data(), c.weight.data(), c.bias.data(), N, C);
  return c;
}

TEST_F(KernelsCuda, LayerNormForward) {
  std::mt19937 rng(201);
  for (const auto [N, C] : kLayerNormShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const LayerNormCase c = layernorm_case(rng, N, C);
    const LayerNormForwardResult<float> gpu = gpu_layernorm_forward(stream(), c.x, c.weight, c.bias, N, C);
    EXPECT_TRUE(all_close("layernorm out", gpu.out, c.out, kReduction));
    EXPECT_TRUE(all_close("layernorm mean", gpu.mean, c.mean, kReduction));
    EXPECT_TRUE(all_close("layernorm rstd", gpu.rstd, c.rstd, kReduction));
  }
}

TEST_F(KernelsCuda, LayerNormBackward) {
  std::mt19937 rng(202);
  for (const auto [N, C] : kLayerNormShapes) {
    SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
    const LayerNormCase c = layernorm_case(rng, N, C);
    const std::vector<float> dout = uniform(rng, N * C, -1.0f, 1.0f);
    // Accumulated outputs: the same random starting values on both sides.
    LayerNormGrads<float> cpu_grads;
    cpu_grads.dx = uniform(rng, N * C, -1.0f, 1.0f);
    cpu_grads.dweight = uniform(rng, C, -1.0f, 1.0f);
    cpu_grads.dbias = uniform(rng, C, -1.0f, 1.0f);
    const LayerNormGrads<float> gpu =
        gpu_layernorm_backward(stream(), cpu_grads, dout, c.x, c.weight, c.mean, c.rstd, N, C);
    cpu::layernorm_backward(cpu_grads.dx.data(), cpu_grads.dweight.data(), cpu_grads.dbias.data(), dout.data(),
                            c.x.data(), c.weight.data(), c.mean.data(), c.rstd.data(), N, C);
    EXPECT_TRUE(all_close("layernorm dx (accumulated)", gpu.dx, cpu_grads.dx, kReduction));
    EXPECT_TRUE(all_close("layernorm dweight (accumulated)", gpu.dweight, cpu_grads.dweight, kReduction));
    EXPECT_TRUE(all_close("layernorm dbias (accumulated)", gpu.dbias, cpu_grads.dbias, kReduction));
  }
}

// ---------------------------------------------------------------------------------------- matmul

struct MatmulShape {
  std::size_t N, C, OC;
};
constexpr MatmulShape kMatmulShapes[] = {{37, 72, 101}, {259, 300, 203}, {1, 3, 5}};

TEST_F(KernelsCuda, MatmulForward) {
  std::mt19937 rng(301);
  for (void* on : {stream(), static_cast<void*>(nullptr)})  // a stream of ours, and the default stream
    for (const auto [N, C, OC] : kMatmulShapes)
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
                     (with_bias ? " bias" : " no bias") + (on ? " own stream" : " default stream"));
        const std::vector<float> inp = uniform(rng, N * C, -1.0f, 1.0f);
        const std::vector<float> weight = uniform(rng, OC * C, -1.0f, 1.0f);
        const std::vector<float> bias = uniform(rng, OC, -1.0f, 1.0f);
        std::vector<float> out(N * OC);
        cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);

        DeviceBuffer<float> d_inp(inp), d_w(weight), d_b(bias);
        PoisonedBuffer<float> d_out(N * OC);
        cuda::matmul_forward(on, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, C, OC);
        finish();
        EXPECT_TRUE(all_close("matmul out", d_out.download(), out, kReduction));
      }
}

TEST_F(KernelsCuda, MatmulBackward) {
  std::mt19937 rng(302);
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

      DeviceBuffer<float> d_dw(dweight), d_db(dbias), d_dout(dout), d_inp(inp), d_w(weight);
      PoisonedBuffer<float> d_dinp(N * C);
      cpu::matmul_backward(all_outputs ? dinp.data() : nullptr, dweight.data(), all_outputs ? dbias.data() : nullptr,
                           dout.data(), inp.data(), weight.data(), N, C, OC);
      cuda::matmul_backward(stream(), all_outputs ? d_dinp.get() : nullptr, d_dw.get(),
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

// The embedding tests' sizes (B = 3 sequences of T = 13 positions, C = 72 channels), a vocabulary
// of V, and B * T tokens drawn from it.
struct EmbeddingCase {
  std::size_t B, T, C;
  std::int32_t V;
  std::vector<std::int32_t> tokens;
};
EmbeddingCase embedding_case(std::mt19937& rng, std::int32_t V) {
  const std::size_t B = 3, T = 13, C = 72;
  return {B, T, C, V, random_tokens(rng, B * T, V)};
}

TEST_F(KernelsCuda, EmbeddingForward) {
  std::mt19937 rng(401);
  const auto [B, T, C, V, tokens] = embedding_case(rng, 101);
  const std::vector<float> wte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  const std::vector<float> wpe = uniform(rng, T * C, -1.0f, 1.0f);
  std::vector<float> out(B * T * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(all_close("embedding out", gpu_embedding_forward(stream(), tokens, wte, wpe, B, T, C), out, kExact));
}

// Without a position table (Llama): the token rows copied, and only dwte accumulated.
TEST_F(KernelsCuda, EmbeddingWithoutPositionTable) {
  std::mt19937 rng(403);
  const auto [B, T, C, V, tokens] = embedding_case(rng, 7);
  const std::vector<float> wte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  const std::vector<float> dout = uniform(rng, B * T * C, -1.0f, 1.0f);
  std::vector<float> out(B * T * C), dwte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  const std::vector<float> no_table;  // empty: no wpe, no dwpe
  const std::vector<float> gpu_out = gpu_embedding_forward(stream(), tokens, wte, no_table, B, T, C);
  const EmbeddingGrads<float> gpu_grads = gpu_embedding_backward(stream(), {dwte, no_table}, dout, tokens, B, T, C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), static_cast<const float*>(nullptr), B, T, C);
  cpu::embedding_backward(dwte.data(), static_cast<float*>(nullptr), dout.data(), tokens.data(), B, T, C);
  EXPECT_TRUE(all_close("embedding out (no position table)", gpu_out, out, kExact));
  EXPECT_TRUE(all_close("embedding dwte (no position table)", gpu_grads.dwte, dwte, kExact));
}

TEST_F(KernelsCuda, EmbeddingBackward) {
  std::mt19937 rng(402);
  // A vocabulary of 7 for 39 positions: every token repeats (several positions per dwte row).
  const auto [B, T, C, V, tokens] = embedding_case(rng, 7);
  const std::vector<float> dout = uniform(rng, B * T * C, -1.0f, 1.0f);
  EmbeddingGrads<float> cpu_grads;  // accumulated: the same random starting values on both sides
  cpu_grads.dwte = uniform(rng, static_cast<std::size_t>(V) * C, -1.0f, 1.0f);
  cpu_grads.dwpe = uniform(rng, T * C, -1.0f, 1.0f);
  const EmbeddingGrads<float> gpu = gpu_embedding_backward(stream(), cpu_grads, dout, tokens, B, T, C);
  cpu::embedding_backward(cpu_grads.dwte.data(), cpu_grads.dwpe.data(), dout.data(), tokens.data(), B, T, C);
  // Each row summed in the CPU's order (positions in order, from the old value): bit for bit.
  EXPECT_TRUE(all_close("embedding dwte (accumulated)", gpu.dwte, cpu_grads.dwte, kExact));
  EXPECT_TRUE(all_close("embedding dwpe (accumulated)", gpu.dwpe, cpu_grads.dwpe, kElementwise));
}

// ---------------------------------------------------------------------------------------- attention

struct AttentionShape {
  std::size_t B, T, C, NH;
};
// hs = 24, 8 and 5; T = 70 gives rows longer than a warp (lanes loop), T = 1 the smallest.
constexpr AttentionShape kAttentionShapes[] = {{2, 13, 72, 3}, {1, 70, 40, 5}, {3, 1, 10, 2}};

// What both attention tests draw first, and the CPU forward on it (att: the backward's input).
struct AttentionCase {
  std::vector<float> qkv;
  std::vector<float> out, preatt, att;
};
// "B=2 T=13 C=72 NH=3", for the failure trace.
std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
         " NH=" + std::to_string(s.NH);
}

AttentionCase attention_case(std::mt19937& rng, const AttentionShape& s) {
  const std::size_t scores = s.B * s.NH * s.T * s.T;
  AttentionCase c{uniform(rng, s.B * s.T * 3 * s.C, -1.0f, 1.0f), std::vector<float>(s.B * s.T * s.C),
                  std::vector<float>(scores), std::vector<float>(scores)};
  cpu::attention_forward(c.out.data(), c.preatt.data(), c.att.data(), c.qkv.data(), s.B, s.T, s.C, s.NH);
  return c;
}

TEST_F(KernelsCuda, AttentionForward) {
  std::mt19937 rng(501);
  for (const AttentionShape& s : kAttentionShapes) {
    SCOPED_TRACE(describe(s));
    const AttentionCase c = attention_case(rng, s);
    const AttentionForwardResult<float> gpu = gpu_attention_forward(stream(), c.qkv, s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(all_close("attention preatt", gpu.preatt, c.preatt, kAttention));
    EXPECT_TRUE(all_close("attention att", gpu.att, c.att, kAttention));
    EXPECT_TRUE(all_close("attention out", gpu.out, c.out, kAttention));
  }
}

TEST_F(KernelsCuda, AttentionBackward) {
  std::mt19937 rng(502);
  for (const AttentionShape& s : kAttentionShapes) {
    SCOPED_TRACE(describe(s));
    const AttentionCase c = attention_case(rng, s);
    const std::vector<float> dout = uniform(rng, s.B * s.T * s.C, -1.0f, 1.0f);
    std::vector<float> dqkv(c.qkv.size()), dpreatt(c.att.size());
    cpu::attention_backward(dqkv.data(), dpreatt.data(), dout.data(), c.qkv.data(), c.att.data(), s.B, s.T, s.C, s.NH);
    const AttentionBackwardResult<float> gpu =
        gpu_attention_backward(stream(), dout, c.qkv, c.att, s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(all_close("attention dpreatt (dscores on return)", gpu.dpreatt, dpreatt, kAttention));
    EXPECT_TRUE(all_close("attention dqkv", gpu.dqkv, dqkv, kAttention));
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

TEST_F(KernelsCuda, CrossEntropyForward) {
  std::mt19937 rng(601);
  for (const RowsClasses& shape : kCrossEntropyShapes) {
    const auto [N, V, Vp] = shape;
    SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp));
    const std::vector<float> logits = padded_logits(rng, shape);
    const std::vector<std::int32_t> targets = random_tokens(rng, N, static_cast<std::int32_t>(V));
    std::vector<float> losses(N);
    cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);
    EXPECT_TRUE(all_close("cross-entropy losses", gpu_cross_entropy_forward(stream(), logits, targets, N, V, Vp),
                          losses, kReduction));
  }
}

TEST_F(KernelsCuda, CrossEntropyForwardBackwardOutOfPlaceAndInPlace) {
  std::mt19937 rng(602);
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

    const CrossEntropyResult<float> out_of_place =
        gpu_cross_entropy_forward_backward(stream(), logits, targets, dloss, N, V, Vp, false);
    EXPECT_TRUE(all_close("cross-entropy losses (fused)", out_of_place.losses, losses, kReduction));
    EXPECT_TRUE(all_close("cross-entropy dlogits (out of place)", out_of_place.dlogits, dlogits, kCrossEntropyGrad));
    expect_padding_zero(out_of_place.dlogits, shape, "out of place");
    for (std::size_t i = 0; i < logits.size(); ++i)  // bit for bit, NaN padding included
      ASSERT_EQ(std::memcmp(&out_of_place.logits[i], &logits[i], sizeof(float)), 0)
          << "cross-entropy changed logit " << i;

    // In place, as the GPT head calls it: dlogits == logits.
    const CrossEntropyResult<float> in_place =
        gpu_cross_entropy_forward_backward(stream(), logits, targets, dloss, N, V, Vp, true);
    EXPECT_TRUE(all_close("cross-entropy losses (fused, in place)", in_place.losses, losses, kReduction));
    EXPECT_TRUE(
        all_close("cross-entropy dlogits (in place over logits)", in_place.dlogits, dlogits, kCrossEntropyGrad));
    expect_padding_zero(in_place.dlogits, shape, "in place");
  }
}

// ---------------------------------------------------------------------------------------- optimizer

TEST_F(KernelsCuda, AdamWUpdate) {
  std::mt19937 rng(701);
  const std::size_t n = kLongVector;
  std::vector<float> param = uniform(rng, n, -1.0f, 1.0f);
  std::vector<float> m = uniform(rng, n, -0.1f, 0.1f);
  std::vector<float> v = uniform(rng, n, 1e-4f, 1e-2f);  // a second moment is positive
  AdamWHyper hyper;
  hyper.lr = 1e-3f;
  hyper.weight_decay = 0.1f;
  const float grad_scale = 0.5f;

  DeviceBuffer<float> d_param(param), d_m(m), d_v(v), d_grad(n);
  for (const long step : {1L, 2L, 7L}) {  // several steps: the bias corrections change with t
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> grad = uniform(rng, n, -1.0f, 1.0f);
    d_grad.upload(grad);
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, hyper, step, grad_scale);
    cuda::adamw_update(stream(), d_param.get(), d_grad.get(), d_m.get(), d_v.get(), n, hyper, step, grad_scale);
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

TEST_F(KernelsCuda, SumOfSquaresAccumulate) {
  std::mt19937 rng(801);
  // 3,000,001 elements need more blocks than the kernel launches (threads loop); 37 fewer than a warp.
  const std::vector<float> big = uniform(rng, 3000001, -1.0f, 1.0f);
  const std::vector<float> small = uniform(rng, 37, -1.0f, 1.0f);
  const float start = 0.3f;  // accumulated: the device float starts from this value
  const double expected =
      static_cast<double>(start) + cpu::sum_of_squares(big.data(), big.size()) + cpu::sum_of_squares(small.data(), small.size());

  DeviceBuffer<float> d_big(big), d_small(small), d_acc(std::vector<float>{start});
  cuda::sum_of_squares_accumulate(stream(), d_acc.get(), d_big.get(), big.size());
  cuda::sum_of_squares_accumulate(stream(), d_acc.get(), d_small.get(), small.size());
  finish();
  // One float accumulator takes ~1000 atomicAdds of block partials: rtol 1e-5 of a sum near 1e6.
  EXPECT_TRUE(all_close("sum of squares", d_acc.download(), {static_cast<float>(expected)}, Tolerance{1e-6, 1e-5}));
}

// ---------------------------------------------------------------------------------------- edge cases

TEST_F(KernelsCuda, EmptySizesDoNothingAndBadHeadsAreRejected) {
  void* s = stream();
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
