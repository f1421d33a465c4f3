// Times the work a device's kernel stream does between two points: on a GPU with CUDA events
// recorded on that stream (the kernels' own time, with none of the host's launch or wait), on the
// CPU with the wall clock (its kernels run synchronously, so the wall clock is their time).
//
//   DeviceTimer timer(device);
//   timer.start();
//   kernels::layernorm_forward<T>(kernel_stream(device), ...);   // queued on the GPU
//   const double seconds = timer.stop();                          // waits for it to finish
//
// The meta device runs nothing: stop() returns 0 there.
#pragma once
#include <chrono>

#include "common/device/device.h"

namespace trainmem {

// The CUDA events behind DeviceTimer (common/device/cuda_backend.cu; without CUDA the stubs throw).
void* cuda_timing_event_create();
void cuda_timing_event_destroy(void* event);
void cuda_timing_event_record(void* event, void* stream);
double cuda_timing_seconds_between(void* start, void* stop);  // waits for `stop`

class DeviceTimer {
 public:
  explicit DeviceTimer(const Device& device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  double stop();  // seconds since start(), once the work queued between the two has finished

 private:
  DeviceKind kind_;
  void* stream_ = nullptr;  // the kernel stream (the default stream on a GPU)
  void* start_event_ = nullptr;
  void* stop_event_ = nullptr;
  std::chrono::steady_clock::time_point started_{};
};

}  // namespace trainmem
