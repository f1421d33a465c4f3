#include "common/allocator/out_of_memory.h"

#include <algorithm>
#include <sstream>

#include "common/util/byte_size.h"

namespace trainmem {

std::vector<std::string> default_oom_advice(const OomReport& r) {
  std::vector<std::string> advice;
  auto bytes_of = [&](MemoryCategory c) { return r.category_bytes[index_of(c)]; };

  // Fragmentation first: the cache had enough free bytes in total, but no piece big enough. (Not
  // when the run's live tensors alone exceed the device: better packing cannot close that gap.)
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
  // Then the categories in order of size, each with the technique that shrinks it.
  std::vector<MemoryCategory> order(kAllMemoryCategories.begin(), kAllMemoryCategories.end());
  std::sort(order.begin(), order.end(), [&](MemoryCategory a, MemoryCategory b) { return bytes_of(a) > bytes_of(b); });
  // A category's ways out, but those already in effect: "activations: a, b or c".
  const RemediesInEffect& in = r.in_effect;
  auto add = [&advice](MemoryCategory c, const std::vector<std::string>& ways) {
    std::string line;
    for (std::size_t i = 0; i < ways.size(); ++i) {
      if (i > 0) line += i + 1 < ways.size() ? ", " : ways.size() > 2 ? ", or " : " or ";
      line += ways[i];
    }
    if (!line.empty()) advice.push_back(std::string(to_string(c)) + ": " + line);
  };
  for (MemoryCategory c : order) {
    // Only categories that hold a real share (5%) of the memory, and the request's own.
    if (c != r.category && bytes_of(c) * 20 < static_cast<std::int64_t>(r.allocated_bytes)) continue;
    if (bytes_of(c) == 0 && c != r.category) continue;
    std::vector<std::string> ways;
    switch (c) {
      case MemoryCategory::activations:
        if (!in.smallest_micro_batch)
          ways.push_back("a smaller micro-batch with gradient accumulation (--batch smaller, --accum K)");
        if (!in.full_recompute)
          ways.push_back(in.some_recompute ? "full activation recompute (--recompute full)"
                                           : "activation recompute (--recompute selective|full)");
        if (!in.sixteen_bit) ways.push_back("16-bit activations (--precision bf16)");
        break;
      case MemoryCategory::optimizer_state:
        if (in.sharding_stage < 1) ways.push_back("shard it across ranks (--zero 1 or higher)");
        if (!in.optimizer_offloaded) ways.push_back("offload it (--offload optimizer)");
        break;
      case MemoryCategory::gradients:
        if (!in.sixteen_bit) ways.push_back("16-bit gradients (--precision bf16)");
        if (in.sharding_stage < 2) ways.push_back("shard them (--zero 2)");
        break;
      case MemoryCategory::parameters:
        if (!in.sixteen_bit) ways.push_back("16-bit weights (--precision bf16)");
        if (in.sharding_stage < 3) ways.push_back("shard them (--zero 3)");
        break;
      case MemoryCategory::data:
        if (!in.data_off_device) ways.push_back("keep the dataset on the host and stream batches (--loader lazy)");
        break;
      default:
        break;
    }
    add(c, ways);
  }
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
