// Every CPU kernel in each storage type T (fp32, bf16, fp16; kernels/dtype.h), on fresh random
// inputs (seeded, never zero, in fp16's range), checked two ways:
//
//   (a) against "widen, fp32 kernel, round": the kernel's float instantiation on the widened
//       inputs, its outputs rounded to T -- what mixed precision computed before the kernels took
//       16 bits. Bit for bit, as each op header promises; the one exception is matmul on shapes
//       larger than one staging tile (kernels/matmul.h), which must be within one unit in the last
//       place (and is reported when it is not equal).
//   (b) against the kernel's double instantiation on the same inputs (widened exactly), within
//       rounded_once<T>(...): each output is rounded once to T, so its relative error is at most
//       u(T) = 2^-8 for bf16 (8 significant bits), 2^-11 for fp16 (11), 2^-24 for fp32 (24); the
//       two numbers given to rounded_once are the kernel's own fp32 arithmetic (relative, and
//       absolute for sums whose terms cancel), stated at each check.
//
// Accumulated outputs start from random non-zero values; the in-place calls the model makes
// (gelu_backward with dinp == dout, cross_entropy_forward_backward with dlogits == logits) are checked
// to give the out-of-place result. For T = fp32, check (a) compares the kernel with itself: it is
// kept so that every test reads the same in every type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <iostream>
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
#include "kernels/tests/dtype_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace dtype_test;

template <typename T>
class KernelsDtypeCpu : public ::testing::Test {};
TYPED_TEST_SUITE(KernelsDtypeCpu, StorageTypes, DtypeNames);

// ---------------------------------------------------------------------------------------- GELU, residual

TYPED_TEST(KernelsDtypeCpu, GeluForwardAndBackward) {
  using T = TypeParam;
  const std::size_t n = 1000;
  const std::vector<T> x = random_values<T>(n, 1, -4.0, 4.0), dout = random_values<T>(n, 2, -1.0, 1.0);
  std::vector<T> out(n), dinp(n);
  cpu::gelu_forward(out.data(), x.data(), n);
  cpu::gelu_backward(dinp.data(), x.data(), dout.data(), n);

  // (a)
  const std::vector<float> x32 = widen(x), dout32 = widen(dout);
  std::vector<float> out32(n), dinp32(n);
  cpu::gelu_forward(out32.data(), x32.data(), n);
  cpu::gelu_backward(dinp32.data(), x32.data(), dout32.data(), n);
  EXPECT_TRUE(same_bits("gelu out", out, narrow<T>(out32)));
  EXPECT_TRUE(same_bits("gelu dinp", dinp, narrow<T>(dinp32)));

  // In place, as the model calls it: dinp written over dout.
  std::vector<T> inplace = dout;
  cpu::gelu_backward(inplace.data(), x.data(), inplace.data(), n);
  EXPECT_TRUE(same_bits("gelu dinp (in place over dout)", inplace, dinp));

  // (b) the fp32 sigmoid form is within 8 (1 + |u|) fp32 ulps of gelu and 2^-21 of gelu'
  // (KernelsCpu.GeluInFp32IsWithinItsBoundOfTheExactFunction): for |x| <= 4, within 1e-6
  // relative plus 1e-6 absolute.
  const std::vector<double> xd = to_double(x), doutd = to_double(dout);
  std::vector<double> outd(n), dinpd(n);
  cpu::gelu_forward(outd.data(), xd.data(), n);
  cpu::gelu_backward(dinpd.data(), xd.data(), doutd.data(), n);
  EXPECT_TRUE(close_to("gelu out vs double", out, outd, rounded_once<T>(1e-6, 1e-6)));
  EXPECT_TRUE(close_to("gelu dinp vs double", dinp, dinpd, rounded_once<T>(1e-6, 1e-6)));
}

TYPED_TEST(KernelsDtypeCpu, ResidualForward) {
  using T = TypeParam;
  const std::size_t n = 1000;
  const std::vector<T> a = random_values<T>(n, 3, -1.0, 1.0), b = random_values<T>(n, 4, -1.0, 1.0);
  std::vector<T> out(n);
  cpu::residual_forward(out.data(), a.data(), b.data(), n);

  const std::vector<float> a32 = widen(a), b32 = widen(b);
  std::vector<float> out32(n);
  cpu::residual_forward(out32.data(), a32.data(), b32.data(), n);
  EXPECT_TRUE(same_bits("residual out", out, narrow<T>(out32)));

  // (b) one fp32 addition (exact for two 16-bit values of similar size, else 2^-24 relative).
  std::vector<double> outd(n);
  const std::vector<double> ad = to_double(a), bd = to_double(b);
  cpu::residual_forward(outd.data(), ad.data(), bd.data(), n);
  EXPECT_TRUE(close_to("residual out vs double", out, outd, rounded_once<T>(0x1p-24, 0.0)));
}

// ---------------------------------------------------------------------------------------- LayerNorm

TYPED_TEST(KernelsDtypeCpu, LayerNormForwardAndBackward) {
  using T = TypeParam;
  const std::size_t N = 13, C = 70;
  const std::vector<T> x = random_values<T>(N * C, 5, -1.5, 2.5);  // rows with a non-zero mean
  const std::vector<T> weight = random_values<T>(C, 6, 0.5, 1.5), bias = random_values<T>(C, 7, -0.5, 0.5);
  std::vector<T> out(N * C);
  std::vector<float> mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);

  const std::vector<float> x32 = widen(x), w32 = widen(weight), b32 = widen(bias);
  std::vector<float> out32(N * C), mean32(N), rstd32(N);
  cpu::layernorm_forward(out32.data(), mean32.data(), rstd32.data(), x32.data(), w32.data(), b32.data(), N, C);
  EXPECT_TRUE(same_bits("layernorm out", out, narrow<T>(out32)));
  EXPECT_TRUE(same_bits("layernorm mean", mean, mean32));
  EXPECT_TRUE(same_bits("layernorm rstd", rstd, rstd32));

  // (b) mean and rstd are computed in double and rounded to fp32 once; out is xhat * w + b in fp32
  // (terms up to ~4: 1e-6 absolute).
  const std::vector<double> xd = to_double(x), wd = to_double(weight), bd = to_double(bias);
  std::vector<double> outd(N * C), meand(N), rstdd(N);
  cpu::layernorm_forward(outd.data(), meand.data(), rstdd.data(), xd.data(), wd.data(), bd.data(), N, C);
  EXPECT_TRUE(close_to("layernorm mean vs double", mean, meand, rounded_once<float>(0.0, 0.0)));
  EXPECT_TRUE(close_to("layernorm rstd vs double", rstd, rstdd, rounded_once<float>(0.0, 0.0)));
  EXPECT_TRUE(close_to("layernorm out vs double", out, outd, rounded_once<T>(1e-6, 1e-6)));

  // Backward, from this forward's mean and rstd; dx, dweight and dbias accumulate onto non-zero values.
  const std::vector<T> dout = random_values<T>(N * C, 8, -1.0, 1.0);
  const std::vector<T> dx0 = random_values<T>(N * C, 9, -1.0, 1.0), dw0 = random_values<T>(C, 10, -1.0, 1.0),
                       db0 = random_values<T>(C, 11, -1.0, 1.0);
  std::vector<T> dx = dx0, dw = dw0, db = db0;
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), weight.data(), mean.data(),
                          rstd.data(), N, C);

  const std::vector<float> dout32 = widen(dout);
  std::vector<float> dx32 = widen(dx0), dw32 = widen(dw0), db32 = widen(db0);
  cpu::layernorm_backward(dx32.data(), dw32.data(), db32.data(), dout32.data(), x32.data(), w32.data(), mean.data(),
                          rstd.data(), N, C);
  EXPECT_TRUE(same_bits("layernorm dx (accumulated)", dx, narrow<T>(dx32)));
  EXPECT_TRUE(same_bits("layernorm dweight (accumulated)", dw, narrow<T>(dw32)));
  EXPECT_TRUE(same_bits("layernorm dbias (accumulated)", db, narrow<T>(db32)));

  // (b) sums over C = 70 columns (dx) or N = 13 rows (dweight, dbias) of fp32 terms up to ~4:
  // 1e-5 absolute.
  const std::vector<double> doutd = to_double(dout), meand_in = to_double(mean), rstdd_in = to_double(rstd);
  std::vector<double> dxd = to_double(dx0), dwd = to_double(dw0), dbd = to_double(db0);
  cpu::layernorm_backward(dxd.data(), dwd.data(), dbd.data(), doutd.data(), xd.data(), wd.data(), meand_in.data(),
                          rstdd_in.data(), N, C);
  EXPECT_TRUE(close_to("layernorm dx vs double", dx, dxd, rounded_once<T>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("layernorm dweight vs double", dw, dwd, rounded_once<T>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("layernorm dbias vs double", db, dbd, rounded_once<T>(1e-6, 1e-5)));
}

// ---------------------------------------------------------------------------------------- matmul

struct MatmulCase {
  std::size_t N, C, OC;
  bool one_tile;  // every GEMM of forward and backward fits one staging tile: bit for bit
};
// The second and third shapes need several staging tiles in every GEMM direction: the forward's
// output over rows and columns, its inner dimension C in two slices (third shape), and dweight's
// sum over the N rows in two slices (second shape), accumulated in fp32 across them.
constexpr MatmulCase kMatmulCases[] = {
    {7, 12, 9, true},
    {cpu::kMatmulTileInner + 76, cpu::kMatmulTileCols + 44, cpu::kMatmulTileRows + 14, false},
    {40, cpu::kMatmulTileInner + 76, cpu::kMatmulTileCols + 44, false},
};

std::string describe(const MatmulCase& c) {
  return "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " OC=" + std::to_string(c.OC);
}

// (a) for matmul: bit for bit on one tile. On several tiles sgemm may add a value's products in
// another order than on the whole matrices (it blocks and threads by shape), so the two fp32 sums
// differ in their last bits (at most ~K * 2^-24 absolute for K products of values <= 1): after
// rounding, a value is within one unit in the last place of T (2u relative) or within that
// absolute difference (a result near zero, where T's ulp is smaller). How many values differ at
// all is printed.
template <typename T>
void expect_matmul_equal(const std::string& what, const std::vector<T>& got, const std::vector<T>& want, std::size_t K,
                         bool one_tile) {
  if (one_tile) {
    EXPECT_TRUE(same_bits(what, got, want));
    return;
  }
  const Tolerance order{static_cast<double>(K) * 0x1p-24, 2 * unit_roundoff<T>()};
  EXPECT_TRUE(close_to(what, got, to_double(want), order));
  std::size_t differing = 0;
  for (std::size_t i = 0; i < got.size(); ++i) differing += bits_of(got[i]) != bits_of(want[i]);
  std::cout << "  [" << dtype_name<T>() << "] " << what << ": " << differing << " of " << got.size()
            << " values differ from the single-sgemm result\n";
}

// (b) for matmul: a sum of K products of values in [-1, 1]; sgemm's fp32 error stays well below
// K * 2^-24 absolute (random signs make it grow like sqrt(K)).
template <typename T>
Tolerance matmul_tolerance(std::size_t K) {
  return rounded_once<T>(1e-6, static_cast<double>(K) * 0x1p-24);
}

TYPED_TEST(KernelsDtypeCpu, MatmulForward) {
  using T = TypeParam;
  std::uint64_t seed = 100;
  for (const MatmulCase& c : kMatmulCases)
    for (const bool with_bias : {true, false}) {
      SCOPED_TRACE(describe(c) + (with_bias ? " bias" : " no bias"));
      const std::vector<T> inp = random_values<T>(c.N * c.C, ++seed, -1.0, 1.0);
      const std::vector<T> weight = random_values<T>(c.OC * c.C, ++seed, -1.0, 1.0);
      const std::vector<T> bias = random_values<T>(c.OC, ++seed, -1.0, 1.0);
      std::vector<T> out(c.N * c.OC);
      cpu::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, c.N, c.C, c.OC);

      const std::vector<float> inp32 = widen(inp), w32 = widen(weight), b32 = widen(bias);
      std::vector<float> out32(c.N * c.OC);
      cpu::matmul_forward(out32.data(), inp32.data(), w32.data(), with_bias ? b32.data() : nullptr, c.N, c.C, c.OC);
      expect_matmul_equal("matmul out", out, narrow<T>(out32), c.C, c.one_tile);

      const std::vector<double> inpd = to_double(inp), wd = to_double(weight), bd = to_double(bias);
      std::vector<double> outd(c.N * c.OC);
      cpu::matmul_forward(outd.data(), inpd.data(), wd.data(), with_bias ? bd.data() : nullptr, c.N, c.C, c.OC);
      EXPECT_TRUE(close_to("matmul out vs double", out, outd, matmul_tolerance<T>(c.C + 1)));
    }
}

TYPED_TEST(KernelsDtypeCpu, MatmulBackward) {
  using T = TypeParam;
  std::uint64_t seed = 200;
  for (const MatmulCase& c : kMatmulCases)
    for (const bool all_outputs : {true, false}) {  // false: dinp and dbias null (as the LM head calls it)
      SCOPED_TRACE(describe(c) + (all_outputs ? " dinp, dweight, dbias" : " dweight only"));
      const std::vector<T> dout = random_values<T>(c.N * c.OC, ++seed, -1.0, 1.0);
      const std::vector<T> inp = random_values<T>(c.N * c.C, ++seed, -1.0, 1.0);
      const std::vector<T> weight = random_values<T>(c.OC * c.C, ++seed, -1.0, 1.0);
      const std::vector<T> dw0 = random_values<T>(c.OC * c.C, ++seed, -1.0, 1.0);  // accumulated
      const std::vector<T> db0 = random_values<T>(c.OC, ++seed, -1.0, 1.0);         // accumulated
      std::vector<T> dinp = random_values<T>(c.N * c.C, ++seed, -1.0, 1.0);         // written: old values ignored
      std::vector<T> dw = dw0, db = db0;
      cpu::matmul_backward(all_outputs ? dinp.data() : nullptr, dw.data(), all_outputs ? db.data() : nullptr,
                           dout.data(), inp.data(), weight.data(), c.N, c.C, c.OC);

      const std::vector<float> dout32 = widen(dout), inp32 = widen(inp), w32 = widen(weight);
      std::vector<float> dinp32(c.N * c.C), dw32 = widen(dw0), db32 = widen(db0);
      cpu::matmul_backward(all_outputs ? dinp32.data() : nullptr, dw32.data(), all_outputs ? db32.data() : nullptr,
                           dout32.data(), inp32.data(), w32.data(), c.N, c.C, c.OC);
      if (all_outputs) expect_matmul_equal("matmul dinp", dinp, narrow<T>(dinp32), c.OC, c.one_tile);
      expect_matmul_equal("matmul dweight (accumulated)", dw, narrow<T>(dw32), c.N + 1, c.one_tile);
      // dbias: fp32 sums row by row in both, whatever the shape
      EXPECT_TRUE(same_bits("matmul dbias (accumulated; untouched when null)", db, narrow<T>(db32)));

      const std::vector<double> doutd = to_double(dout), inpd = to_double(inp), wd = to_double(weight);
      std::vector<double> dinpd(c.N * c.C), dwd = to_double(dw0), dbd = to_double(db0);
      cpu::matmul_backward(all_outputs ? dinpd.data() : nullptr, dwd.data(), all_outputs ? dbd.data() : nullptr,
                           doutd.data(), inpd.data(), wd.data(), c.N, c.C, c.OC);
      if (all_outputs) {
        EXPECT_TRUE(close_to("matmul dinp vs double", dinp, dinpd, matmul_tolerance<T>(c.OC)));
      }
      EXPECT_TRUE(close_to("matmul dweight vs double", dw, dwd, matmul_tolerance<T>(c.N + 1)));
      EXPECT_TRUE(close_to("matmul dbias vs double", db, dbd, matmul_tolerance<T>(c.N + 1)));
    }
}

// ---------------------------------------------------------------------------------------- embedding

TYPED_TEST(KernelsDtypeCpu, EmbeddingForwardAndBackward) {
  using T = TypeParam;
  // A vocabulary of 7 for 39 positions: every token repeats, so several positions add into one row.
  const std::size_t B = 3, Tn = 13, C = 40;
  const std::int32_t V = 7;
  const std::vector<std::int32_t> tokens = random_tokens(B * Tn, 300, V);
  const std::vector<T> wte = random_values<T>(static_cast<std::size_t>(V) * C, 301, -1.0, 1.0);
  const std::vector<T> wpe = random_values<T>(Tn * C, 302, -1.0, 1.0);
  std::vector<T> out(B * Tn * C);
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, Tn, C);

  const std::vector<float> wte32 = widen(wte), wpe32 = widen(wpe);
  std::vector<float> out32(B * Tn * C);
  cpu::embedding_forward(out32.data(), tokens.data(), wte32.data(), wpe32.data(), B, Tn, C);
  EXPECT_TRUE(same_bits("embedding out", out, narrow<T>(out32)));
  const std::vector<double> wted = to_double(wte), wped = to_double(wpe);
  std::vector<double> outd(B * Tn * C);
  cpu::embedding_forward(outd.data(), tokens.data(), wted.data(), wped.data(), B, Tn, C);
  EXPECT_TRUE(close_to("embedding out vs double", out, outd, rounded_once<T>(0x1p-24, 0.0)));  // one fp32 add

  const std::vector<T> dout = random_values<T>(B * Tn * C, 303, -1.0, 1.0);
  const std::vector<T> dwte0 = random_values<T>(static_cast<std::size_t>(V) * C, 304, -1.0, 1.0);
  const std::vector<T> dwpe0 = random_values<T>(Tn * C, 305, -1.0, 1.0);
  std::vector<T> dwte = dwte0, dwpe = dwpe0;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, Tn, C);

  const std::vector<float> dout32 = widen(dout);
  std::vector<float> dwte32 = widen(dwte0), dwpe32 = widen(dwpe0);
  cpu::embedding_backward(dwte32.data(), dwpe32.data(), dout32.data(), tokens.data(), B, Tn, C);
  EXPECT_TRUE(same_bits("embedding dwte (accumulated)", dwte, narrow<T>(dwte32)));
  EXPECT_TRUE(same_bits("embedding dwpe (accumulated)", dwpe, narrow<T>(dwpe32)));

  // (b) sums of up to 40 terms in [-1, 1] onto the old value: 1e-5 absolute.
  const std::vector<double> doutd = to_double(dout);
  std::vector<double> dwted = to_double(dwte0), dwped = to_double(dwpe0);
  cpu::embedding_backward(dwted.data(), dwped.data(), doutd.data(), tokens.data(), B, Tn, C);
  EXPECT_TRUE(close_to("embedding dwte vs double", dwte, dwted, rounded_once<T>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("embedding dwpe vs double", dwpe, dwped, rounded_once<T>(1e-6, 1e-5)));
}

// ---------------------------------------------------------------------------------------- attention

TYPED_TEST(KernelsDtypeCpu, AttentionForwardAndBackward) {
  using T = TypeParam;
  const std::size_t B = 2, Tn = 13, C = 24, NH = 3, scores = B * NH * Tn * Tn;
  const std::vector<T> qkv = random_values<T>(B * Tn * 3 * C, 400, -1.0, 1.0);
  std::vector<T> out(B * Tn * C), preatt(scores), att(scores);
  cpu::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, Tn, C, NH);

  const std::vector<float> qkv32 = widen(qkv);
  std::vector<float> out32(B * Tn * C), preatt32(scores), att32(scores);
  cpu::attention_forward(out32.data(), preatt32.data(), att32.data(), qkv32.data(), B, Tn, C, NH);
  EXPECT_TRUE(same_bits("attention out", out, narrow<T>(out32)));
  EXPECT_TRUE(same_bits("attention preatt", preatt, narrow<T>(preatt32)));
  EXPECT_TRUE(same_bits("attention att", att, narrow<T>(att32)));

  // (b) dot products of 8 terms, an exp and a softmax sum of up to 13, all of values near 1: 1e-6.
  const std::vector<double> qkvd = to_double(qkv);
  std::vector<double> outd(B * Tn * C), preattd(scores), attd(scores);
  cpu::attention_forward(outd.data(), preattd.data(), attd.data(), qkvd.data(), B, Tn, C, NH);
  EXPECT_TRUE(close_to("attention preatt vs double", preatt, preattd, rounded_once<T>(1e-6, 1e-6)));
  EXPECT_TRUE(close_to("attention att vs double", att, attd, rounded_once<T>(1e-6, 1e-6)));
  EXPECT_TRUE(close_to("attention out vs double", out, outd, rounded_once<T>(1e-6, 1e-6)));

  // Backward from this forward's (rounded) att.
  const std::vector<T> dout = random_values<T>(B * Tn * C, 401, -1.0, 1.0);
  std::vector<T> dqkv(B * Tn * 3 * C), dpreatt(scores);  // dscores: dpreatt on return
  cpu::attention_backward(dqkv.data(), dpreatt.data(), dout.data(), qkv.data(), att.data(), B, Tn, C, NH);

  const std::vector<float> dout32 = widen(dout), att_in32 = widen(att);
  std::vector<float> dqkv32(B * Tn * 3 * C), dpreatt32(scores);
  cpu::attention_backward(dqkv32.data(), dpreatt32.data(), dout32.data(), qkv32.data(), att_in32.data(), B, Tn, C, NH);
  EXPECT_TRUE(same_bits("attention dqkv", dqkv, narrow<T>(dqkv32)));
  EXPECT_TRUE(same_bits("attention dpreatt", dpreatt, narrow<T>(dpreatt32)));

  // (b) sums over up to 13 time steps of products of values near 1: 1e-5 absolute.
  const std::vector<double> doutd = to_double(dout), att_ind = to_double(att);
  std::vector<double> dqkvd(B * Tn * 3 * C), dpreattd(scores);
  cpu::attention_backward(dqkvd.data(), dpreattd.data(), doutd.data(), qkvd.data(), att_ind.data(), B, Tn, C, NH);
  EXPECT_TRUE(close_to("attention dqkv vs double", dqkv, dqkvd, rounded_once<T>(1e-6, 1e-5)));
  EXPECT_TRUE(close_to("attention dpreatt vs double", dpreatt, dpreattd, rounded_once<T>(1e-6, 1e-5)));
}

// ---------------------------------------------------------------------------------------- cross-entropy

TYPED_TEST(KernelsDtypeCpu, CrossEntropyForwardAndBackward) {
  using T = TypeParam;
  // V = 101 classes in rows of Vp = 128 logits (the model's padded head); the padded columns hold
  // NaN, which the kernels never read (cross_entropy.h), and get dlogits of exactly 0.
  const std::size_t N = 9, V = 101, Vp = 128;
  std::vector<T> logits = random_values<T>(N * Vp, 500, -4.0, 4.0);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t v = V; v < Vp; ++v) logits[n * Vp + v] = store<T>(std::nanf(""));
  const std::vector<std::int32_t> targets = random_tokens(N, 501, static_cast<std::int32_t>(V));
  std::vector<float> losses(N);
  cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V, Vp);

  const std::vector<float> logits32 = widen(logits);
  std::vector<float> losses32(N);
  cpu::cross_entropy_forward(losses32.data(), logits32.data(), targets.data(), N, V, Vp);
  EXPECT_TRUE(same_bits("cross-entropy losses", losses, losses32));
  // (b) the log-sum-exp is summed in double; max + log_sum - logit is two fp32 operations: 1e-6.
  const std::vector<double> logitsd = to_double(logits);
  std::vector<double> lossesd(N);
  cpu::cross_entropy_forward(lossesd.data(), logitsd.data(), targets.data(), N, V, Vp);
  EXPECT_TRUE(close_to("cross-entropy losses vs double", losses, lossesd, rounded_once<float>(1e-6, 1e-6)));

  // The fused call (training's): the forward's losses, bit for bit, and their gradient.
  const float dloss = 1.0f / 64;  // a power of two: the same in fp32 and double
  std::vector<T> dlogits(N * Vp);
  std::vector<float> fused_losses(N);
  cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits.data(), logits.data(), targets.data(), dloss, N, V,
                                      Vp);
  EXPECT_TRUE(same_bits("cross-entropy losses (fused)", fused_losses, losses));
  std::vector<float> dlogits32(N * Vp);
  cpu::cross_entropy_forward_backward(fused_losses.data(), dlogits32.data(), logits32.data(), targets.data(), dloss, N,
                                      V, Vp);
  EXPECT_TRUE(same_bits("cross-entropy dlogits", dlogits, narrow<T>(dlogits32)));

  // In place, as the GPT head calls it: dlogits written over logits.
  std::vector<T> inplace = logits;
  cpu::cross_entropy_forward_backward(fused_losses.data(), inplace.data(), inplace.data(), targets.data(), dloss, N, V,
                                      Vp);
  EXPECT_TRUE(same_bits("cross-entropy dlogits (in place over logits)", inplace, dlogits));
  EXPECT_TRUE(same_bits("cross-entropy losses (fused, in place)", fused_losses, losses));

  // (b) p = exp(x - m) / s in fp32. Each exponential: its argument x - m rounded once (below 8 in
  // size: 4.8e-7 absolute, so relative in the exponential) and the exp within 1 ulp (1.2e-7); s sums
  // such terms (at most the same 6e-7) in double, rounded once (6e-8); the division rounds once
  // (6e-8): 1.4e-6 relative at most, 1.5e-6. p - 1 at the target cancels to 2^-24 absolute, times
  // dloss: 1e-8.
  std::vector<double> dlogitsd(N * Vp), fused_lossesd(N);
  cpu::cross_entropy_forward_backward(fused_lossesd.data(), dlogitsd.data(), logitsd.data(), targets.data(),
                                      static_cast<double>(dloss), N, V, Vp);
  EXPECT_TRUE(close_to("cross-entropy dlogits vs double", dlogits, dlogitsd, rounded_once<T>(1.5e-6, 1e-8)));
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t v = V; v < Vp; ++v) EXPECT_EQ(load(dlogits[n * Vp + v]), 0.0f) << "padded column " << v;
}

// ---------------------------------------------------------------------------------------- optimizer

TYPED_TEST(KernelsDtypeCpu, AdamWUpdatesTheMasterAndRoundsTheParameterOnce) {
  using T = TypeParam;
  const std::size_t n = 1000;
  AdamWHyper h;
  h.lr = 1e-2f;
  h.weight_decay = 0.1f;
  const float grad_scale = 0.5f;
  // fp32: the parameter is its own master copy (no master). 16 bits: the master starts as the
  // widened parameter, as the optimizer makes it.
  constexpr bool with_master = is_16bit_v<T>;
  std::vector<T> param = random_values<T>(n, 600, -1.0, 1.0);
  std::vector<float> master = widen(param), m(n, 0.0f), v(n, 0.0f);
  std::vector<float> master32 = master, m32 = m, v32 = v;  // the fp32 path: master updated, then rounded
  for (long step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<T> grad = random_values<T>(n, 600 + static_cast<std::uint64_t>(step), -1.0, 1.0);
    cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, h, step, grad_scale,
                      with_master ? master.data() : nullptr);
    const std::vector<float> grad32 = widen(grad);
    cpu::adamw_update(master32.data(), grad32.data(), m32.data(), v32.data(), n, h, step, grad_scale);
    EXPECT_TRUE(same_bits("adamw param", param, narrow<T>(master32)));
    if (with_master) {
      EXPECT_TRUE(same_bits("adamw master", master, master32));
    }
    EXPECT_TRUE(same_bits("adamw m", m, m32));
    EXPECT_TRUE(same_bits("adamw v", v, v32));
  }

  // (b) one step from a fresh state against the formula in double: the fp32 arithmetic of a few
  // operations (1e-5 relative of an update of size lr), then the parameter rounded once.
  const std::vector<T> p0 = random_values<T>(n, 610, -1.0, 1.0), g = random_values<T>(n, 611, -1.0, 1.0);
  std::vector<T> p1 = p0;
  std::vector<float> master1 = widen(p0), m1(n, 0.0f), v1(n, 0.0f);
  cpu::adamw_update(p1.data(), g.data(), m1.data(), v1.data(), n, h, 1, grad_scale,
                    with_master ? master1.data() : nullptr);
  std::vector<double> expected(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double pd = load(p0[i]), gd = load(g[i]) * static_cast<double>(grad_scale);
    const double md = (1 - 0.9) * gd, vd = (1 - 0.95) * gd * gd;
    const double mhat = md / (1 - 0.9), vhat = vd / (1 - 0.95);
    expected[i] = pd - 1e-2 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * pd);
  }
  EXPECT_TRUE(close_to("adamw param vs double", p1, expected, rounded_once<T>(1e-6, 1e-7)));
  if (with_master) {
    EXPECT_TRUE(close_to("adamw master vs double", master1, expected, rounded_once<float>(1e-6, 1e-7)));
  }
}

// Without a master copy: fp32 parameters are updated in place; 16-bit ones are refused (updating
// them in 16 bits would lose every update smaller than half an ulp of the weight).
TYPED_TEST(KernelsDtypeCpu, AdamWWithoutMasterIsForFp32Only) {
  using T = TypeParam;
  std::vector<T> param = random_values<T>(4, 620, -1.0, 1.0), grad = random_values<T>(4, 621, -1.0, 1.0);
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  if constexpr (is_16bit_v<T>) {
    EXPECT_THROW(cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), 4, AdamWHyper{}, 1, 1.0f),
                 std::invalid_argument);
  } else {
    EXPECT_NO_THROW(cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), 4, AdamWHyper{}, 1, 1.0f));
  }
}

TYPED_TEST(KernelsDtypeCpu, SumOfSquares) {
  using T = TypeParam;
  const std::vector<T> x = random_values<T>(1001, 700, -2.0, 2.0);
  const std::vector<float> x32 = widen(x);
  // Widened exactly and summed in double: the same number as the fp32 path, and as double.
  const double sum = cpu::sum_of_squares<T>(x.data(), x.size());
  EXPECT_EQ(sum, cpu::sum_of_squares(x32.data(), x32.size()));
  double expected = 0;
  for (const double xi : to_double(x)) expected += xi * xi;
  EXPECT_NEAR(sum, expected, 1e-12 * expected);
}

}  // namespace
}  // namespace trainmem::kernels
