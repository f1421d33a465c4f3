// The JSON pieces every trainmem result carries: what ran it (device, allocator policy, build)
// and what memory it used. Benchmarks put them in Google Benchmark's context; `trainmem train`
// and `trainmem replay` put them in their own JSON.
#pragma once
#include <nlohmann/json.hpp>

#include "common/allocator/caching_allocator.h"
#include "common/device/device.h"

namespace trainmem {

// {"config": "backend:caching,...", "backend", "max_split_size_bytes" (null = unlimited),
//  "constants": {"min_block_size", "small_size", "small_buffer", "min_large_alloc", "large_buffer", "round_large"}}
nlohmann::json allocator_config_json(const AllocatorConfig& config);

// {"internal_free_bytes", "external_free_bytes", "awaiting_free_bytes", "largest_free_block"}
nlohmann::json fragmentation_json(const FragmentationInfo& f);

// The allocator's segments and blocks in the shape of torch.cuda.memory_snapshot():
// [{"address", "total_size", "stream", "segment_type": "small"|"large", "allocated_size",
//   "active_size", "requested_size", "blocks": [{"address", "size", "requested_size",
//   "state": "active_allocated"|"active_awaiting_free"|"inactive", "category"}]}]
nlohmann::json segments_json(const std::vector<SegmentSnapshot>& segments);

// {"peak_allocated_bytes", "peak_reserved_bytes", "allocated_bytes", "reserved_bytes",
//  "by_category": {"activations": {"current_bytes", "peak_bytes"}, ...},
//  "fragmentation": {...}, "stats": {flat PyTorch-named statistics}}
nlohmann::json memory_json(const MemoryStats& stats, const FragmentationInfo& fragmentation);
nlohmann::json memory_json(const CachingAllocator& allocator);

// The project's version (CMake's project(VERSION)), e.g. "0.1.0".
const char* trainmem_version();

// {"trainmem_version", "build_type", "cuda_compiled", "device": DeviceInfo, "allocator": ...}
nlohmann::json run_context_json(const DeviceInfo& device, const AllocatorConfig& allocator);

}  // namespace trainmem
