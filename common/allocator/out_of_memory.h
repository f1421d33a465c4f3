// What the allocator throws when a request cannot be served even after releasing its cache.
// It never crashes the program: the error carries a report of the device's state and says what
// would help.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/allocator/memory_category.h"

namespace trainmem {

struct OomReport {
  std::string device;                  // e.g. "cuda:0 (NVIDIA H100 80GB HBM3)" or "cpu budget (16.00 GiB)"
  MemoryCategory category = MemoryCategory::other;  // what the failed request was for
  std::string tensor;                  // the tensor it was for, when the caller named it ("h3.attn.probs")
  std::size_t requested_bytes = 0;     // what the caller asked for
  std::size_t rounded_bytes = 0;       // after 512 B rounding
  std::size_t device_request_bytes = 0;  // the segment asked of the device ("Tried to allocate")
  std::size_t capacity_bytes = 0;      // the device's (or budget's) total
  std::size_t device_free_bytes = 0;   // what the device could still give
  std::size_t allocated_bytes = 0;     // live blocks
  std::size_t reserved_bytes = 0;      // segments held by the allocator
  std::size_t largest_free_block = 0;  // largest cached free block (after releasing the cache)
  std::array<std::int64_t, kNumMemoryCategories> category_bytes{};  // allocated bytes per category
  bool expandable_segments = false;    // the allocator already ran with expandable_segments:True
  // Known to the advisor that knows the run (the estimator's): the tensors the run holds at once
  // (its peak allocated on an unlimited device) exceed what the device can give. Then no allocator
  // setting can make it fit, and the fragmentation advice is left out.
  bool live_tensors_exceed_device = false;
  std::vector<std::string> advice;     // what would help, most specific first

  std::size_t reserved_unallocated_bytes() const { return reserved_bytes - allocated_bytes; }

  // Multi-line text: the figures, the per-category breakdown and the advice.
  std::string message() const;
};

// What the allocator itself can say would help: expandable segments when "reserved but
// unallocated" is large, i.e. the free bytes exist (cached free blocks + the device's free memory
// >= the request) but not in one piece (fragmentation), as PyTorch's message suggests
// expandable_segments:True. Empty when the memory is not fragmented. (Which technique shrinks which
// category is the techniques' to say, through their registrations: the estimator's advisor,
// suites/trainmem/estimator/oom_advice.h, joins both.)
std::vector<std::string> fragmentation_advice(const OomReport& report);

// The categories worth shrinking, the largest first: those holding a real share (5%) of the
// allocated bytes, and the failed request's own.
std::vector<MemoryCategory> categories_to_shrink(const OomReport& report);

// The advice of an allocator that knows nothing of the run: the fragmentation advice, else a
// device with more memory.
std::vector<std::string> default_oom_advice(const OomReport& report);

// The host refused memory the device's budget allows (DeviceMemory::host_refusal): host memory
// ran out, not the device's. The message says which limit and what to change (exit 1).
struct HostMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class OutOfMemoryError : public std::runtime_error {
 public:
  explicit OutOfMemoryError(OomReport report);
  const OomReport& report() const { return report_; }

 private:
  OomReport report_;
};

}  // namespace trainmem
