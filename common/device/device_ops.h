// Moving bytes between the host and a device's memory, and zeroing it: memcpy/memset on the CPU
// backend, cudaMemcpy/cudaMemset on a GPU. (Kernels compute; these only move or clear.)
#pragma once
#include <cstddef>

#include "common/device/device.h"
#include "kernels/kernel_stream.h"

namespace trainmem {

void copy_host_to_device(Device& device, void* dst, const void* src, std::size_t bytes);
void copy_device_to_host(Device& device, void* dst, const void* src, std::size_t bytes);
void copy_device_to_device(Device& device, void* dst, const void* src, std::size_t bytes);
void zero_device_memory(Device& device, void* dst, std::size_t bytes);

// The stream kernels run on for this device (the default stream on a GPU).
kernels::Stream kernel_stream(const Device& device);

}  // namespace trainmem
