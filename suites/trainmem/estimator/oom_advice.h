// The OOM report's advice, from the estimator: which technique, the cheapest first, would make
// the configuration that just ran out of memory fit, and by how much.
//
//   --recompute selective would bring the peak reserved from 31.00 MiB to 21.00 MiB (capacity 24.00 MiB)
//
// The candidates are the registered techniques' remedies (Technique::remedies), ranked by what
// they cost in time (RemedyCost: the dataset off the device, a faster kernel, fewer bits, a little
// recompute, smaller micro-batches, full recompute, then offload), each simulated on the same
// capacity; the first that fits is named. Each remedy is tried alone, then with the cheaper
// remedies of the other techniques, where it combines. Then the allocator's own advice
// (fragmentation) and, for each category that holds the memory, the ways the techniques offer to
// shrink it (Technique::category_remedies), but those the run already uses: sharding over more
// devices is left to these lines.
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

// For each category of memory the report says is worth shrinking (categories_to_shrink), the
// registered techniques' ways to shrink it that `setup` does not already use:
// "activations: 16-bit activations (--precision bf16) or activation recompute (...)".
std::vector<std::string> category_advice(const TrainingSetup& setup, const OomReport& report);

// The remedies that fit `capacity`, cheapest first (empty when none does).
std::vector<FittingRemedy> remedies_that_fit(const TrainingSetup& failed, std::size_t capacity);

// Advice lines for an OOM of `failed` on a device of `capacity` usable bytes: the cheapest remedy
// that fits with the figures ("... would bring the peak from X to Y"), then the allocator's
// fragmentation advice and the category advice (a larger device when there is neither).
std::vector<std::string> estimator_oom_advice(const TrainingSetup& failed, std::size_t capacity, const OomReport& report);

// For CachingAllocator::set_oom_advisor: estimator_oom_advice with the capacity the allocator had
// (reserved + what the device still had free).
CachingAllocator::OomAdvisor make_oom_advisor(TrainingSetup setup);

}  // namespace trainmem::estimator
