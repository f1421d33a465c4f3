#include "common/device/device_ops.h"

#include <cstring>
#include <stdexcept>
#include <string>

#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace trainmem {

namespace {
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
void cuda_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  cuda_check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
}
#else
[[noreturn]] void no_cuda() { throw DeviceError("trainmem was built without CUDA"); }
#endif
}  // namespace

void copy_host_to_device(Device& device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (device.kind() == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  cuda_copy(dst, src, bytes, cudaMemcpyHostToDevice);
#else
  no_cuda();
#endif
}

void copy_device_to_host(Device& device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (device.kind() == DeviceKind::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  cuda_copy(dst, src, bytes, cudaMemcpyDeviceToHost);
#else
  no_cuda();
#endif
}

void copy_device_to_device(Device& device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (device.kind() == DeviceKind::cpu) {
    std::memmove(dst, src, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  cuda_copy(dst, src, bytes, cudaMemcpyDeviceToDevice);
#else
  no_cuda();
#endif
}

void zero_device_memory(Device& device, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (device.kind() == DeviceKind::cpu) {
    std::memset(dst, 0, bytes);
    return;
  }
#if defined(TRAINMEM_WITH_CUDA) && TRAINMEM_WITH_CUDA
  cuda_check(cudaMemset(dst, 0, bytes), "cudaMemset");
#else
  no_cuda();
#endif
}

kernels::Stream kernel_stream(const Device& device) {
  kernels::Stream s;
  s.backend = device.kind() == DeviceKind::cuda ? kernels::Backend::cuda : kernels::Backend::cpu;
  return s;
}

}  // namespace trainmem
