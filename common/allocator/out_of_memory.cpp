#include "common/allocator/out_of_memory.h"

#include <algorithm>
#include <sstream>

#include "common/util/byte_size.h"

namespace trainmem {

std::vector<std::string> fragmentation_advice(const OomReport& r) {
  std::vector<std::string> advice;
  // The cache had enough free bytes in total, but no piece big enough. (Not when the run's live
  // tensors alone exceed the device: better packing cannot close that gap.)
  if (r.live_tensors_exceed_device) {
    // (the estimator's own lines say what does)
  } else if (r.reserved_unallocated_bytes() >= r.rounded_bytes) {
    if (r.expandable_segments) {
      advice.push_back("the allocator holds " + format_bytes(r.reserved_unallocated_bytes()) +
                       " reserved but unallocated, more than the request, yet no block of " +
                       format_bytes(r.rounded_bytes) +
                       ": the free bytes lie between live blocks, in pages that hold live blocks too "
                       "(expandable segments are already on; freeing long-lived tensors earlier would help)");
    } else {
      advice.push_back("the allocator holds " + format_bytes(r.reserved_unallocated_bytes()) +
                       " reserved but unallocated, more than the request, yet no block of " +
                       format_bytes(r.rounded_bytes) +
                       ": memory is fragmented; expandable segments (allocator config "
                       "expandable_segments:True) or max_split_size_mb would help");
    }
  } else if (!r.expandable_segments && r.reserved_unallocated_bytes() > 0 &&
             r.reserved_unallocated_bytes() + r.device_free_bytes >= r.rounded_bytes) {
    // Not enough in the cache alone, but the cache's gaps and the device's free memory together
    // would hold the request: fixed segments keep them apart, an expandable segment would not.
    advice.push_back("reserved but unallocated " + format_bytes(r.reserved_unallocated_bytes()) + " plus " +
                     format_bytes(r.device_free_bytes) + " free on the device would hold the " +
                     format_bytes(r.rounded_bytes) +
                     " request, but not in one piece: expandable segments (allocator config "
                     "expandable_segments:True) may help, by growing a segment's free end in place");
  }
  return advice;
}

std::vector<MemoryCategory> categories_to_shrink(const OomReport& r) {
  auto bytes_of = [&](MemoryCategory c) { return r.category_bytes[index_of(c)]; };
  std::vector<MemoryCategory> order;
  for (MemoryCategory c : kAllMemoryCategories) {
    if (c == r.category) {
      order.push_back(c);
      continue;
    }
    if (bytes_of(c) == 0 || bytes_of(c) * 20 < static_cast<std::int64_t>(r.allocated_bytes)) continue;
    order.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(), [&](MemoryCategory a, MemoryCategory b) { return bytes_of(a) > bytes_of(b); });
  return order;
}

std::vector<std::string> default_oom_advice(const OomReport& r) {
  std::vector<std::string> advice = fragmentation_advice(r);
  if (advice.empty()) advice.push_back("use a device with more memory (or a larger --device-memory budget)");
  return advice;
}

std::string OomReport::message() const {
  std::ostringstream out;
  out << "out of memory on " << device << ": tried to allocate " << format_bytes(device_request_bytes)
      << " for a request of " << format_bytes(requested_bytes) << " (" << format_bytes(rounded_bytes)
      << " rounded) for " << to_string(category) << (tensor.empty() ? "" : " (" + tensor + ")") << ".\n"
      << "  capacity " << format_bytes(capacity_bytes) << ", of which " << format_bytes(device_free_bytes)
      << " is free; allocated " << format_bytes(allocated_bytes) << "; reserved but unallocated "
      << format_bytes(reserved_unallocated_bytes()) << "; largest free block " << format_bytes(largest_free_block)
      << ".\n  allocated by category:";
  for (MemoryCategory c : kAllMemoryCategories) {
    const auto b = category_bytes[index_of(c)];
    if (b > 0) out << ' ' << to_string(c) << '=' << format_bytes(static_cast<std::uint64_t>(b));
  }
  out << "\n  what would help:";
  for (const std::string& a : advice) out << "\n    - " << a;
  return out.str();
}

OutOfMemoryError::OutOfMemoryError(OomReport report)
    : std::runtime_error(report.message()), report_(std::move(report)) {}

}  // namespace trainmem
