// Mixed precision's core, part 1: fp32 master weights for a 16-bit model (Micikevicius et al.
// 2018, "Mixed Precision Training").
//
// The model computes with bf16/fp16 weights, but the update is applied to an fp32 copy of them,
// the master, and the 16-bit weights are the master rounded once per step (kernels/adamw.h rounds
// in the same kernel that updates). Updating the 16-bit weights directly would lose every update
// smaller than half a unit in the last place -- bf16 keeps 8 significant bits, so an update below
// 2^-8 of the weight vanishes -- which late in training is most of them.
//
// Memory: 4 bytes per parameter, category optimizer_state, allocated with the optimizer:
//     16-bit training with Adam = 2 (weights) + 2 (gradients) + 4 (master) + 8 (m, v) = 16 B/param,
// the same 16 bytes as fp32 (4 + 4 + 8): common/model/precision.h bytes_per_parameter.
//
// Every optimizer uses this (common/train/adamw_optimizer.cpp for one device,
// common/sharding/sharded_adamw.cpp for a rank's shards, suites/gradient_memory's update in the
// backward): it is optimizer mechanics, so it lives in common/ (header-only); suites/mixed_precision
// measures and explains it.
#pragma once
#include <string>

#include "common/model/storage_type.h"
#include "common/tensor/tensor.h"

namespace trainmem {

// Whether weights stored as `dtype` need an fp32 master copy (fp32 weights are their own master).
inline bool needs_master_weights(DType dtype) { return dtype != DType::f32; }

// The fp32 master copy of `weights` (16-bit), in category optimizer_state: its values are the
// weights, widened exactly. An empty tensor when the weights are fp32.
inline Tensor make_master_weights(Device& device, const Tensor& weights, const std::string& name) {
  if (!needs_master_weights(weights.dtype())) return Tensor();
  Tensor master(device.allocator(), weights.shape(), DType::f32, MemoryCategory::optimizer_state, name + ".master");
  widen_to_f32(device, master.data_as<float>(), weights);
  return master;
}

}  // namespace trainmem
