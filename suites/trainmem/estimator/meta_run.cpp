#include "suites/trainmem/estimator/meta_run.h"

#include <algorithm>
#include <memory>

#include "common/comm/meta_communicator.h"
#include "common/data/host_tokens.h"
#include "common/train/training_run.h"
#include "suites/trainmem/techniques.h"

namespace trainmem::estimator {

namespace {

// What the allocator can count (common/util/checked_math.h): "unlimited".
constexpr std::size_t kUnlimited = std::size_t{1} << 62;

std::string phase_name(std::string_view recorder_phase) {
  return recorder_phase == "none" ? std::string("setup") : std::string(recorder_phase);
}

// The moment allocated memory peaked, from the recorder's events: allocated bytes grow at an
// alloc by the block's size and shrink at free_requested (as the allocator's statistics count).
// The moment is the first allocation that reaches the statistics' peak after the last time the
// total was above it: a run may reset its peaks (FSDP does once the model is sharded).
void find_peak_moment(const MemoryRecorder& recorder, MetaRun& r) {
  std::array<std::size_t, kNumMemoryCategories> held{};
  std::size_t total = 0;
  bool found = false;
  for (const TraceEvent& e : recorder.events()) {
    if (e.action == TraceAction::free_requested) {
      held[index_of(e.category)] -= e.block_size;
      total -= e.block_size;
    } else if (e.action == TraceAction::alloc) {
      held[index_of(e.category)] += e.block_size;
      total += e.block_size;
      if (total > r.peak_allocated) {
        found = false;  // before a reset of the peaks
      } else if (total == r.peak_allocated && !found) {
        found = true;
        r.at_peak = held;
        r.peak_phase = phase_name(recorder.phases()[e.phase]);
        r.peak_step = std::max<long>(0, static_cast<long>(e.step));
        r.peak_tensor = recorder.names()[e.name];
      }
    }
  }
}

}  // namespace

MetaRun run_on_meta(const TrainingSetup& setup, std::size_t capacity, int rank, PeakMoment peak_moment, CostLog* costs) {
  const Techniques& techniques = registered_techniques();
  TrainingSetup s = setup;
  s.accum = std::min(s.accum, kMetaMicroBatches);
  techniques.complete(s);
  techniques.validate(s);
  DeviceOptions options;
  options.choice = "meta";
  options.device_memory = capacity ? capacity : kUnlimited;
  options.allocator = s.allocator;
  options.pattern = s.backend == DeviceKind::cuda ? DeviceKind::cuda : DeviceKind::cpu;
  auto device = Device::open(options);
  device->allocator().recorder().enable(peak_moment == PeakMoment::find);
  std::unique_ptr<Communicator> world;
  if (techniques.sharding(s)) world = std::make_unique<MetaCommunicator>(rank, static_cast<int>(s.world_size));
  device->set_cost_log(costs);
  if (world) world->set_cost_log(costs);

  MetaRun r;
  try {
    // The dataset as the run's size (a file's, or the synthetic corpus train would make), without
    // values: on meta the loaders read no token and hold no batch buffer (host memory that does
    // not grow with the batch); an eager loader's device copy is sized by it.
    TrainingRun run(s, techniques, *device, world.get(), HostTokens::without_values(s.dataset_size()));
    for (int i = 0; i < kMetaSteps; ++i) run.step();
    const MemoryStats held = device->allocator().stats();
    for (std::size_t c = 0; c < kNumMemoryCategories; ++c)
      r.after_steps[c] = static_cast<std::size_t>(held.by_category[c].current);
  } catch (const OutOfMemoryError& e) {
    r.oom = e.report();
    r.oom_phase = phase_name(device->allocator().recorder().phase());
  }
  r.stats = device->allocator().stats();
  r.peak_allocated = static_cast<std::size_t>(r.stats.allocated_bytes[0].peak);
  r.peak_reserved = static_cast<std::size_t>(r.stats.reserved_bytes[0].peak);
  if (peak_moment == PeakMoment::find) find_peak_moment(device->allocator().recorder(), r);
  if (world) r.comm = world->stats();
  return r;
}

}  // namespace trainmem::estimator
