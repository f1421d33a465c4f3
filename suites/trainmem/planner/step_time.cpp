#include "suites/trainmem/planner/step_time.h"

#include <algorithm>

namespace trainmem::planner {

void StepTime::add(const StepTime& o, double w) {
  seconds += w * o.seconds;
  compute += w * o.compute;
  memory += w * o.memory;
  communication += w * o.communication;
  exposed_communication += w * o.exposed_communication;
  offload += w * o.offload;
  overhead += w * o.overhead;
}

StepTimeLog::StepTimeLog(const DeviceModel& device, std::size_t micro_batches, long timed_step)
    : device_(device), micro_batches_(std::max<std::size_t>(1, micro_batches)), timed_step_(timed_step) {}

void StepTimeLog::on_compute(double seconds, double StepTime::*part) {
  if (!timing_) return;
  clock_ += seconds;
  segment_.*part += seconds;
}

void StepTimeLog::kernel(const kernels::KernelCall& call, double) {
  on_compute(device_.kernel_seconds(call),
             call.kind == kernels::KernelClass::memory ? &StepTime::memory : &StepTime::compute);
}

void StepTimeLog::host_work(const kernels::KernelCall& call, double) {
  on_compute(device_.host_seconds(call), &StepTime::offload);
}

void StepTimeLog::copy(CopyDirection direction, double bytes, double) {
  on_compute(device_.copy_seconds(direction, bytes),
             direction == CopyDirection::device_to_device ? &StepTime::memory : &StepTime::offload);
}

void StepTimeLog::collective(Collective c, const CommCounts& call, int world_size, bool async, std::uint64_t id) {
  if (!timing_) return;
  const double t = device_.collective_seconds(c, call, world_size);
  segment_.communication += t;
  const double start = std::max(clock_, network_);
  network_ = start + t;
  if (async && device_.overlaps_collectives()) {
    in_flight_[id] = network_;
    return;
  }
  segment_.exposed_communication += network_ - clock_;
  clock_ = network_;
}

void StepTimeLog::collective_wait(std::uint64_t id, double) {
  const auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return;
  if (timing_ && it->second > clock_) {
    segment_.exposed_communication += it->second - clock_;
    clock_ = it->second;
  }
  in_flight_.erase(it);
}

void StepTimeLog::close_segment() {
  if (!timing_) return;
  segment_.seconds = clock_ - segment_start_;
  total_.add(segment_, weight_);
  timing_ = false;
}

void StepTimeLog::open_segment(bool timed, double weight) {
  timing_ = timed;
  weight_ = weight;
  segment_ = {};
  clock_ = network_ = segment_start_ = std::max(clock_, network_);
}

void StepTimeLog::begin_micro_batch(long step, std::size_t micro) {
  close_segment();
  // K > 3: the meta run's second micro-batch stands for micro-batches 2 .. K-1.
  const double weight = (micro_batches_ > 3 && micro == 1) ? static_cast<double>(micro_batches_ - 2) : 1.0;
  open_segment(step == timed_step_, weight);
  if (timing_) {
    const double overhead = device_.micro_batch_overhead_seconds();
    clock_ += overhead;
    segment_.overhead += overhead;
  }
}

void StepTimeLog::begin_optimizer(long step) {
  close_segment();
  open_segment(step == timed_step_, 1.0);
}

void StepTimeLog::end_step(long, double) { close_segment(); }

StepTime StepTimeLog::step_time() const { return total_; }

Prediction predict(const TrainingSetup& setup, const DeviceModel& device, std::size_t capacity) {
  StepTimeLog log(device, setup.accum);
  Prediction p;
  p.memory = estimator::run_on_meta(setup, capacity, 0, estimator::PeakMoment::skip, &log);
  p.time = log.step_time();
  return p;
}

}  // namespace trainmem::planner
