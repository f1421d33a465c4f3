#include "common/allocator/host_device_memory.h"

#include <sys/mman.h>

#include <stdexcept>

#include "common/util/byte_size.h"

namespace trainmem {

// Fake addresses start high and 2 MiB aligned, like a GPU's, so traces look like real ones.
constexpr std::uintptr_t kFakeAddressBase = 0x7f0000000000;
constexpr std::uintptr_t kFakeAddressAlign = 2 * MiB;

BudgetDeviceMemory::BudgetDeviceMemory(std::size_t budget_bytes, bool backed)
    : budget_(budget_bytes), backed_(backed), next_fake_address_(kFakeAddressBase) {}

BudgetDeviceMemory::~BudgetDeviceMemory() = default;

void* BudgetDeviceMemory::allocate(std::size_t bytes) {
  if (bytes == 0 || bytes > budget_ - in_use_) return nullptr;  // the emulated card is full
  void* ptr = nullptr;
  if (backed_) {
    ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ptr == MAP_FAILED) return nullptr;  // the host itself is out of address space
  } else {
    // Addresses are never reused, so two segments can never share one.
    ptr = reinterpret_cast<void*>(next_fake_address_);
    next_fake_address_ += (bytes + kFakeAddressAlign - 1) / kFakeAddressAlign * kFakeAddressAlign;
  }
  in_use_ += bytes;
  return ptr;
}

void BudgetDeviceMemory::release(void* ptr, std::size_t bytes) {
  if (bytes > in_use_) throw std::logic_error("BudgetDeviceMemory::release: more bytes than were allocated");
  if (backed_) munmap(ptr, bytes);
  in_use_ -= bytes;
}

std::string BudgetDeviceMemory::name() const {
  return std::string("cpu budget (") + format_bytes(budget_) + (backed_ ? ")" : ", simulated)");
}

}  // namespace trainmem
