// One `trainmem train` configuration, described without running it: what training_run.h builds
// (on a real device for `train` and `max-batch`, on the meta device for an estimate).
//
// The fields are the ones `trainmem train` takes (model, micro-batch, techniques, data loader,
// device kind and allocator options, the optimizer's settings), so an estimate is always the
// estimate of a run you can start (suites/trainmem/estimate_flags.h builds one from the command
// line).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/allocator/allocator_config.h"
#include "common/device/device.h"
#include "common/model/attention_kind.h"
#include "common/model/gpt_config.h"
#include "common/model/precision.h"
#include "common/sharding/sharded_adamw.h"
#include "kernels/adamw.h"
#include "suites/allocator/empty_cache_policy.h"
#include "suites/checkpointing/recompute.h"
#include "suites/fsdp/fsdp_options.h"
#include "suites/mixed_precision/loss_scaler.h"

namespace trainmem::estimator {

enum class Loader { sequential, eager, lazy };

// Data parallelism over `world_size` ranks, each holding a shard of the model states
// (suites/zero, suites/fsdp). Every rank runs the same micro-batch of B rows.
struct Sharding {
  std::size_t world_size = 1;
  int zero = -1;                     // ZeRO stage 0..3; -1: none (0 when world_size > 1 and no FSDP)
  Offload offload = Offload::none;   // ZeRO-Offload of the optimizer state (and parameters)
  bool fsdp = false;                 // FSDP instead of ZeRO, with these options:
  fsdp::FsdpOptions fsdp_options;
  // ZeRO's stage in effect (-1: no data parallelism at all).
  int zero_stage() const { return zero >= 0 ? zero : (!fsdp && world_size > 1 ? 0 : -1); }
  bool active() const { return fsdp || zero_stage() >= 0; }
  std::string describe() const;  // "ZeRO-2 (P_os+g) over 64 ranks", "FSDP full over 8 ranks"
};
Loader parse_loader(const std::string& text);  // sequential | eager | lazy; std::invalid_argument
std::string to_string(Loader loader);

struct TrainingSetup {
  GPTConfig model;               // T = model.seq: trainmem trains on full-length sequences
  std::size_t batch = 4;         // B, the micro-batch
  std::size_t accum = 1;         // micro-batches per optimizer step
  RecomputePolicy recompute;     // --recompute
  Precision precision = Precision::fp32;
  AttentionKind attention = AttentionKind::naive;

  Loader loader = Loader::sequential;
  std::size_t prefetch = 2;         // lazy: device batch buffers in the ring
  std::size_t dataset_tokens = 0;   // eager: tokens uploaded to the device (0: the synthetic corpus's size)

  // Which backend's allocation pattern (a meta run's --pattern): the CUDA backend's adds flash
  // attention's backward workspace and the gradient norm's device accumulator
  // (Device::cuda_pattern).
  DeviceKind backend = DeviceKind::cpu;
  AllocatorConfig allocator;

  Sharding sharding;  // per-rank figures when active
  allocator::EmptyCachePolicy empty_cache;  // --empty-cache: changes reserved memory, not allocated

  // What the run needs that changes no memory figure.
  std::uint64_t seed = 1;
  kernels::AdamWHyper adam;        // --lr, --weight-decay
  float max_grad_norm = 1.0f;      // --grad-clip (0: none)
  LossScalerOptions loss_scaler;   // fp16
  bool pinned = true;              // lazy: pinned host staging

  std::size_t seq() const { return model.seq; }
  // The number of tokens `trainmem train --data synthetic` generates for this global batch (it is
  // what an eager loader puts on the device): common/data/token_file.h synthetic_dataset_tokens.
  std::size_t synthetic_tokens() const;
  std::size_t eager_tokens() const { return dataset_tokens ? dataset_tokens : synthetic_tokens(); }
  // Checks what the trainer and the model would refuse (std::invalid_argument, one line).
  void validate() const;
  // "bf16 accum=4 recompute=selective attention=flash loader=lazy", for messages.
  std::string describe() const;
};

}  // namespace trainmem::estimator
