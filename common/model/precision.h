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
#include <stdexcept>
#include <string>

#include "common/tensor/dtype.h"

namespace trainmem {

enum class Precision { fp32, fp16, bf16 };

inline Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "fp16") return Precision::fp16;
  if (text == "bf16") return Precision::bf16;
  throw std::invalid_argument("--precision must be fp32, fp16 or bf16, not '" + text + "'");
}

inline std::string to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
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
