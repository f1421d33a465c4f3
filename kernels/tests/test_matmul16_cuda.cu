// The 16-bit linear layer on cuBLASLt (kernels/cuda/matmul16.cu) against the CPU reference: the
// 16-bit operands widened to float (exact), kernels::cpu::matmul_forward / matmul_backward<float>,
// and every output rounded to 16 bits once, as kernels/matmul16.h specifies.
//
// Each test, for bf16 and for fp16: fresh random inputs (seeded std::mt19937, uniform in [-1, 1],
// never zeros) rounded to 16 bits, so both sides see the same operands. On the GPU every WRITTEN
// output (out, dinp) is poisoned first (0xff bytes = 0xffff, a NaN in both formats, so an element the
// kernel forgets shows up as a mismatch), while ACCUMULATED outputs (dweight, dbias) start from the
// same random 16-bit values on both sides. The results are compared element by element, widened:
//
//     |gpu - cpu| <= atol + rtol * |cpu|          (NaN never passes)
//
// Tolerances per dtype (kBf16 / kFp16 below). Both sides compute the same fp32 sums in a different
// order and round them once to 16 bits. Where the two fp32 sums fall on either side of a rounding
// boundary, the 16-bit results differ by one unit in the last place: at most 2^-7 |x| for bf16 (8
// significant bits) and 2^-10 |x| for fp16 (11 significant bits), so rtol must exceed those (1e-2 >
// 7.8e-3 and 2e-3 > 9.8e-4). atol covers the difference of the fp32 sums themselves, which is
// absolute where a sum cancels to near zero. For the largest reduction here (dweight: k = 8192 terms
// of size ~1/3, partial sums up to ~30, fp32 ulp there ~2e-6): the CPU's round-to-nearest errors add
// up to ~sqrt(k) * 2^-24 * 30 ~ 2e-4; the tensor cores align and truncate when they add a group of
// products to the fp32 accumulator (up to one ulp toward zero per group of 16, k / 16 = 512 groups),
// a drift of a few 1e-4. Both well inside the atols (bf16 1e-2, fp16 2e-3).
//
// Shapes: small ones that are not multiples of 8, 16 or 32 (odd sizes take cuBLASLt's unaligned
// kernels), the smallest allowed (2), and the model's (N = 4 * 64, C = 64, OC = 192; N = 8 * 1024,
// C = 768, OC = 3072). Shapes with a dimension of 1 are refused (std::invalid_argument, documented in
// kernels/matmul16.h), which is tested too. Without a usable GPU every test is skipped, and says why.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/convert.h"
#include "kernels/matmul.h"
#include "kernels/matmul16.h"
#include "kernels/tests/cuda_test_support.cuh"
#include "kernels/tests/gpu_test_support.h"

namespace trainmem::kernels {
namespace {

using namespace gpu_test;
using DeviceBuffer16 = DeviceBuffer<std::uint16_t>;
using PoisonedBuffer16 = cuda_test::PoisonedBuffer<std::uint16_t>;  // written outputs: NaN until written

const char* name_of(Half16 dtype) { return dtype == Half16::bf16 ? "bf16" : "fp16"; }

std::vector<float> widen(Half16 dtype, const std::vector<std::uint16_t>& v) {
  std::vector<float> out(v.size());
  if (dtype == Half16::bf16) {
    cpu::from_bf16(out.data(), v.data(), v.size());
  } else {
    cpu::from_fp16(out.data(), v.data(), v.size());
  }
  return out;
}

std::vector<std::uint16_t> round16(Half16 dtype, const std::vector<float>& v) {
  std::vector<std::uint16_t> out(v.size());
  if (dtype == Half16::bf16) {
    cpu::to_bf16(out.data(), v.data(), v.size());
  } else {
    cpu::to_fp16(out.data(), v.data(), v.size());
  }
  return out;
}

// n values uniform in [-1, 1], rounded to 16 bits.
std::vector<std::uint16_t> random16(std::mt19937& rng, Half16 dtype, std::size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return round16(dtype, v);
}

// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), reasons at the top of the file.
constexpr Tolerance kBf16{1e-2, 1e-2};  // one bf16 ulp is at most 2^-7 = 7.8e-3 relative
constexpr Tolerance kFp16{2e-3, 2e-3};  // one fp16 ulp is at most 2^-10 = 9.8e-4 relative
constexpr Tolerance kExact{0.0, 0.0};   // an output the op must leave alone

Tolerance tolerance(Half16 dtype) { return dtype == Half16::bf16 ? kBf16 : kFp16; }

// 16-bit outputs compared as the floats they stand for.
::testing::AssertionResult all_close(const std::string& what, Half16 dtype, const std::vector<std::uint16_t>& gpu16,
                                     const std::vector<std::uint16_t>& cpu16, Tolerance tol) {
  return gpu_test::all_close(what + " (" + name_of(dtype) + ")", widen(dtype, gpu16), widen(dtype, cpu16), tol);
}

// The CPU reference of matmul16_forward: widen, cpu::matmul_forward<float>, round once.
std::vector<std::uint16_t> reference_forward(Half16 dtype, const std::vector<std::uint16_t>& inp,
                                             const std::vector<std::uint16_t>& weight,
                                             const std::vector<std::uint16_t>* bias, std::size_t N, std::size_t C,
                                             std::size_t OC) {
  const std::vector<float> inp_f = widen(dtype, inp), weight_f = widen(dtype, weight);
  const std::vector<float> bias_f = bias ? widen(dtype, *bias) : std::vector<float>();
  std::vector<float> out(N * OC);
  cpu::matmul_forward(out.data(), inp_f.data(), weight_f.data(), bias ? bias_f.data() : nullptr, N, C, OC);
  return round16(dtype, out);
}

// The CPU reference of matmul16_backward: widen (the accumulated dweight and dbias too), run
// cpu::matmul_backward<float>, round once. dinp and dbias: empty = null.
void reference_backward(Half16 dtype, std::vector<std::uint16_t>* dinp, std::vector<std::uint16_t>& dweight,
                        std::vector<std::uint16_t>* dbias, const std::vector<std::uint16_t>& dout,
                        const std::vector<std::uint16_t>& inp, const std::vector<std::uint16_t>& weight, std::size_t N,
                        std::size_t C, std::size_t OC) {
  const std::vector<float> dout_f = widen(dtype, dout), inp_f = widen(dtype, inp), weight_f = widen(dtype, weight);
  std::vector<float> dinp_f(dinp ? N * C : 0);
  std::vector<float> dweight_f = widen(dtype, dweight);
  std::vector<float> dbias_f = dbias ? widen(dtype, *dbias) : std::vector<float>();
  cpu::matmul_backward(dinp ? dinp_f.data() : nullptr, dweight_f.data(), dbias ? dbias_f.data() : nullptr,
                       dout_f.data(), inp_f.data(), weight_f.data(), N, C, OC);
  if (dinp) *dinp = round16(dtype, dinp_f);
  dweight = round16(dtype, dweight_f);
  if (dbias) *dbias = round16(dtype, dbias_f);
}

// matmul16_backward on device buffers, then finish() (which reports a kernel's error). all_outputs
// false: dinp and dbias are passed as null (as the LM head calls it).
void gpu_backward(void* stream, Half16 dtype, bool all_outputs, const DeviceBuffer16& dinp,
                  const DeviceBuffer16& dweight, const DeviceBuffer16& dbias, const DeviceBuffer16& dout,
                  const DeviceBuffer16& inp, const DeviceBuffer16& weight, std::size_t N, std::size_t C, std::size_t OC) {
  cuda::matmul16_backward(stream, dtype, all_outputs ? dinp.get() : nullptr, dweight.get(),
                          all_outputs ? dbias.get() : nullptr, dout.get(), inp.get(), weight.get(), N, C, OC);
  finish();
}

struct Shape {
  std::size_t N, C, OC;
  bool large;  // the model's largest: run once per dtype, not in every variant
};
constexpr Shape kShapes[] = {
    {2, 2, 2, false},        // the smallest allowed
    {5, 3, 7, false},        // odd everything
    {37, 45, 101, false},    // not multiples of 8 / 16 / 32
    {259, 301, 203, false},  // ditto, past one tile in every direction
    {1031, 37, 24, false},   // N > 512: the bias gradient sums bands of rows, then the bands
    {256, 64, 192, false},   // the model's attention at B = 4, T = 64, C = 64 (qkv: OC = 3C)
    {8192, 768, 3072, true}, // GPT-2 small's MLP at B = 8, T = 1024
};
constexpr Half16 kDtypes[] = {Half16::bf16, Half16::fp16};

std::string describe(Half16 dtype, const Shape& s) {
  return std::string(name_of(dtype)) + " N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
         " OC=" + std::to_string(s.OC);
}

// Every test skips without a GPU, and else runs on a non-default stream (stream()).
class Matmul16Cuda : public cuda_test::GpuTest {};

// ---------------------------------------------------------------------------------------- forward

TEST_F(Matmul16Cuda, Forward) {
  std::mt19937 rng(1601);
  for (const Half16 dtype : kDtypes)
    for (const Shape& shape : kShapes)
      for (void* on : {stream(), static_cast<void*>(nullptr)})  // a stream of ours, and the default one
        for (const bool with_bias : {true, false}) {
          if (shape.large && (!with_bias || !on)) continue;  // once is enough for the large shape
          const std::size_t N = shape.N, C = shape.C, OC = shape.OC;
          SCOPED_TRACE(describe(dtype, shape) + (with_bias ? " bias" : " no bias") +
                       (on ? " own stream" : " default stream"));
          const std::vector<std::uint16_t> inp = random16(rng, dtype, N * C);
          const std::vector<std::uint16_t> weight = random16(rng, dtype, OC * C);
          const std::vector<std::uint16_t> bias = random16(rng, dtype, OC);
          const std::vector<std::uint16_t> expected =
              reference_forward(dtype, inp, weight, with_bias ? &bias : nullptr, N, C, OC);

          DeviceBuffer16 d_inp(inp), d_w(weight), d_b(bias);
          PoisonedBuffer16 d_out(N * OC);
          cuda::matmul16_forward(on, dtype, d_out.get(), d_inp.get(), d_w.get(), with_bias ? d_b.get() : nullptr,
                                 N, C, OC);
          finish();
          EXPECT_TRUE(all_close("matmul16 out", dtype, d_out.download(), expected, tolerance(dtype)));
        }
}

// ---------------------------------------------------------------------------------------- backward

TEST_F(Matmul16Cuda, Backward) {
  std::mt19937 rng(1602);
  for (const Half16 dtype : kDtypes)
    for (const Shape& shape : kShapes)
      for (const bool all_outputs : {true, false}) {  // false: dinp and dbias null (as the LM head calls it)
        if (shape.large && !all_outputs) continue;
        const std::size_t N = shape.N, C = shape.C, OC = shape.OC;
        SCOPED_TRACE(describe(dtype, shape) + (all_outputs ? " dinp, dweight, dbias" : " dweight only"));
        const std::vector<std::uint16_t> dout = random16(rng, dtype, N * OC);
        const std::vector<std::uint16_t> inp = random16(rng, dtype, N * C);
        const std::vector<std::uint16_t> weight = random16(rng, dtype, OC * C);
        const std::vector<std::uint16_t> dweight_start = random16(rng, dtype, OC * C);  // accumulated
        const std::vector<std::uint16_t> dbias_start = random16(rng, dtype, OC);        // accumulated
        std::vector<std::uint16_t> dinp, dweight = dweight_start, dbias = dbias_start;
        reference_backward(dtype, all_outputs ? &dinp : nullptr, dweight, all_outputs ? &dbias : nullptr, dout, inp,
                           weight, N, C, OC);

        DeviceBuffer16 d_dw(dweight_start), d_db(dbias_start), d_dout(dout), d_inp(inp), d_w(weight);
        PoisonedBuffer16 d_dinp(N * C);
        gpu_backward(stream(), dtype, all_outputs, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
        if (all_outputs) {
          EXPECT_TRUE(all_close("matmul16 dinp", dtype, d_dinp.download(), dinp, tolerance(dtype)));
          EXPECT_TRUE(all_close("matmul16 dbias (accumulated)", dtype, d_db.download(), dbias, tolerance(dtype)));
        } else {
          // Null dbias: left exactly as it was.
          EXPECT_TRUE(all_close("matmul16 dbias (null, untouched)", dtype, d_db.download(), dbias_start, kExact));
        }
        EXPECT_TRUE(all_close("matmul16 dweight (accumulated)", dtype, d_dw.download(), dweight, tolerance(dtype)));
      }
}

// Accumulation over micro-batches: two backward calls into the same dweight and dbias (each call
// rounds its sum once, so the reference rounds after each call as well).
TEST_F(Matmul16Cuda, BackwardAccumulatesTwice) {
  std::mt19937 rng(1603);
  const std::size_t N = 67, C = 40, OC = 24;
  for (const Half16 dtype : kDtypes) {
    SCOPED_TRACE(name_of(dtype));
    std::vector<std::uint16_t> dweight = random16(rng, dtype, OC * C), dbias = random16(rng, dtype, OC);
    DeviceBuffer16 d_dw(dweight), d_db(dbias);
    for (int call = 0; call < 2; ++call) {
      const std::vector<std::uint16_t> dout = random16(rng, dtype, N * OC);
      const std::vector<std::uint16_t> inp = random16(rng, dtype, N * C);
      const std::vector<std::uint16_t> weight = random16(rng, dtype, OC * C);
      std::vector<std::uint16_t> dinp;
      reference_backward(dtype, &dinp, dweight, &dbias, dout, inp, weight, N, C, OC);
      DeviceBuffer16 d_dout(dout), d_inp(inp), d_w(weight);
      PoisonedBuffer16 d_dinp(N * C);
      gpu_backward(stream(), dtype, true, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
      EXPECT_TRUE(all_close("matmul16 dinp", dtype, d_dinp.download(), dinp, tolerance(dtype)));
    }
    EXPECT_TRUE(all_close("matmul16 dweight (two calls)", dtype, d_dw.download(), dweight, tolerance(dtype)));
    EXPECT_TRUE(all_close("matmul16 dbias (two calls)", dtype, d_db.download(), dbias, tolerance(dtype)));
  }
}

// ---------------------------------------------------------------------------------------- alignment

// Every pointer one element into its allocation: 2-byte aligned only (a slice of a larger tensor).
// cuBLASLt must then pick kernels that do not assume 16-byte alignment, for every GEMM and the bias.
TEST_F(Matmul16Cuda, UnalignedPointers) {
  std::mt19937 rng(1604);
  for (const Half16 dtype : kDtypes)
    for (const Shape shape : {Shape{64, 64, 192, false}, Shape{37, 45, 101, false}}) {
      const std::size_t N = shape.N, C = shape.C, OC = shape.OC;
      SCOPED_TRACE(describe(dtype, shape) + " pointers offset by one element");
      const std::vector<std::uint16_t> inp = random16(rng, dtype, N * C);
      const std::vector<std::uint16_t> weight = random16(rng, dtype, OC * C);
      const std::vector<std::uint16_t> bias = random16(rng, dtype, OC);
      const std::vector<std::uint16_t> dout = random16(rng, dtype, N * OC);
      const std::vector<std::uint16_t> dweight_start = random16(rng, dtype, OC * C);
      const std::vector<std::uint16_t> dbias_start = random16(rng, dtype, OC);
      const std::vector<std::uint16_t> out = reference_forward(dtype, inp, weight, &bias, N, C, OC);
      std::vector<std::uint16_t> dinp, dweight = dweight_start, dbias = dbias_start;
      reference_backward(dtype, &dinp, dweight, &dbias, dout, inp, weight, N, C, OC);

      DeviceBuffer16 d_inp(inp, 1), d_w(weight, 1), d_b(bias, 1), d_dout(dout, 1), d_dw(dweight_start, 1),
          d_db(dbias_start, 1);
      PoisonedBuffer16 d_out(N * OC, 1), d_dinp(N * C, 1);
      cuda::matmul16_forward(stream(), dtype, d_out.get(), d_inp.get(), d_w.get(), d_b.get(), N, C, OC);
      gpu_backward(stream(), dtype, true, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
      EXPECT_TRUE(all_close("matmul16 out", dtype, d_out.download(), out, tolerance(dtype)));
      EXPECT_TRUE(all_close("matmul16 dinp", dtype, d_dinp.download(), dinp, tolerance(dtype)));
      EXPECT_TRUE(all_close("matmul16 dweight (accumulated)", dtype, d_dw.download(), dweight, tolerance(dtype)));
      EXPECT_TRUE(all_close("matmul16 dbias (accumulated)", dtype, d_db.download(), dbias, tolerance(dtype)));
    }
}

// ---------------------------------------------------------------------------------------- refused shapes

// A dimension of 1 is refused with std::invalid_argument before anything runs (kernels/matmul16.h),
// and the outputs are left alone. N = 0 or OC = 0 is nothing to do: no error, nothing touched.
TEST_F(Matmul16Cuda, RefusedAndEmptyShapes) {
  std::mt19937 rng(1605);
  for (const Half16 dtype : kDtypes) {
    SCOPED_TRACE(name_of(dtype));
    const std::size_t n = 64;  // enough elements for every shape below
    const std::vector<std::uint16_t> values = random16(rng, dtype, n);
    DeviceBuffer16 d_out(values), d_inp(values), d_w(values), d_b(values), d_dinp(values), d_dw(values), d_db(values);
    for (const Shape shape : {Shape{1, 8, 8, false}, Shape{8, 1, 8, false}, Shape{8, 8, 1, false},
                              Shape{1, 1, 1, false}, Shape{8, 0, 8, false}}) {
      const std::size_t N = shape.N, C = shape.C, OC = shape.OC;
      SCOPED_TRACE(describe(dtype, shape));
      EXPECT_THROW(cuda::matmul16_forward(stream(), dtype, d_out.get(), d_inp.get(), d_w.get(), d_b.get(), N, C,
                                          OC),
                   std::invalid_argument);
      EXPECT_THROW(cuda::matmul16_backward(stream(), dtype, d_dinp.get(), d_dw.get(), d_db.get(), d_out.get(),
                                           d_inp.get(), d_w.get(), N, C, OC),
                   std::invalid_argument);
    }
    try {
      cuda::matmul16_forward(stream(), dtype, d_out.get(), d_inp.get(), d_w.get(), nullptr, 1, 8, 8);
      ADD_FAILURE() << "N = 1 was not refused";
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("matmul16_forward"), std::string::npos) << message;
      EXPECT_NE(message.find("at least 2"), std::string::npos) << message;
    }
    for (const Shape shape : {Shape{0, 8, 8, false}, Shape{8, 8, 0, false}, Shape{0, 0, 0, false}}) {
      const std::size_t N = shape.N, C = shape.C, OC = shape.OC;
      SCOPED_TRACE(describe(dtype, shape));
      EXPECT_NO_THROW(cuda::matmul16_forward(stream(), dtype, d_out.get(), d_inp.get(), d_w.get(), d_b.get(), N,
                                             C, OC));
      EXPECT_NO_THROW(cuda::matmul16_backward(stream(), dtype, d_dinp.get(), d_dw.get(), d_db.get(), d_out.get(),
                                              d_inp.get(), d_w.get(), N, C, OC));
    }
    finish();
    for (const DeviceBuffer16* buffer : {&d_out, &d_dinp, &d_dw, &d_db})
      EXPECT_TRUE(all_close("untouched output", dtype, buffer->download(), values, kExact));
  }
}

}  // namespace
}  // namespace trainmem::kernels
