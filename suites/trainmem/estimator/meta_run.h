// The estimator's one measurement: the run itself (training_run.h), on the meta device.
//
// The meta device (common/device/device.h) runs the real code -- model, data loader, trainer,
// every strategy, optimizer -- with every kernel and copy skipped, on a caching allocator backed
// by no memory. So the allocation sequence is the run's own, and the allocator's figures (peak
// allocated, peak reserved, every category, segments, the OOM point) are the run's, to the byte.
// Nothing here re-describes what the code allocates.
//
// Two optimizer steps: Adam's moments appear at the end of the first, so the second is the first
// with everything in place; every later step repeats it.
// Accumulation: a step runs min(K, 3) micro-batches. From the second micro-batch on, each one
// allocates and frees what the one before did (the accumulated gradients live throughout), so
// more add nothing but time.
// Sharded runs (ZeRO, FSDP over N ranks): rank r's real strategy on a MetaCommunicator of N
// ranks (common/comm/meta_communicator.h). Every rank holds shards of the same size (the units
// are padded to a multiple of N, common/sharding/unit_layout.h) and the
// same micro-batch, so rank 0's figures are every rank's; the estimator's tests check this on a
// model whose sizes do not divide by N.
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "common/allocator/memory_category.h"
#include "common/allocator/memory_stats.h"
#include "common/allocator/out_of_memory.h"
#include "common/comm/communicator.h"
#include "common/train/training_setup.h"

namespace trainmem::estimator {

constexpr int kMetaSteps = 2;
constexpr std::size_t kMetaMicroBatches = 3;

struct MetaRun {
  MemoryStats stats;                  // the allocator's statistics at the end (peaks included)
  std::size_t peak_allocated = 0;     // allocated_bytes.all.peak
  std::size_t peak_reserved = 0;      // reserved_bytes.all.peak
  // The moment allocated memory peaked: the allocation that reached it, where in the run it
  // happened, and what each category held then (they sum to peak_allocated).
  std::string peak_phase;             // setup | forward | backward | optimizer
  long peak_step = 0;                 // 0 during setup, then 1, 2
  std::string peak_tensor;
  std::array<std::size_t, kNumMemoryCategories> at_peak{};
  // What each category holds at the end of the last step (the model states a rank keeps).
  std::array<std::size_t, kNumMemoryCategories> after_steps{};
  // Set when the device was too small: the run stopped at the allocation that failed
  // (oom->tensor names it).
  std::optional<OomReport> oom;
  std::string oom_phase;
  CommStats comm;                     // sharded runs: what rank r's collectives moved in the steps

  std::size_t category_peak(MemoryCategory c) const {
    return static_cast<std::size_t>(stats.by_category[index_of(c)].peak);
  }
};

// What a meta run finds besides the allocator's statistics and the OOM point.
enum class PeakMoment { find, skip };

// Runs the setup on the meta device of `capacity` bytes (0: unlimited, for the figures of a run
// that may not fit), as rank `rank` of setup.sharding.world_size when the setup is sharded.
// PeakMoment::find records every allocator event to fill peak_phase, peak_step, peak_tensor and
// at_peak; the searches that only ask "does it fit" or "how large is the peak" skip it.
// `costs`: where the run declares its kernels, copies and collectives (common/device/cost_log.h),
// for `trainmem plan` to time them; nullptr: nowhere.
MetaRun run_on_meta(const TrainingSetup& setup, std::size_t capacity = 0, int rank = 0,
                    PeakMoment peak_moment = PeakMoment::find, CostLog* costs = nullptr);

}  // namespace trainmem::estimator
