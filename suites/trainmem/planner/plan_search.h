// `trainmem plan`'s search: every mix of the registered techniques' settings that keeps the
// global batch, each measured by a meta run (memory exact, as `estimate`'s) and timed by a device
// model from that run's own kernels (step_time.h); the fastest that fits first.
//
// The settings come from the techniques (Technique::plan_choices): the micro-batch splits
// (accumulation), precision, recompute, attention, ZeRO / FSDP / offload, the gradients. The
// product is walked in order, each technique's settings fastest first, and pruned:
//   - dominated: where a mix fits, a mix that differs only by later settings of techniques that
//     trade time for memory (a smaller micro-batch, more recompute, a higher stage) is slower and
//     not needed, so it is not run (it could only add a point above the front);
//   - model states: where a mix runs out of memory before its first step (the parameters,
//     gradients and optimizer state alone do not fit), every mix with the same precision, sharding
//     and gradients does too, whatever its batch, recompute or attention;
//   - invalid: a mix the techniques' own validation rejects (e.g. --zero with --fsdp).
// Nothing else is assumed of the allocator: each listed figure is a meta run's.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/train/training_setup.h"
#include "suites/trainmem/planner/device_model.h"
#include "suites/trainmem/planner/step_time.h"

namespace trainmem::planner {

struct PlanQuestion {
  // What every candidate runs with, as train's arguments, one word each (a value with spaces stays
  // one): the model ({"--model", "gpt2-1.5b", "--seq", "1024"}) and the allocator's settings.
  std::vector<std::string> run_args;
  std::size_t global_batch = 0;  // sequences per optimizer step, over all ranks
  std::size_t world_size = 1;
  DeviceKind backend = DeviceKind::cpu;  // whose allocation pattern (and kernels) the runs follow
  std::size_t capacity = 0;  // usable device memory per rank, bytes
};

struct Candidate {
  std::string flags;     // the techniques' flags: "--batch 4 --accum 2 --precision bf16 ..."
  std::string describe;  // the progress line's words for it
  TrainingSetup setup;
  bool fits = false;
  std::string reason;    // why not, when it does not fit
  // Its peaks; for one that does not fit, what it held when the request that failed was made,
  // that request included (so above the capacity), not the peak it reached before.
  std::size_t peak_allocated = 0, peak_reserved = 0;
  StepTime time;
};

struct Plan {
  std::vector<Candidate> fitting;      // fastest first
  std::vector<Candidate> not_fitting;  // in search order
  std::size_t mixes = 0;               // the product's size
  std::size_t meta_runs = 0;
  double seconds = 0;
};

// Checks the question before any work (a calibration, the search): every rank takes the same share
// of the global batch, and train takes the run's arguments (the model). Throws
// std::invalid_argument or ModelConfigError saying what to change.
void check_question(const PlanQuestion& question);

// Throws as check_question does when the question is malformed.
Plan make_plan(const PlanQuestion& question, const DeviceModel& device);

}  // namespace trainmem::planner
