#include "common/device/device_ops.h"

#include <cstring>
#include <stdexcept>
#include <string>

#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace trainmem {

namespace {

enum class Direction { host_to_device, device_to_host, device_to_device };

// One copy, whatever the direction: memmove on the CPU backend (host and "device" memory are the
// same kind), cudaMemcpy on a GPU.
void transfer(Device& device, void* dst, const void* src, std::size_t bytes, Direction direction) {
  if (bytes == 0) return;
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
  return s;
}

}  // namespace trainmem
