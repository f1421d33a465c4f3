#include "common/allocator/allocator_config.h"

#include <charconv>
#include <string>

#include "common/util/checked_math.h"

namespace trainmem {

namespace {
std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  throw AllocatorConfigError("allocator config: " + key + " must be True or False, not '" + v + "'");
}

AllocatorConfig::Backend parse_backend(const std::string& v) {
  if (v == "native") return AllocatorConfig::Backend::caching;  // PyTorch's name
  try {
    return kAllocatorBackends.parse(v);
  } catch (const std::invalid_argument& e) {
    throw AllocatorConfigError(e.what());
  }
}
}  // namespace

AllocatorConfig AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig config;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    start = (comma == std::string_view::npos) ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos)
      throw AllocatorConfigError("allocator config: '" + item + "' is not key:value (e.g. max_split_size_mb:128)");
    const std::string key = trim(item.substr(0, colon));
    const std::string value = trim(item.substr(colon + 1));
    if (key == "backend") {
      config.backend = parse_backend(value);
    } else if (key == "max_split_size_mb") {
      std::size_t mb = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), mb);
      if (ec != std::errc() || ptr != value.data() + value.size())
        throw AllocatorConfigError("allocator config: max_split_size_mb must be a whole number of MiB, not '" + value + "'");
      // PyTorch raises values below the large segment size to it: smaller limits would stop the
      // allocator from splitting its own 20 MiB segments.
      if (mb < kLargeBuffer / MiB)
        throw AllocatorConfigError("allocator config: max_split_size_mb must be at least 20 (the large segment size), not " + value);
      config.max_split_size = checked_mul(mb, MiB, "allocator config: max_split_size_mb (MiB of 1048576 bytes)");
    } else if (key == "expandable_segments") {
      config.expandable_segments = parse_bool(key, value);
    } else {
      throw AllocatorConfigError("allocator config: unknown key '" + key +
                                 "' (known: backend, max_split_size_mb, expandable_segments)");
    }
  }
  // Raw mode is one device allocation per request; a segment that grows in place is the opposite.
  if (config.backend == Backend::raw && config.expandable_segments)
    throw AllocatorConfigError("allocator config: expandable_segments:True needs backend:caching "
                               "(raw mode asks the device for every request); drop one of the two");
  return config;
}

std::string AllocatorConfig::to_string() const {
  std::string s = "backend:" + std::string(kAllocatorBackends.name(backend));
  if (max_split_size != kNoMaxSplit) s += ",max_split_size_mb:" + std::to_string(max_split_size / MiB);
  s += std::string(",expandable_segments:") + (expandable_segments ? "True" : "False");
  return s;
}

}  // namespace trainmem
