// What an allocation is for. Every byte the allocator hands out carries one of these tags, so a
// result can say "activations peaked at 3.1 GiB" rather than only "allocated peaked at 7 GiB".
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "generated/result_schema.h"

namespace trainmem {

// enum class MemoryCategory: one member per category of common/results/result_schema.json, in its
// order, with what each holds (generated/result_schema.h is made from it; the report reads the
// same file).
constexpr std::size_t kNumMemoryCategories = result_schema::memory_category_names.size();

constexpr std::array<MemoryCategory, kNumMemoryCategories> kAllMemoryCategories = [] {
  std::array<MemoryCategory, kNumMemoryCategories> all{};
  for (std::size_t i = 0; i < kNumMemoryCategories; ++i) all[i] = static_cast<MemoryCategory>(i);
  return all;
}();

constexpr std::string_view to_string(MemoryCategory c) {
  return result_schema::memory_category_names[static_cast<std::size_t>(c)];
}

constexpr std::size_t index_of(MemoryCategory c) { return static_cast<std::size_t>(c); }

inline std::optional<MemoryCategory> parse_memory_category(std::string_view name) {
  for (MemoryCategory c : kAllMemoryCategories)
    if (to_string(c) == name) return c;
  return std::nullopt;
}

}  // namespace trainmem
