// Device memory on a GPU: segments from cudaMalloc, cross-stream events from cudaEvent.
// (No CUDA header here, so .cpp files can use it; the implementation is in cuda_backend.cu.)
#pragma once
#include <cstddef>
#include <string>

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

  EventHandle record_event(StreamId stream) override;
  bool event_completed(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void destroy_event(EventHandle event) override;

 private:
  int device_index_;
  std::size_t budget_;      // 0 = the card
  std::size_t card_total_;  // from cudaMemGetInfo
  std::size_t in_use_ = 0;
  std::string name_;
};

}  // namespace trainmem
