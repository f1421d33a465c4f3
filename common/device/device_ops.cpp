#include "common/device/device_ops.h"

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/device/cost_log.h"

#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace trainmem {

namespace {

using Direction = CopyDirection;

// Declares a copy to the device's cost log (common/device/cost_log.h), timed on the CPU backend.
class CopyCost {
 public:
  CopyCost(CostLog* log, Direction direction, std::size_t bytes, bool timed)
      : log_(log), direction_(direction), bytes_(bytes), timed_(timed), start_(std::chrono::steady_clock::now()) {}
  ~CopyCost() {
    if (log_ == nullptr) return;
    const double seconds = timed_ ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() : 0.0;
    log_->copy(direction_, static_cast<double>(bytes_), seconds);
  }
  CopyCost(const CopyCost&) = delete;
  CopyCost& operator=(const CopyCost&) = delete;

 private:
  CostLog* log_;
  Direction direction_;
  std::size_t bytes_;
  bool timed_;
  std::chrono::steady_clock::time_point start_;
};

// One copy, whatever the direction: memmove on the CPU backend (host and "device" memory are the
// same kind), cudaMemcpy on a GPU.
void transfer(Device& device, void* dst, const void* src, std::size_t bytes, Direction direction) {
  if (bytes == 0) return;
  CopyCost cost(device.cost_log(), direction, bytes, device.kind() == DeviceKind::cpu);
  if (device.kind() == DeviceKind::meta) {
    // Nothing is behind a meta address; a value read back to the host is defined: zeros.
    if (direction == Direction::device_to_host) std::memset(dst, 0, bytes);
    return;
  }
  if (device.kind() == DeviceKind::cpu) {
    std::memmove(dst, src, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  const cudaMemcpyKind kind = direction == Direction::host_to_device   ? cudaMemcpyHostToDevice
                              : direction == Direction::device_to_host ? cudaMemcpyDeviceToHost
                                                                       : cudaMemcpyDeviceToDevice;
  const cudaError_t status = cudaMemcpy(dst, src, bytes, kind);
  if (status != cudaSuccess) throw std::runtime_error(std::string("cudaMemcpy: ") + cudaGetErrorString(status));
#else
  (void)direction;
  throw DeviceError("trainmem was built without CUDA");
#endif
}

}  // namespace

void copy_host_to_device(Device& device, void* dst, const void* src, std::size_t bytes) {
  transfer(device, dst, src, bytes, Direction::host_to_device);
}

void copy_device_to_host(Device& device, void* dst, const void* src, std::size_t bytes) {
  transfer(device, dst, src, bytes, Direction::device_to_host);
}

void copy_device_to_device(Device& device, void* dst, const void* src, std::size_t bytes) {
  transfer(device, dst, src, bytes, Direction::device_to_device);
}

void zero_device_memory(Device& device, void* dst, std::size_t bytes) {
  if (bytes == 0 || !device.computes()) return;
  if (device.kind() == DeviceKind::cpu) {
    std::memset(dst, 0, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  const cudaError_t status = cudaMemset(dst, 0, bytes);
  if (status != cudaSuccess) throw std::runtime_error(std::string("cudaMemset: ") + cudaGetErrorString(status));
#else
  throw DeviceError("trainmem was built without CUDA");
#endif
}

kernels::Stream kernel_stream(const Device& device) {
  kernels::Stream s;
  s.backend = device.kind() == DeviceKind::cuda   ? kernels::Backend::cuda
              : device.kind() == DeviceKind::meta ? kernels::Backend::meta
                                                  : kernels::Backend::cpu;
  s.costs = device.cost_log();
  return s;
}

}  // namespace trainmem
