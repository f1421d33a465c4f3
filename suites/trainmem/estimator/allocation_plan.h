// The predicted allocation sequence of a training run: every tensor the model, the data loader,
// the trainer and the optimizer would allocate and free, in program order, with its size and
// category — without computing anything.
//
// It mirrors, call by call, what the real code does (common/model/gpt.cpp, compute_views.cpp,
// common/train/trainer.cpp, adamw_optimizer.cpp, suites/checkpointing/recompute.cpp,
// suites/lazy_loading/*_loader.cpp): the comments name the function each block follows. Replaying
// the sequence through a real CachingAllocator (plan_replay.h) then gives allocated AND reserved
// memory exactly as the allocator would have them — rounding, pools, segments, splits and all —
// because the allocator's behaviour depends only on the sequence of sizes.
//
// Two details the sequence must get right to be exact:
//   - fp32 views (compute_views.h): in bf16/fp16, every 16-bit operand of an op is widened into an
//     fp32 scratch tensor (workspace) for the duration of the call; on a GPU the matmuls skip this.
//   - argument order: the views made as a call's arguments are constructed right to left (what
//     GCC does for the Itanium ABI) and destroyed in reverse order of construction at the end of
//     the statement; only the reserved figure can depend on this (where blocks land), not the
//     allocated one.
//
// If the model changes what it allocates, the accuracy test (tests/test_estimator.cpp), which
// trains the same configurations for real, fails until this file follows.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/allocator/memory_category.h"
#include "suites/trainmem/estimator/training_setup.h"

namespace trainmem::estimator {

// Where in a run an allocation happens: building the model, loader and optimizer, or a step's
// forward, backward or optimizer phase (the trainer's recorder phases).
enum class Phase { setup, forward, backward, optimizer };
std::string to_string(Phase phase);

struct PlannedOp {
  enum class Kind { alloc, free };
  Kind kind = Kind::alloc;
  std::size_t id = 0;        // the tensor: alloc gives it, free names it
  std::size_t bytes = 0;     // alloc: what the tensor asks for (numel * element size)
  MemoryCategory category = MemoryCategory::other;
  Phase phase = Phase::setup;
  int step = 0;              // 0 during setup, then 1, 2, ...
  std::string name;          // e.g. "h3.attn.probs", "h3.qkv.f32" (a view's scratch)
};

// Setup, then `steps` optimizer steps. Two steps are enough for the peak: Adam's moments are
// allocated at the end of the first step, so the second is the first with everything in place,
// and every later step repeats it. A step with K micro-batches runs min(K, max_micro_batches)
// of them: from the second micro-batch on, each one allocates and frees exactly what the one
// before did (the accumulated gradients live throughout), so more add nothing.
std::vector<PlannedOp> plan_training(const TrainingSetup& setup, int steps = 2, std::size_t max_micro_batches = 3);

}  // namespace trainmem::estimator
