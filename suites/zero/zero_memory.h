// What ZeRO keeps on each rank, and what it communicates: the formulas the zero suite's tests
// check against the allocator and the communicator, and that `trainmem estimate` predicts from.
//
// Two versions of every figure:
//
//   1. The paper's (Rajbhandari et al. 2019, "ZeRO: Memory Optimizations Toward Training Trillion
//      Parameter Models", section 5 and Figure 1): Ψ parameters, N ranks, K bytes of optimizer
//      state per parameter, no rounding, no padding.
//
//                      parameters   gradients   optimizer state   total (16-bit, K = 12)
//        stage 0 (DP)  2Ψ           2Ψ          KΨ                16Ψ
//        stage 1       2Ψ           2Ψ          KΨ/N              4Ψ + 12Ψ/N
//        stage 2       2Ψ           2Ψ/N        KΨ/N              2Ψ + 14Ψ/N
//        stage 3       2Ψ/N         2Ψ/N        KΨ/N              16Ψ/N
//
//      (fp32 training: 4Ψ + 4Ψ + 8Ψ, the fp32 weights being their own master copy.)
//      Communication per step, in elements of the communicated type (section 7):
//        stages 0-2  2Ψ   (an all-reduce is a reduce-scatter Ψ plus an all-gather Ψ)
//        stage 3     3Ψ   (all-gather before forward Ψ, before backward Ψ, reduce-scatter Ψ)
//
//   2. This implementation's, to the byte (ZeroExactBytes below): what suites/zero allocates,
//      with the sharding engine's units (per-unit padding to a multiple of N), the allocator's
//      rounding of every allocation to 512 bytes, the gradient buckets and the gathered units.
//      The tests compare these with the allocator's per-category bytes and the communicator's
//      volume EXACTLY. Categories as the engine's convention says (common/sharding/
//      sharding_engine.h): a buffer's category is what it holds. So a unit's gathered parameters
//      are `parameters` and a unit's gradient bucket `gradients`: at rest (between steps) the
//      model states hold exactly the partitioned figures above; within a micro-step the
//      parameters and gradients peak higher by the units gathered and the buckets open. No
//      buffer exists only to be communicated: the `communication` peak is 0.
//
// The units (common/sharding/unit_layout.h, with one layer per unit): the ROOT unit (wte, wpe,
//   lnf.weight, lnf.bias: the tied embedding is used at both ends of the model) and one unit per
//   layer (its 12 tensors). Each unit is one flat vector of n_u elements, padded to
//   P_u = N * ceil(n_u / N); rank r owns the slice [r*S_u, (r+1)*S_u), S_u = P_u / N, of every
//   unit. P = sum of P_u (= Ψ plus at most N-1 padding elements per unit) replaces Ψ in the exact
//   figures.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/allocator/allocator_config.h"  // round_size: every allocation is rounded up to 512 B
#include "common/model/parameter_table.h"
#include "common/model/model_config.h"
#include "common/model/precision.h"
#include "common/sharding/gradient_peaks.h"
#include "common/sharding/sharded_adamw.h"  // Offload
#include "common/sharding/unit_layout.h"     // padded_numel
#include "common/train/gradient_mode.h"
#include "common/train/formula_bytes.h"

namespace trainmem::zero {

// ---------------------------------------------------------------------------------------------
// 1. The paper's formulas
// ---------------------------------------------------------------------------------------------

// Bytes per parameter of each model state when nothing is partitioned: bytes_per_parameter()
// (common/model/precision.h): fp32 4 + 4 + 8, 16-bit 2 + 2 + K with K = 12.

// Per-rank model-state bytes (common/train/formula_bytes.h). `host` is what offload moves to host memory.
using trainmem::ModelStateBytes;

inline void check_stage(int stage, int world_size) {
  if (stage < 0 || stage > 3) throw std::invalid_argument("--zero must be 0, 1, 2 or 3");
  if (world_size < 1) throw std::invalid_argument("the world size must be at least 1");
}

// Offload (ZeRO-Offload, Ren et al. 2021; ZeRO-Infinity for parameters):
//   optimizer  the optimizer state of the rank's shard lives in host memory and Adam runs there.
//              On the host it is always fp32 master + m + v = 12 B per shard element (the device
//              weights are then a copy, even in fp32).
//   params     (stage 3 only) the parameter shard lives in host memory too; a unit is copied to the
//              device when it is gathered. Device parameters at rest: 0.
inline ModelStateBytes paper_model_states(double psi, int world_size, int stage, Precision precision,
                                          Offload offload = Offload::none) {
  check_stage(stage, world_size);
  const BytesPerParameter b = bytes_per_parameter(precision);
  const auto times_psi = [psi](std::size_t bytes) { return static_cast<double>(bytes) * psi; };
  const double N = world_size;
  ModelStateBytes m;
  m.parameters = times_psi(b.parameters) / (stage >= 3 ? N : 1.0);            // P_p from stage 3
  m.gradients = times_psi(b.gradients) / (stage >= 2 ? N : 1.0);              // P_g from stage 2
  m.optimizer_state = times_psi(b.optimizer_state) / (stage >= 1 ? N : 1.0);  // P_os from stage 1
  if (offload != Offload::none) {
    m.host += 12.0 * psi / N;  // fp32 master + m + v of this rank's shard
    m.optimizer_state = 0;
  }
  if (offload == Offload::params) {
    m.host += m.parameters;  // the rank's parameter shard
    m.parameters = 0;
  }
  return m;
}

// Elements each rank moves per optimizer step (the paper's volume, section 7).
inline double paper_communication_elements(double psi, int stage) {
  check_stage(stage, 1);
  return stage == 3 ? 3.0 * psi : 2.0 * psi;
}

// The paper's Figure 1: Ψ = 7.5B, N = 64, 16-bit with Adam (K = 12), in decimal GB:
//   baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
constexpr double kFigure1Parameters = 7.5e9;
constexpr int kFigure1Ranks = 64;
inline double figure1_gb(int stage) {
  return paper_model_states(kFigure1Parameters, kFigure1Ranks, stage, Precision::bf16).device_total() / 1e9;
}

// ---------------------------------------------------------------------------------------------
// 2. This implementation, to the byte
// ---------------------------------------------------------------------------------------------

// The model's parameter tensors (element counts) grouped into units, in the flat order used.
struct ZeroUnits {
  std::vector<std::size_t> root;   // wte Vp*C, wpe T*C, lnf.weight C, lnf.bias C
  std::vector<std::size_t> layer;  // one layer's 12 tensors (every layer the same)
  std::size_t layers = 0;          // L
};

// From the model's parameter table (common/model/parameter_table.h).
inline ZeroUnits zero_units(const ModelConfig& c) {
  const ParameterTable table(c);
  ZeroUnits u;
  for (std::size_t i : table.root_indices()) u.root.push_back(table[i].numel());
  if (c.layers > 0)
    for (std::size_t i : table.layer_indices(0)) u.layer.push_back(table[i].numel());
  u.layers = c.layers;
  return u;
}

inline std::size_t sum(const std::vector<std::size_t>& v) {
  std::size_t s = 0;
  for (std::size_t x : v) s += x;
  return s;
}

// Everything the allocator and the communicator will show for one rank (every rank the same:
// slices are equal, the padding is allocated on every rank).
struct ZeroExactBytes {
  // Device memory per category at rest, between steps (from the first optimizer step on: stage
  // 0's AdamW allocates m and v then, as PyTorch's optimizers do). The optimizer state never
  // changes within a step.
  std::uint64_t parameters = 0, gradients = 0, optimizer_state = 0;
  // The peaks within a step: at rest plus the units gathered (parameters) and the gradient
  // buckets open (gradients) at once.
  std::uint64_t parameters_peak = 0, gradients_peak = 0;
  // Peak of category `communication`: buffers that exist only to move bytes. The engine's
  // training allocates none (gathered units are parameters, buckets gradients): always 0.
  std::uint64_t communication_peak = 0;
  // Host memory (offload), plain heap, no rounding.
  std::uint64_t host = 0;
  // Communicator::stats().by_category[...].volume_bytes for one optimizer step.
  std::uint64_t volume_gradients = 0, volume_parameters = 0;
};

// n_u = elements of a unit, e = bytes per element of the model's storage type, N ranks,
// K = micro-batches per optimizer step (gradient accumulation).
//
// Gradients not held between steps (`grads`, common/train/gradient_mode.h; flat_unit.h): at rest 0.
// Their peak (common/sharding/gradient_peaks.h): with --grads on-demand every gradient exists by the
// end of the backward, so whole gradients (stages 0-1) peak at the persistent figure and shards
// (stages 2-3, one micro-batch) at the on-demand formula; with the optimizer in the backward
// (stages 1-3) at the in-backward formula (stage 1: whole flat gradients, no shards).
inline ZeroExactBytes exact_model_states(const ZeroUnits& units, int world_size, int stage, Precision precision,
                                         Offload offload = Offload::none, std::size_t accumulation_steps = 1,
                                         GradientLifetime grads = GradientLifetime::persistent) {
  if (grads != GradientLifetime::persistent) {
    ZeroExactBytes x = exact_model_states(units, world_size, stage, precision, offload, accumulation_steps);
    const auto N = static_cast<std::size_t>(world_size);
    const std::uint64_t e = precision == Precision::fp32 ? 4 : 2;
    const std::uint64_t P_root = padded_numel(sum(units.root), N), P_layer = padded_numel(sum(units.layer), N);
    const bool shards = stage >= 2;
    std::vector<std::size_t> bucket{round_size(P_root * e)}, shard{shards ? round_size(P_root / N * e) : 0};
    bucket.resize(1 + units.layers, round_size(P_layer * e));
    shard.resize(1 + units.layers, shards ? round_size(P_layer / N * e) : 0);
    if (grads == GradientLifetime::until_update && stage >= 1) x.gradients_peak = in_backward_gradients_peak(bucket, shard);
    if (grads == GradientLifetime::until_step && shards && accumulation_steps == 1)
      x.gradients_peak = on_demand_sharded_gradients_peak(bucket, shard);
    x.gradients = 0;
    return x;
  }
  check_stage(stage, world_size);
  const auto N = static_cast<std::size_t>(world_size);
  const std::uint64_t e = precision == Precision::fp32 ? 4 : 2;
  const bool master = precision != Precision::fp32;  // 16-bit weights need fp32 master weights
  const std::uint64_t K = accumulation_steps;
  const std::size_t L = units.layers;
  const std::size_t n_root = sum(units.root), n_layer = sum(units.layer);
  const std::uint64_t P_root = padded_numel(n_root, N), P_layer = padded_numel(n_layer, N);
  const std::uint64_t S_root = P_root / N, S_layer = P_layer / N;
  const std::uint64_t P = P_root + L * P_layer;  // padded elements of the whole model
  ZeroExactBytes x;

  if (stage == 0) {
    // Plain data parallelism: the model's own tensors (one allocation each) and AdamWOptimizer's
    // m, v (and master) per tensor, on every rank; every gradient tensor all-reduced in place.
    auto each_tensor = [&](std::size_t n, std::uint64_t copies) {
      x.parameters += copies * round_size(n * e);
      x.gradients += copies * round_size(n * e);
      x.optimizer_state += copies * (master ? 3 : 2) * round_size(n * 4);
    };
    for (std::size_t n : units.root) each_tensor(n, 1);
    for (std::size_t n : units.layer) each_tensor(n, L);
    // all-reduce = reduce-scatter + all-gather: volume 2 * size, counted as gradients; once per step
    // (the last micro-batch's backward; the others accumulate locally, as DDP's no_sync).
    x.volume_gradients = 2 * (n_root + L * n_layer) * e;
    x.parameters_peak = x.parameters;
    x.gradients_peak = x.gradients;
    return x;
  }

  // Stages 1-3: one allocation per unit and buffer kind.
  const std::uint64_t full_root = round_size(P_root * e), full_layer = round_size(P_layer * e);
  const std::uint64_t shard_root = round_size(S_root * e), shard_layer = round_size(S_layer * e);
  const std::uint64_t all_full = full_root + L * full_layer, all_shards = shard_root + L * shard_layer;

  // Optimizer state (ShardedAdamW): per unit shard, m and v (4 B each) and, for a 16-bit model, the
  // fp32 master weights (4 B), each one allocation. With offload: host vectors of master, m, v and
  // an fp32 gradient copy = 16 B per shard element, no rounding, nothing on the device.
  if (offload == Offload::none) {
    const std::uint64_t arrays = master ? 3 : 2;
    x.optimizer_state = arrays * (round_size(S_root * 4) + L * round_size(S_layer * 4));
  } else {
    x.host = 16 * (S_root + L * S_layer);
  }

  // Within a micro-step (stages 2-3), at most the root unit and one layer unit each have a
  // gradient bucket open (stage 3: are gathered too) at once: the root's from the head's backward
  // to the end of backward, a layer's around its own backward (the engine needs L >= 1).
  const std::uint64_t root_and_one_layer = full_root + full_layer;
  switch (stage) {
    case 1:
      // Full flat parameters and gradients per unit (the model's tensors are views into them).
      x.parameters = all_full;
      x.gradients = all_full;
      // Once per step: reduce-scatter every unit's gradients, all-gather the updated parameters.
      x.volume_gradients = P * e;
      x.volume_parameters = P * e;
      break;
    case 2:
      // Full flat parameters; gradient shards at rest. In a micro-step's backward: the root unit's
      // gradient bucket (wte's gradient is written at both ends of backward) and one layer's
      // bucket at a time, each freed after its reduce-scatter.
      x.parameters = all_full;
      x.gradients = all_shards;
      x.gradients_peak = all_shards + root_and_one_layer;
      x.volume_gradients = K * P * e;  // reduce-scatter every micro-batch (as DeepSpeed does)
      x.volume_parameters = P * e;     // all-gather after the update
      break;
    case 3:
      // Parameter and gradient shards at rest. Gathered: the root unit for the whole micro-step
      // (as FSDP's root unit), one layer at a time around its forward and again around its
      // backward; gradient buckets as in stage 2. Peak: in a layer's backward, root and that
      // layer both gathered and both with a bucket.
      x.parameters = offload == Offload::params ? 0 : all_shards;
      x.gradients = all_shards;
      x.parameters_peak = x.parameters + root_and_one_layer;
      x.gradients_peak = all_shards + root_and_one_layer;
      if (offload == Offload::params) x.host += (S_root + L * S_layer) * e;
      x.volume_gradients = K * P * e;
      // per micro-batch: root gathered once (3Ψ's second gather is saved: it stays), layers twice
      x.volume_parameters = K * (P_root + 2 * L * P_layer) * e;
      break;
    default:
      break;
  }
  if (stage < 3) x.parameters_peak = x.parameters;
  if (stage < 2) x.gradients_peak = x.gradients;
  return x;
}

inline std::string stage_name(int stage) {
  switch (stage) {
    case 0: return "data parallel (stage 0)";
    case 1: return "ZeRO-1 (P_os)";
    case 2: return "ZeRO-2 (P_os+g)";
    case 3: return "ZeRO-3 (P_os+g+p)";
  }
  return "?";
}

}  // namespace trainmem::zero
