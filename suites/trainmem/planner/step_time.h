// A step's time, predicted from a meta run: the run declares its kernels, copies and collectives
// to a StepTimeLog (common/device/cost_log.h), which times each with a device model and plays
// them on two timelines, as a GPU runs them:
//   compute   kernels, copies (synchronous cudaMemcpy) and the host's work, one after another
//   network   collectives; a synchronous one starts when both timelines reach it and holds both
//             until it ends; an asynchronous one (FSDP's prefetching all-gather) starts when the
//             compute timeline reaches it, runs on the network timeline beside the kernels, and
//             holds compute only where it is waited for -- what the engine overlaps, no more.
// Recompute needs no rule: the recomputed kernels are in the run.
//
// A meta run makes min(K, 3) micro-batches (estimator/meta_run.h); from the second on, each
// repeats the one before except the last, which also synchronizes gradients. So with K
// micro-batches a step takes
//   t(step) = t(micro 1) + (K - 2) t(micro 2) + t(micro 3) + t(optimizer)      (K >= 3)
// and the micro-batches it ran, plainly, for K <= 3. The second step is timed (Adam's state exists).
#pragma once
#include <cstddef>
#include <map>
#include <vector>

#include "common/train/training_setup.h"
#include "suites/trainmem/estimator/meta_run.h"
#include "suites/trainmem/planner/device_model.h"

namespace trainmem::planner {

struct StepTime {
  double seconds = 0;
  double compute = 0;                // GEMM and attention kernels
  double memory = 0;                 // memory-bound kernels
  double communication = 0;          // every collective's time
  double exposed_communication = 0;  // what of it the compute timeline waited for
  double offload = 0;                // host<->device copies and the host's work
  double overhead = 0;               // per micro-batch, beyond the timed parts (device_model.h)
  void add(const StepTime& other, double weight);
};

class StepTimeLog : public CostLog {
 public:
  // micro_batches: K, the step's real count; the meta run makes min(K, 3).
  StepTimeLog(const DeviceModel& device, std::size_t micro_batches, long timed_step = 2);
  StepTime step_time() const;

  void kernel(const kernels::KernelCall& call, double seconds) override;
  void host_work(const kernels::KernelCall& call, double seconds) override;
  void copy(CopyDirection direction, double bytes, double seconds) override;
  void collective(Collective c, const CommCounts& call, int world_size, bool async, std::uint64_t id) override;
  void collective_wait(std::uint64_t id, double seconds) override;
  void begin_micro_batch(long step, std::size_t micro) override;
  void begin_optimizer(long step) override;
  void end_step(long step, double seconds) override;

 private:
  void close_segment();
  void open_segment(bool timed, double weight);
  void on_compute(double seconds, double StepTime::*part);

  const DeviceModel& device_;
  std::size_t micro_batches_;
  long timed_step_;
  bool timing_ = false;
  double clock_ = 0, network_ = 0, segment_start_ = 0, weight_ = 0;
  StepTime segment_, total_;
  std::map<std::uint64_t, double> in_flight_;  // asynchronous collectives: when each ends
};

struct Prediction {
  estimator::MetaRun memory;  // the estimator's figures, exactly (rank 0's)
  StepTime time;
};
// Runs `setup` on the meta device of `capacity` bytes (0: unlimited) with a StepTimeLog.
Prediction predict(const TrainingSetup& setup, const DeviceModel& device, std::size_t capacity);

}  // namespace trainmem::planner
