// "Device" memory for the CPU backend: a budget that emulates a card of a given size.
//
// Memory figures depend only on the allocation sequence and the allocator policy, so drawing
// segments from a budget of, say, 16 GiB makes every peak, every segment and every OOM point on a
// laptop the same as on a 16 GiB GPU.
#pragma once
#include <cstddef>
#include <memory>

#include "common/allocator/device_memory.h"

namespace trainmem {

constexpr std::size_t kDefaultDeviceMemory = std::size_t{16} << 30;  // --device-memory default

class BudgetDeviceMemory : public DeviceMemory {
 public:
  // backed = true:  segments are real, writable host memory (mmap'ed; pages are committed only
  //                 when touched, so a large budget costs nothing up front).
  // backed = false: segments are addresses only, for replaying traces and predicting memory
  //                 without touching any (the pointers must never be dereferenced).
  BudgetDeviceMemory(std::size_t budget_bytes, bool backed);
  ~BudgetDeviceMemory() override;

  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) override;
  std::size_t total_bytes() const override { return budget_; }
  std::size_t free_bytes() const override { return budget_ - in_use_; }
  std::string name() const override;

  bool backed() const { return backed_; }

 private:
  std::size_t budget_;
  std::size_t in_use_ = 0;
  bool backed_;
  std::uintptr_t next_fake_address_;
};

}  // namespace trainmem
