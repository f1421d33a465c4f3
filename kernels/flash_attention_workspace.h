// The scratch memory flash attention's CUDA backward asks of its caller, by version: a host
// formula, so that the allocation is the same on a GPU and in a meta run of the CUDA pattern
// (common/device/device.h), where no CUDA code can be called.
//   v1:      Dvec = rowsum(dO * O), one float per row:                 B*H*T floats
//   v2, v3:  Dvec (256-byte aligned) + the fp32 dQ accumulator:        B*H*T*(D + 1) floats
// (v2's forward pairs with v3's backward, kernels/cuda/flash_attention.cu.) H is the QUERY heads
// for any K/V head count (shape.Hkv, grouped-query attention): Dvec and dQ are per query head,
// and dK, dV need no scratch (each K/V head's sum over its group stays in one block's registers
// or shared memory), so the formula does not depend on Hkv.
#pragma once
#include <cstddef>

#include "kernels/flash_attention.h"

namespace trainmem::kernels {

// The version a GPU runs (kernels/cuda/flash_attention.cu: the newest compiled).
constexpr int kFlashAttentionNewestVersion = 3;

inline std::size_t flash_attention_backward_workspace_bytes(int version, const AttentionShape& shape) {
  const std::size_t rows = shape.B * shape.H * shape.T;
  const std::size_t dvec = rows * sizeof(float);
  if (version == 1) return dvec;
  const std::size_t aligned_dvec = (dvec + 255) / 256 * 256;
  return aligned_dvec + rows * shape.D * sizeof(float);
}

}  // namespace trainmem::kernels
