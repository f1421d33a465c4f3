// A run's costs, in the order they happen: its kernels (each declared beside its dispatcher,
// kernels/kernel_cost.h), the copies between host and device, the collectives, the host's own
// work (ZeRO-Offload's optimizer), and where each micro-batch and each optimizer step begins.
//
// Nothing listens unless a log is set: Device::set_cost_log hands it to every kernel (through
// kernel_stream) and to the copies; Communicator::set_cost_log to the collectives; the trainer
// marks the steps. On the meta device each entry is a declaration with no time (nothing runs): the
// step's work, which a device model turns into time (suites/trainmem/planner). On the CPU backend
// each entry also carries its measured wall time: the planner's calibration.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

#include "common/comm/communicator.h"
#include "kernels/kernel_cost.h"

namespace trainmem {

enum class CopyDirection { host_to_device, device_to_host, device_to_device };

class CostLog : public kernels::KernelCostLog {
 public:
  // A kernel on the device (kernels::KernelCostLog::record).
  void record(const kernels::KernelCall& call, double seconds) override { kernel(call, seconds); }
  virtual void kernel(const kernels::KernelCall& call, double seconds) = 0;
  // Work the host does while the device waits (the offloaded optimizer), costed like a kernel.
  virtual void host_work(const kernels::KernelCall& call, double seconds) = 0;
  virtual void copy(CopyDirection direction, double bytes, double seconds) = 0;
  // One collective over `world_size` ranks: `call` holds this rank's bytes (communicator.h).
  // async: started by start_all_gather, to be waited for by collective_wait(id).
  virtual void collective(Collective c, const CommCounts& call, int world_size, bool async, std::uint64_t id) = 0;
  virtual void collective_wait(std::uint64_t id, double seconds) = 0;
  // Marks: micro-batch `micro` (0-based) of optimizer step `step` (1-based) begins; the step's
  // optimizer phase begins; the step ends (its measured wall time, 0 on meta).
  virtual void begin_micro_batch(long step, std::size_t micro) = 0;
  virtual void begin_optimizer(long step) = 0;
  virtual void end_step(long step, double seconds) = 0;
};

// Host work declared to a log (if any) when it goes out of scope, with its wall time.
class HostWork {
 public:
  HostWork(CostLog* log, const kernels::KernelCall& call) : log_(log), call_(call) {
    if (log_) start_ = Clock::now();
  }
  ~HostWork() {
    if (log_) log_->host_work(call_, std::chrono::duration<double>(Clock::now() - start_).count());
  }
  HostWork(const HostWork&) = delete;
  HostWork& operator=(const HostWork&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  CostLog* log_;
  kernels::KernelCall call_;
  Clock::time_point start_{};
};

}  // namespace trainmem
