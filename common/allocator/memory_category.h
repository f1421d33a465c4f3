// What an allocation is for. Every byte the allocator hands out carries one of these tags, so a
// result can say "activations peaked at 3.1 GiB" rather than only "allocated peaked at 7 GiB".
#pragma once
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace trainmem {

enum class MemoryCategory : int {
  parameters,       // model weights (in the compute dtype)
  gradients,        // d loss / d weights
  optimizer_state,  // Adam moments, fp32 master weights
  activations,      // tensors saved in forward for backward
  workspace,        // scratch that lives within one op or one step
  data,             // input tokens and targets on the device
  communication,    // buffers that exist only to move bytes (staging); common/sharding/sharding_engine.h
  other,
};

constexpr std::size_t kNumMemoryCategories = 8;

constexpr std::array<MemoryCategory, kNumMemoryCategories> kAllMemoryCategories = {
    MemoryCategory::parameters, MemoryCategory::gradients, MemoryCategory::optimizer_state,
    MemoryCategory::activations, MemoryCategory::workspace, MemoryCategory::data,
    MemoryCategory::communication, MemoryCategory::other};

constexpr std::string_view to_string(MemoryCategory c) {
  constexpr std::array<std::string_view, kNumMemoryCategories> names = {
      "parameters", "gradients", "optimizer_state", "activations",
      "workspace",  "data",      "communication",   "other"};
  return names[static_cast<std::size_t>(c)];
}

constexpr std::size_t index_of(MemoryCategory c) { return static_cast<std::size_t>(c); }

inline std::optional<MemoryCategory> parse_memory_category(std::string_view name) {
  for (MemoryCategory c : kAllMemoryCategories)
    if (to_string(c) == name) return c;
  return std::nullopt;
}

}  // namespace trainmem
