// "Device" memory for the CPU backend: a budget that emulates a card of a given size.
//
// Memory figures depend only on the allocation sequence and the allocator policy, so drawing
// segments from a budget of, say, 16 GiB makes every peak, every segment and every OOM point on a
// laptop the same as on a 16 GiB GPU.
//
// in_use = bytes of segments handed out + bytes of pages mapped into reserved ranges; a request
// is refused when it would take in_use above the budget.
//
// Addresses: segments and reserved ranges are carved in increasing order from one address range
// and never reused, backed or not (backed: a large PROT_NONE reservation made up front; not
// backed: fake addresses). The caching allocator breaks ties between equal free blocks by
// address (as PyTorch's does), so the CPU backend and the meta device must see the same order to
// make the same choices -- and increasing is the order cudaMalloc usually hands segments out in.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

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
  // Expandable segments: address space reserved (mmap PROT_NONE when backed, a fake range when
  // not), then pages committed (mprotect read/write) and decommitted (madvise DONTNEED +
  // PROT_NONE). Only committed pages count against the budget.
  bool supports_virtual_memory() const override { return true; }
  void* reserve_address_range(std::size_t bytes) override;
  void release_address_range(void* ptr, std::size_t bytes) override;
  bool map_pages(void* ptr, std::size_t bytes, std::size_t page_bytes) override;
  void unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId stream) override;

  std::string host_refusal() const override { return host_refusal_; }
  std::size_t total_bytes() const override { return budget_; }
  std::size_t free_bytes() const override { return budget_ - in_use_; }
  std::string name() const override;

  bool backed() const { return backed_; }

 private:
  std::size_t budget_;
  std::size_t in_use_ = 0;
  bool backed_;
  std::uintptr_t base_ = 0;          // start of the address range (backed: the reservation)
  std::uintptr_t next_offset_ = 0;   // the next range starts here (offset from base_)
  std::string host_refusal_;         // the last refusal, when the host (not the budget) refused

  // A backed request the budget allows but the host refused (`call`, mmap or mprotect, failed):
  // says why in host_refusal_.
  void note_host_refusal(std::size_t bytes, const char* call);

  // The next `bytes` of address space (2 MiB aligned); 0 when a backed reservation is used up.
  std::uintptr_t take_range(std::size_t bytes);
  bool in_reservation(const void* ptr) const;
  void give_back_range(void* ptr, std::size_t bytes);  // release() and release_address_range()
};

}  // namespace trainmem
