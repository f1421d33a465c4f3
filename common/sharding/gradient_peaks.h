// The peak of the `gradients` category within a step of a sharding plan whose gradients are not
// kept between steps (flat_unit.h): the formulas zero_memory.h and fsdp_memory.h share.
//
// Bytes per unit u (allocator-rounded): F_u its gradient bucket (the whole padded flat gradient),
// s_u this rank's gradient shard (0 where the plan keeps gradients whole: ZeRO-1, FSDP NO_SHARD);
// u = 0 the root, 1..U the layer units in forward order. The root's bucket is open through the
// whole backward (the tied wte is written at both ends). The layer units' backwards run from U
// down to 1; unit u's shard is made by its reduce-scatter while its bucket still exists.
//
// --grads on-demand, one micro-batch per step: the shards stay until the optimizer step, so at
// unit u's reduce-scatter F_0 + F_u + (s_u + ... + s_U) are held; last, the root's reduce-scatter
// holds F_0 + s_0 + ... + s_U:
//
//   peak = F_0 + max( max over u >= 1 of (F_u + s_u + ... + s_U),  s_0 + s_1 + ... + s_U )
//
// (Persistent shards hold every s_v at every moment: F_0 + max_u F_u + sum_v s_v, which is also the
// on-demand peak from a step's second micro-batch on: the shards made by the first one stay.)
//
// --optimizer-in-backward: unit u's shard is updated and freed right after its reduce-scatter (its
// whole gradient, when kept whole, right after its reduction), so only one layer unit's exist
// besides the root's bucket:
//
//   peak = F_0 + max( max over u >= 1 of (F_u + s_u),  s_0 )
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace trainmem {

inline void check_units(const std::vector<std::size_t>& bucket, const std::vector<std::size_t>& shard) {
  if (bucket.size() != shard.size() || bucket.size() < 2)
    throw std::invalid_argument("gradient peaks: a bucket and a shard for the root and at least one layer unit");
}

inline std::size_t on_demand_sharded_gradients_peak(const std::vector<std::size_t>& bucket,
                                                    const std::vector<std::size_t>& shard) {
  check_units(bucket, shard);
  std::size_t shards_so_far = 0, peak_above_root = 0;  // walking the backward: units U, U-1, ..., 1
  for (std::size_t u = bucket.size() - 1; u >= 1; --u) {
    shards_so_far += shard[u];
    peak_above_root = std::max(peak_above_root, bucket[u] + shards_so_far);
  }
  peak_above_root = std::max(peak_above_root, shards_so_far + shard[0]);
  return bucket[0] + peak_above_root;
}

inline std::size_t in_backward_gradients_peak(const std::vector<std::size_t>& bucket, const std::vector<std::size_t>& shard) {
  check_units(bucket, shard);
  std::size_t peak_above_root = shard[0];
  for (std::size_t u = 1; u < bucket.size(); ++u) peak_above_root = std::max(peak_above_root, bucket[u] + shard[u]);
  return bucket[0] + peak_above_root;
}

}  // namespace trainmem
