// One training run, described without running it: what training_run.h builds (on a real device
// for `trainmem train` and `max-batch`, on the meta device for an estimate).
//
// The core is written out here: the model and its storage, the micro-batch, the optimizer, the
// device, the ranks. Every technique keeps its own options, in its own type, in `techniques`
// (technique_options.h); its registration (technique.h) fills them from its flags. Adding a
// technique adds no field here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/allocator/allocator_config.h"
#include "common/device/device.h"
#include "common/model/attention_kind.h"
#include "common/model/model_config.h"
#include "common/model/precision.h"
#include "common/train/technique_options.h"
#include "kernels/adamw.h"

namespace trainmem {

struct TrainingSetup {
  ModelConfig model;             // T = model.seq: trainmem trains on full-length sequences
  std::size_t batch = 4;       // B, the micro-batch (per rank)
  std::size_t accum = 1;       // micro-batches per optimizer step (suites/accumulation's --accum)
  // The model's options (ModelOptions), core options that suites measure (common/README.md, "Core
  // options and techniques"): its storage (suites/mixed_precision) and attention kernel
  // (suites/flash_attention), their flags declared with the shape's.
  Precision precision = Precision::fp32;
  AttentionKind attention = AttentionKind::naive;
  bool attention_given = false;  // (else suites/flash_attention chooses the device's default)

  // Which backend's allocation pattern (a meta run's --pattern): the CUDA backend's adds flash
  // attention's backward workspace and the gradient norm's device accumulator
  // (Device::cuda_pattern).
  DeviceKind backend = DeviceKind::cpu;
  AllocatorConfig allocator;
  std::size_t world_size = 1;      // ranks of data parallelism (mpirun -np N, estimate --world-size)
  std::size_t dataset_tokens = 0;  // the dataset's size in tokens (0: the synthetic corpus's)

  // What the run needs that changes no memory figure.
  std::uint64_t seed = 1;
  kernels::AdamWHyper adam;        // --lr, --weight-decay
  float max_grad_norm = 1.0f;      // --grad-clip (0: none)

  TechniqueOptions techniques;     // each technique's own options, by type
  template <typename T>
  const T& option() const { return techniques.get<T>(); }
  template <typename T>
  T& option() { return techniques.edit<T>(); }

  std::size_t seq() const { return model.seq; }
  // The number of tokens `trainmem train --data synthetic` generates for this global batch:
  // common/data/token_file.h synthetic_dataset_tokens.
  std::size_t synthetic_tokens() const;
  std::size_t dataset_size() const { return dataset_tokens ? dataset_tokens : synthetic_tokens(); }
  // The core's rules (std::invalid_argument, one line). Each technique checks its own options and
  // how they combine (Technique::validate); Techniques::validate runs both.
  void validate() const;
};

}  // namespace trainmem
