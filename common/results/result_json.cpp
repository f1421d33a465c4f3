#include "common/results/result_json.h"
#include "generated/result_schema.h"

namespace trainmem {

const char* trainmem_version() { return TRAINMEM_VERSION; }  // defined by common/CMakeLists.txt

nlohmann::json allocator_config_json(const AllocatorConfig& config) {
  return {
      {"config", config.to_string()},
      {"backend", config.backend == AllocatorConfig::Backend::caching ? "caching" : "raw"},
      {"max_split_size_bytes",
       config.max_split_size == kNoMaxSplit ? nlohmann::json(nullptr) : nlohmann::json(config.max_split_size)},
      {"expandable_segments", config.expandable_segments},
      {"constants",
       {{"min_block_size", kMinBlockSize},
        {"small_size", kSmallSize},
        {"small_buffer", kSmallBuffer},
        {"min_large_alloc", kMinLargeAlloc},
        {"large_buffer", kLargeBuffer},
        {"round_large", kRoundLarge}}},
  };
}

nlohmann::json fragmentation_json(const FragmentationInfo& f) {
  return {{"internal_free_bytes", f.internal_free_bytes},
          {"external_free_bytes", f.external_free_bytes},
          {"awaiting_free_bytes", f.awaiting_free_bytes},
          {"largest_free_block", f.largest_free_block}};
}

namespace {
const char* state_name(BlockSnapshot::State s) {
  switch (s) {
    case BlockSnapshot::State::active_allocated: return "active_allocated";
    case BlockSnapshot::State::active_awaiting_free: return "active_awaiting_free";
    case BlockSnapshot::State::inactive: return "inactive";
  }
  return "?";
}
}  // namespace

nlohmann::json segments_json(const std::vector<SegmentSnapshot>& segments) {
  nlohmann::json out = nlohmann::json::array();
  for (const SegmentSnapshot& s : segments) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockSnapshot& b : s.blocks)
      blocks.push_back({{"address", b.address},
                        {"size", b.size},
                        {"requested_size", b.requested_size},
                        {"state", state_name(b.state)},
                        {"category", to_string(b.category)}});
    out.push_back({{"address", s.address},
                   {"total_size", s.total_size},
                   {"stream", s.stream},
                   {"segment_type", s.is_small ? "small" : "large"},
                   {"allocated_size", s.allocated_size},
                   {"active_size", s.active_size},
                   {"requested_size", s.requested_size},
                   {"blocks", std::move(blocks)}});
  }
  return out;
}

nlohmann::json memory_json(const MemoryStats& stats, const FragmentationInfo& fragmentation) {
  namespace key = result_schema;  // the keys, declared once (common/results/result_schema.json)
  nlohmann::json by_category = nlohmann::json::object();
  for (MemoryCategory c : kAllMemoryCategories) {
    const Stat& s = stats.by_category[index_of(c)];
    by_category[to_string(c)] = {{key::memory_category_current, s.current}, {key::memory_category_peak, s.peak}};
  }
  return {{key::memory_peak_allocated, stats.allocated_bytes[0].peak},
          {key::memory_peak_reserved, stats.reserved_bytes[0].peak},
          {key::memory_allocated, stats.allocated_bytes[0].current},
          {key::memory_reserved, stats.reserved_bytes[0].current},
          {key::memory_by_category, std::move(by_category)},
          {"fragmentation", fragmentation_json(fragmentation)},
          {"stats", stats.to_json()}};
}

nlohmann::json memory_json(const CachingAllocator& allocator) {
  return memory_json(allocator.stats(), allocator.fragmentation());
}

nlohmann::json run_context_json(const DeviceInfo& device, const AllocatorConfig& allocator) {
  return {{"trainmem_version", trainmem_version()},
#ifdef NDEBUG
          {"build_type", "release"},
#else
          {"build_type", "debug"},
#endif
          {"cuda_compiled", cuda_compiled()},
          {"device", device.to_json()},
          {"allocator", allocator_config_json(allocator)}};
}

}  // namespace trainmem
