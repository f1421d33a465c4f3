#include "common/device/device_timer.h"

#include "common/device/device_ops.h"

namespace trainmem {

DeviceTimer::DeviceTimer(const Device& device) : kind_(device.kind()), stream_(kernel_stream(device).cuda_stream) {
  if (kind_ != DeviceKind::cuda) return;
  start_event_ = cuda_timing_event_create();
  try {
    stop_event_ = cuda_timing_event_create();
  } catch (...) {
    cuda_timing_event_destroy(start_event_);
    throw;
  }
}

DeviceTimer::~DeviceTimer() {
  if (start_event_ != nullptr) cuda_timing_event_destroy(start_event_);
  if (stop_event_ != nullptr) cuda_timing_event_destroy(stop_event_);
}

void DeviceTimer::start() {
  if (kind_ == DeviceKind::cuda) cuda_timing_event_record(start_event_, stream_);
  else started_ = std::chrono::steady_clock::now();
}

double DeviceTimer::stop() {
  switch (kind_) {
    case DeviceKind::cuda:
      cuda_timing_event_record(stop_event_, stream_);
      return cuda_timing_seconds_between(start_event_, stop_event_);
    case DeviceKind::meta:
      return 0.0;
    default:
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
}

}  // namespace trainmem
