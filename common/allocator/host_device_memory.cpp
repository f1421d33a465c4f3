#include "common/allocator/host_device_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/util/byte_size.h"
#include "common/util/host_memory.h"

namespace trainmem {

// Fake addresses start high and 2 MiB aligned, like a GPU's, so traces look like real ones.
constexpr std::uintptr_t kFakeAddressBase = 0x7f0000000000;
constexpr std::uintptr_t kAddressAlign = 2 * MiB;
// Backed: the address space reserved up front (no memory, nothing committed: PROT_NONE,
// MAP_NORESERVE). 1 TiB of segments over a run's life; past it, segments are mapped one by one.
constexpr std::size_t kBackedAddressSpace = std::size_t{1} << 40;

namespace {
// The host takes the pages back (their contents are gone) and access is revoked, so a stale pointer
// into them faults instead of reading garbage; the address range stays reserved.
void decommit(void* ptr, std::size_t bytes) {
  madvise(ptr, bytes, MADV_DONTNEED);
  mprotect(ptr, bytes, PROT_NONE);
}
}  // namespace

BudgetDeviceMemory::BudgetDeviceMemory(std::size_t budget_bytes, bool backed) : budget_(budget_bytes), backed_(backed) {
  if (!backed_) {
    base_ = kFakeAddressBase;
    return;
  }
  void* range = mmap(nullptr, kBackedAddressSpace, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range != MAP_FAILED) base_ = reinterpret_cast<std::uintptr_t>(range);
}

BudgetDeviceMemory::~BudgetDeviceMemory() {
  if (backed_ && base_ != 0) munmap(reinterpret_cast<void*>(base_), kBackedAddressSpace);
}

// Addresses are never reused, so two segments (or reserved ranges) can never share one.
std::uintptr_t BudgetDeviceMemory::take_range(std::size_t bytes) {
  const std::size_t span = (bytes + kAddressAlign - 1) / kAddressAlign * kAddressAlign;
  if (backed_ && (base_ == 0 || span > kBackedAddressSpace - next_offset_)) return 0;
  const std::uintptr_t start = base_ + next_offset_;
  next_offset_ += span;
  return start;
}

bool BudgetDeviceMemory::in_reservation(const void* ptr) const {
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  return backed_ && base_ != 0 && p >= base_ && p < base_ + kBackedAddressSpace;
}

// A segment or reserved range given back: inside the reservation its pages are decommitted and the
// range stays reserved, unused (addresses are never reused); a mapping of its own is unmapped.
void BudgetDeviceMemory::give_back_range(void* ptr, std::size_t bytes) {
  if (in_reservation(ptr)) decommit(ptr, bytes);
  else if (backed_) munmap(ptr, bytes);
}

void BudgetDeviceMemory::note_host_refusal(std::size_t bytes, const char* call) {
  const std::string why = std::strerror(errno);
  const HostMemory host = host_memory();
  host_refusal_ = "the host refused " + format_bytes(bytes) + " of the CPU backend's device memory (" + call + ": " +
                  why + ") within its budget of " + format_bytes(budget_) + ": host memory ran out, not the budget (" +
                  host.source + ": " + format_bytes(host.available_bytes) +
                  " left). Raise the process's limit (ulimit -v, ulimit -d) or use a smaller --batch or model";
}

void* BudgetDeviceMemory::allocate(std::size_t bytes) {
  host_refusal_.clear();
  if (bytes == 0 || bytes > budget_ - in_use_) return nullptr;  // the emulated card is full
  void* ptr = reinterpret_cast<void*>(take_range(bytes));
  if (backed_) {
    if (ptr != nullptr) {  // commit: readable and writable; the host backs pages when first touched
      if (mprotect(ptr, bytes, PROT_READ | PROT_WRITE) != 0) {
        note_host_refusal(bytes, "mprotect");
        return nullptr;
      }
    } else {  // the reservation is used up (or was refused): a mapping of its own
      ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (ptr == MAP_FAILED) {
        note_host_refusal(bytes, "mmap");
        return nullptr;
      }
    }
  }
  in_use_ += bytes;
  return ptr;
}

void BudgetDeviceMemory::release(void* ptr, std::size_t bytes) {
  if (bytes > in_use_) throw std::logic_error("BudgetDeviceMemory::release: more bytes than were allocated");
  give_back_range(ptr, bytes);
  in_use_ -= bytes;
}

// --- expandable segments: reserve, then commit pages

void* BudgetDeviceMemory::reserve_address_range(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  // Address space only: no access, no memory, nothing counted against the budget or the host
  // (inside the reservation it is PROT_NONE already).
  host_refusal_.clear();
  if (void* ptr = reinterpret_cast<void*>(take_range(bytes)); ptr != nullptr || !backed_) return ptr;
  void* ptr = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (ptr != MAP_FAILED) return ptr;
  note_host_refusal(bytes, "mmap");
  return nullptr;
}

void BudgetDeviceMemory::release_address_range(void* ptr, std::size_t bytes) { give_back_range(ptr, bytes); }

bool BudgetDeviceMemory::map_pages(void* ptr, std::size_t bytes, std::size_t page_bytes) {
  if (page_bytes == 0 || bytes % page_bytes != 0)
    throw std::logic_error("BudgetDeviceMemory::map_pages: not a whole number of pages");
  host_refusal_.clear();
  if (bytes == 0 || bytes > budget_ - in_use_) return false;  // the emulated card is full
  // Commit: the pages become readable and writable; the host backs them when first touched.
  if (backed_ && mprotect(ptr, bytes, PROT_READ | PROT_WRITE) != 0) {
    note_host_refusal(bytes, "mprotect");
    return false;
  }
  in_use_ += bytes;
  return true;
}

void BudgetDeviceMemory::unmap_pages(void* ptr, std::size_t bytes, std::size_t page_bytes, StreamId /*stream*/) {
  if (page_bytes == 0 || bytes % page_bytes != 0)
    throw std::logic_error("BudgetDeviceMemory::unmap_pages: not a whole number of pages");
  if (bytes > in_use_) throw std::logic_error("BudgetDeviceMemory::unmap_pages: more bytes than are mapped");
  // CPU streams are synchronous: there is no queued work to wait for.
  if (backed_) decommit(ptr, bytes);
  in_use_ -= bytes;
}

std::string BudgetDeviceMemory::name() const {
  return std::string("cpu budget (") + format_bytes(budget_) + (backed_ ? ")" : ", simulated)");
}

}  // namespace trainmem
