// The OOM report's advice, from the estimator: which technique, the cheapest first, would make
// the configuration that just ran out of memory fit, and by how much.
//
//   --recompute selective would bring the peak reserved from 31.00 MiB to 21.00 MiB (capacity 24.00 MiB)
//
// The candidates are the registered techniques' remedies (Technique::remedies; RemedyCost ranks
// them), cheapest first, each simulated on the same capacity; the first that fits is named:
//   1. --loader lazy           (eager only) the dataset leaves the device; copies overlap compute
//   2. --attention flash       no B*H*T^2 matrices, and faster (on a GPU in 16 bits: with bf16)
//   3. --precision bf16        half the activation bytes; faster on tensor cores
//   4. --recompute selective   rebuild attention probabilities and GELU outputs: a few % more time
//   5. --batch b --accum K'    the same tokens per step in smaller micro-batches (b divides B)
//   6. --recompute full        one more forward per step: about a third more time
//   7. --zero 2 --offload optimizer, then --zero 3 --offload params   ZeRO-Offload: the optimizer
//                              state and its update on the host, at the run's world size (one
//                              device too); the advice says the host memory it takes
// Each remedy is tried alone, then with the cheaper remedies of the other techniques (bf16 +
// flash, bf16 + flash + selective, ... + full), where it combines.
// Sharding over more devices is left to the generic advice.
//
// One advisor for every command: `trainmem train` (out of memory), `trainmem estimate` (a run
// that does not fit) and `trainmem max-batch` (not even --batch 1 fits) print its lines.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/allocator/caching_allocator.h"
#include "common/train/training_setup.h"

namespace trainmem::estimator {

struct FittingRemedy {
  std::string flags;           // what to add to the command line, e.g. "--recompute selective"
  TrainingSetup setup;         // the configuration with it
  std::size_t peak_reserved;   // its predicted peak reserved
  std::size_t host_bytes;      // what it holds in host memory (offload; by the formula)
};

// What `setup` already does, for the generic advice to leave out (OomReport::in_effect).
RemediesInEffect remedies_in_effect(const TrainingSetup& setup);

// The remedies that fit `capacity`, cheapest first (empty when none does).
std::vector<FittingRemedy> remedies_that_fit(const TrainingSetup& failed, std::size_t capacity);

// Advice lines for an OOM of `failed` on a device of `capacity` usable bytes: the cheapest remedy
// that fits with the figures ("... would bring the peak from X to Y"), then the generic advice.
std::vector<std::string> estimator_oom_advice(const TrainingSetup& failed, std::size_t capacity, const OomReport& report);

// For CachingAllocator::set_oom_advisor: estimator_oom_advice with the capacity the allocator had
// (reserved + what the device still had free).
CachingAllocator::OomAdvisor make_oom_advisor(TrainingSetup setup);

}  // namespace trainmem::estimator
