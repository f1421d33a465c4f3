// The number format a model is stored and computed in (--precision).
//
//   fp32  everything in 32-bit floats
//   bf16  weights, weight gradients and activations stored in bfloat16; fp32 master weights and
//         Adam moments (owned by the optimizer); no loss scaling needed (fp32's exponent range)
//   fp16  the same in IEEE half, with dynamic loss scaling (suites/mixed_precision) because
//         half's range (6e-5 .. 65504) lets small gradients underflow to zero
//
// Compute is always fp32 (inside each kernel, which reads and writes 16 bits: kernels/dtype.h; on a
// GPU matmuls run on tensor cores with fp32 accumulation), rounded to nearest-even when stored.
// Layernorm means and reciprocal std-devs, the per-position losses and attention log-sum-exps stay
// fp32 in every precision (as in llm.c and PyTorch autocast): they are small and sensitive.
#pragma once
#include <cstddef>
#include <string>

#include "common/cli/enum_table.h"
#include "common/tensor/dtype.h"

namespace trainmem {

enum class Precision { fp32, fp16, bf16 };

inline constexpr auto kPrecisions = cli::enum_table<Precision>(
    "--precision", {{Precision::fp32, "fp32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"}});

inline std::string to_string(Precision p) { return std::string(kPrecisions.name(p)); }

// Bytes per parameter of each model state, with Adam and nothing partitioned (the ZeRO paper's
// 2 + 2 + K with K = 12 in 16 bits):
//   fp32    weights 4, gradients 4, Adam's m and v 8 (the fp32 weights are the master copy)
//   16-bit  weights 2, gradients 2, fp32 master 4 + m 4 + v 4
// The mixed-precision suite's formula and ZeRO's paper arithmetic both read it.
struct BytesPerParameter {
  std::size_t parameters, gradients, optimizer_state;
  constexpr std::size_t total() const { return parameters + gradients + optimizer_state; }
};
constexpr BytesPerParameter bytes_per_parameter(Precision p) {
  return p == Precision::fp32 ? BytesPerParameter{4, 4, 8} : BytesPerParameter{2, 2, 4 + 4 + 4};
}

// The element type of weights, weight gradients and activations.
inline DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::fp32: return DType::f32;
    case Precision::fp16: return DType::f16;
    case Precision::bf16: return DType::bf16;
  }
  return DType::f32;
}

}  // namespace trainmem
