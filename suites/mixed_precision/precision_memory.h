// What each precision keeps per parameter — the formula the mixed_precision tests check against
// the allocator, tensor by tensor.
//
//                     parameters   gradients   optimizer_state                total
//   fp32              4            4           8  (Adam m, v)                 16 bytes
//   bf16 / fp16       2            2           12 (master 4 + Adam m, v 8)    16 bytes
//
// Gradients are 2 bytes: they are stored in the model's 16-bit type (as in the ZeRO paper's
// 2Ψ + 2Ψ + 12Ψ), accumulated across micro-batches in fp32 inside each kernel and rounded once per
// micro-batch. So mixed precision saves no memory on the weight side of training with Adam: it
// saves activations (half the bytes) and time (tensor cores), and the 16-bit weights are what a
// forward pass or an inference server needs.
//
// Each tensor is one allocation, rounded up to a multiple of 512 bytes by the allocator: the
// measured bytes of a category are sum over tensors of round_up(numel * bytes, 512), which
// `category_bytes` computes; the Ψ-formula is exact for the requested bytes.
#pragma once
#include <cstddef>

#include "common/allocator/allocator_config.h"
#include "common/model/model.h"

namespace trainmem {

// bytes_per_parameter(precision): common/model/precision.h.

// Allocated bytes of the three weight-side categories for this model, with the allocator's
// 512-byte rounding per tensor.
struct WeightSideBytes {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0;
};
inline WeightSideBytes category_bytes(Model& model) {
  const BytesPerParameter b = bytes_per_parameter(model.options().precision);
  WeightSideBytes out;
  for (const Parameter& p : model.parameters()) {
    const auto n = static_cast<std::size_t>(p.value.numel());
    out.parameters += round_size(n * b.parameters);
    out.gradients += round_size(n * b.gradients);
    // Adam m and v are separate tensors of 4 bytes each, and the master weights a third
    out.optimizer_state += (b.optimizer_state / 4) * round_size(n * 4);
  }
  return out;
}

}  // namespace trainmem
