// FSDP's model-state memory per rank, computed exactly from the model's shape: the formula that
// suites/fsdp/test_fsdp.cpp checks against the allocator's measured per-category peaks, and that
// the estimator uses. Pure: inputs are the model config, the world size N, the FSDP options and
// the precision; no device, no allocator.
//
// Every buffer is one allocation, counted as the allocator counts it: blk(n) = round_size(n), n
// rounded up to a multiple of 512 bytes. b = bytes per element of the model's storage type
// (4 in fp32, 2 in bf16/fp16). Units and S (elements per shard): the sharding engine's
// (common/sharding/unit_layout.h), K layers per unit; categories as its convention says
// (sharding_engine.h): a gathered unit is parameters, a unit's gradient bucket gradients.
//
// FULL_SHARD and SHARD_GRAD_OP, per rank:
//   sharded parameters   P_s = sum over units u of blk(S_u * b)                  (always held)
//   sharded gradients    G_s = sum over units u of blk(S_u * b)                  (always held)
//   optimizer state      O   = sum over units u of k * blk(4 * S_u)              (always held after
//                              the first step; k = 2 (Adam m, v) in fp32, 3 (m, v, fp32 master)
//                              in 16 bits)
//   a gathered unit      F_u = blk(N * S_u * b)                                  (the padded flat)
//   parameters peak      P_s + F_root + gathered layer units at peak, where these are
//                          full,    prefetch off: max_u F_u                       (1 unit)
//                          full,    prefetch on:  max_u (F_u + F_{u+1})           (2 units: the
//                                                 current one and the one prefetched)
//                          grad_op (either):      sum_u F_u                       (all: each stays
//                                                 gathered from its forward to its backward)
//   gradients peak       G_s + F_root + max_u F_u  (the root's full gradient lives through the
//                          whole backward; one layer unit's full gradient at a time, reduce-
//                          scattered and freed after the unit's backward)
//
// NO_SHARD: every rank holds every unit whole and never frees it:
//   parameters = gradients = sum over units of blk(numel_u * b),
//   optimizer state = sum over units of k * blk(4 * numel_u)
//
// --grads on-demand (common/sharding/flat_unit.h): no gradient is held between steps (gradients
// at rest 0). The peak: NO_SHARD's as above (every unit's gradient exists by the end of the
// backward); full and grad_op with one micro-batch per step the shards are made one unit at a
// time, common/sharding/gradient_peaks.h; with more, the persistent peak (the first
// micro-batch made them all). --optimizer-in-backward: at rest 0, the peak gradient_peaks.h's
// in-backward formula (NO_SHARD: whole unit gradients, no shards).
//
// Exact while each buffer is at most 1 MiB (small pool: a block is split to exactly its rounded
// size); a larger block may be handed out whole from the cache, which this formula does not model.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/allocator/allocator_config.h"
#include "common/model/model_config.h"
#include "common/model/precision.h"
#include "common/sharding/gradient_peaks.h"
#include "common/sharding/unit_layout.h"
#include "common/train/gradient_mode.h"
#include "suites/fsdp/fsdp_options.h"

namespace trainmem::fsdp {

// The engine's units as FSDP cuts them: K layers per layer unit, N slices (NO_SHARD: one slice, no
// padding: every rank keeps the unit whole).
inline std::vector<UnitLayout> fsdp_units(const ModelConfig& config, std::size_t world, const FsdpOptions& options) {
  return unit_layouts(config, options.mode == ShardingMode::none ? 1 : world, options.layers_per_unit);
}

struct FsdpMemory {
  std::size_t sharded_parameter_bytes = 0;  // P_s (NO_SHARD: the whole flat parameters)
  std::size_t sharded_gradient_bytes = 0;   // G_s
  std::size_t gradients_between_steps_bytes = 0;  // G_s (NO_SHARD: whole); 0 with gradients on demand
  std::size_t optimizer_state_bytes = 0;    // O
  std::size_t root_gathered_bytes = 0;      // F_root (0 for NO_SHARD: nothing is gathered)
  std::size_t largest_unit_gathered_bytes = 0;  // max_u F_u over the layer units
  std::size_t layer_units_gathered_at_peak = 0;  // 1, 2 or all (NO_SHARD: all, held for good)
  std::size_t gathered_layer_bytes_at_peak = 0;  // their bytes
  std::size_t parameters_peak_bytes = 0;    // peak of the `parameters` category
  std::size_t gradients_peak_bytes = 0;     // peak of the `gradients` category
  std::size_t optimizer_state_peak_bytes = 0;  // = O (allocated once, never freed)
};

inline FsdpMemory fsdp_memory(const ModelConfig& config, std::size_t world, const FsdpOptions& options,
                              Precision precision, GradientLifetime grads = GradientLifetime::persistent,
                              std::size_t accumulation_steps = 1) {
  const std::size_t b = dtype_size(storage_dtype(precision));
  const std::size_t state_arrays = precision == Precision::fp32 ? 2 : 3;  // m, v (+ master)
  const std::vector<UnitLayout> units = fsdp_units(config, world, options);
  FsdpMemory m;

  for (const UnitLayout& u : units) {
    m.sharded_parameter_bytes += round_size(u.shard_numel * b);
    m.sharded_gradient_bytes += round_size(u.shard_numel * b);
    m.optimizer_state_bytes += state_arrays * round_size(4 * u.shard_numel);
  }
  m.optimizer_state_peak_bytes = m.optimizer_state_bytes;
  m.gradients_between_steps_bytes = grads == GradientLifetime::persistent ? m.sharded_gradient_bytes : 0;
  // Per unit (units[0] is the root): F_u, its whole padded flat vector (gathered parameters, the
  // gradient bucket), and this rank's gradient shard (none kept as such in NO_SHARD).
  std::vector<std::size_t> bucket, shard;
  for (const UnitLayout& u : units) {
    bucket.push_back(round_size(u.padded_numel * b));
    shard.push_back(options.mode == ShardingMode::none ? 0 : round_size(u.shard_numel * b));
  }

  // The layer units' gathered sizes, F_u, in layer order.
  const std::vector<std::size_t> gathered(bucket.begin() + 1, bucket.end());
  m.largest_unit_gathered_bytes = gathered.empty() ? 0 : *std::max_element(gathered.begin(), gathered.end());

  if (options.mode == ShardingMode::none) {
    m.layer_units_gathered_at_peak = gathered.size();
    m.parameters_peak_bytes = m.sharded_parameter_bytes;
    m.gradients_peak_bytes = m.sharded_gradient_bytes;
    if (grads == GradientLifetime::until_update) m.gradients_peak_bytes = in_backward_gradients_peak(bucket, shard);
    return m;
  }

  m.root_gathered_bytes = bucket[0];
  if (options.mode == ShardingMode::grad_op) {
    m.layer_units_gathered_at_peak = gathered.size();
    for (std::size_t f : gathered) m.gathered_layer_bytes_at_peak += f;
  } else if (options.prefetch && gathered.size() >= 2) {
    m.layer_units_gathered_at_peak = 2;
    for (std::size_t i = 0; i + 1 < gathered.size(); ++i)
      m.gathered_layer_bytes_at_peak = std::max(m.gathered_layer_bytes_at_peak, gathered[i] + gathered[i + 1]);
  } else {
    m.layer_units_gathered_at_peak = gathered.empty() ? 0 : 1;
    m.gathered_layer_bytes_at_peak = m.largest_unit_gathered_bytes;
  }
  m.parameters_peak_bytes = m.sharded_parameter_bytes + m.root_gathered_bytes + m.gathered_layer_bytes_at_peak;
  m.gradients_peak_bytes = m.sharded_gradient_bytes + m.root_gathered_bytes + m.largest_unit_gathered_bytes;
  if (grads == GradientLifetime::until_step && accumulation_steps == 1)
    m.gradients_peak_bytes = on_demand_sharded_gradients_peak(bucket, shard);
  if (grads == GradientLifetime::until_update) m.gradients_peak_bytes = in_backward_gradients_peak(bucket, shard);
  return m;
}

// Bytes communicated per optimizer step and rank, in the Communicator's volume_bytes (the size of
// the whole buffer gathered or reduced; an all-reduce counts twice), with B_u = N * S_u * b and
// A micro-batches per step (--accum):
//   FULL_SHARD     A * (2 B_root + 3 sum_layers B_u)  each layer unit gathered for forward and again
//                                                     for backward, reduce-scattered once; the
//                                                     root gathered once, reduce-scattered once
//   SHARD_GRAD_OP  A * 2 sum_u B_u                    gathered once, reduce-scattered once
//   NO_SHARD       2 sum_u B_u                        one all-reduce per unit, on the last micro-batch
inline std::size_t fsdp_comm_volume_per_step(const ModelConfig& config, std::size_t world, const FsdpOptions& options,
                                             Precision precision, std::size_t accumulation_steps = 1) {
  const std::size_t b = dtype_size(storage_dtype(precision));
  std::size_t root = 0, layers = 0;
  for (const UnitLayout& u : fsdp_units(config, world, options))
    (u.root ? root : layers) += u.padded_numel * b;
  switch (options.mode) {
    case ShardingMode::full: return accumulation_steps * (2 * root + 3 * layers);
    case ShardingMode::grad_op: return accumulation_steps * 2 * (root + layers);
    case ShardingMode::none: return 2 * (root + layers);
  }
  return 0;
}

}  // namespace trainmem::fsdp
