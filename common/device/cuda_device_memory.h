// Device memory on a GPU: segments from cudaMalloc, cross-stream events from cudaEvent, and for
// expandable segments the driver's virtual memory management: cuMemAddressReserve (address
// space), cuMemCreate + cuMemMap + cuMemSetAccess (a physical page mapped into it), cuMemUnmap +
// cuMemRelease (the page given back).
// (No CUDA header here, so .cpp files can use it; the implementation is in cuda_backend.cu.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/allocator/device_memory.h"

namespace trainmem {

class CudaDeviceMemory : public DeviceMemory {
 public:
  // budget_bytes = 0: the whole card. Otherwise the card is treated as if it had only that much
  // (as torch.cuda.set_per_process_memory_fraction does), so OOM points of smaller cards can be
  // reproduced on a big one.
  CudaDeviceMemory(int device_index, std::size_t budget_bytes);

  void* allocate(std::size_t bytes) override;  // cudaMalloc; nullptr when the card is full
  void release(void* ptr, std::size_t bytes) override;
  std::size_t total_bytes() const override;
  std::size_t free_bytes() const override;
  std::string name() const override { return name_; }

  // Expandable segments. Supported where the card and driver have virtual memory management
  // (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED); page sizes must be multiples of the
  // driver's allocation granularity (2 MiB on current GPUs).
  bool supports_virtual_memory() const override { return virtual_memory_; }
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* ptr, std::size_t bytes) override;
  bool map_pages(void* ptr, std::size_t bytes, std::size_t page_bytes) override;
  void unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId stream) override;
  void synchronize_all_streams() override;  // cudaDeviceSynchronize on this GPU

  EventHandle record_event(StreamId stream) override;
  bool event_completed(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void destroy_event(EventHandle event) override;

 private:
  int device_index_;
  std::size_t budget_;      // 0 = the card
  std::size_t card_total_;  // from cudaMemGetInfo
  std::size_t in_use_ = 0;   // cudaMalloc'ed segments + mapped pages
  std::string name_;
  bool virtual_memory_ = false;
  int cu_device_ = 0;            // the driver's CUdevice for device_index_
  std::size_t granularity_ = 0;  // cuMemGetAllocationGranularity (minimum)
  // One physical allocation per mapped page, by the page's address: each can be unmapped alone.
  std::unordered_map<std::uintptr_t, unsigned long long> page_handles_;
};

}  // namespace trainmem
