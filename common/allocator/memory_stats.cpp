#include "common/allocator/memory_stats.h"

#include <string>

#include <nlohmann/json.hpp>

namespace trainmem {

namespace {
template <typename F>
void for_each_stat_array(MemoryStats& s, F f) {
  for (StatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                       &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes})
    for (Stat& stat : *a) f(stat);
  f(s.oversize_allocations);
  f(s.oversize_segments);
  for (Stat& stat : s.by_category) f(stat);
}

void put(nlohmann::json& j, const std::string& prefix, const Stat& s) {
  j[prefix + ".current"] = s.current;
  j[prefix + ".peak"] = s.peak;
  j[prefix + ".allocated"] = s.allocated;
  j[prefix + ".freed"] = s.freed;
}
}  // namespace

void MemoryStats::reset_peak() {
  for_each_stat_array(*this, [](Stat& s) { s.reset_peak(); });
}

nlohmann::json MemoryStats::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  const std::pair<const char*, const StatArray*> arrays[] = {
      {"allocation", &allocation},           {"segment", &segment},
      {"active", &active},                   {"inactive_split", &inactive_split},
      {"allocated_bytes", &allocated_bytes}, {"reserved_bytes", &reserved_bytes},
      {"active_bytes", &active_bytes},       {"inactive_split_bytes", &inactive_split_bytes},
      {"requested_bytes", &requested_bytes}};
  const char* pool_names[kNumStatTypes] = {"all", "small_pool", "large_pool"};
  for (const auto& [name, array] : arrays)
    for (std::size_t t = 0; t < kNumStatTypes; ++t) put(j, std::string(name) + "." + pool_names[t], (*array)[t]);
  put(j, "oversize_allocations", oversize_allocations);
  put(j, "oversize_segments", oversize_segments);
  j["num_alloc_retries"] = num_alloc_retries;
  j["num_ooms"] = num_ooms;
  j["num_device_alloc"] = num_device_alloc;
  j["num_device_free"] = num_device_free;
  j["num_sync_all_streams"] = num_sync_all_streams;
  for (MemoryCategory c : kAllMemoryCategories)
    put(j, "by_category." + std::string(to_string(c)), by_category[index_of(c)]);
  return j;
}

}  // namespace trainmem
