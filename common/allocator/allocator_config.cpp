#include "common/allocator/allocator_config.h"

#include <algorithm>
#include <charconv>
#include <vector>
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

namespace {

std::size_t parse_count(const std::string& key, const std::string& v) {
  std::size_t n = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size() || v.empty())
    throw AllocatorConfigError("allocator config: " + key + " must be a whole number, not '" + v + "'");
  return n;
}

bool is_power_of_two(std::size_t n) { return n != 0 && (n & (n - 1)) == 0; }

std::size_t log2_floor(std::size_t n) { return 63 - static_cast<std::size_t>(__builtin_clzll(n)); }

std::size_t parse_divisions(const std::string& v) {
  const std::size_t n = parse_count("roundup_power2_divisions", v);
  if (!is_power_of_two(n))
    throw AllocatorConfigError("allocator config: roundup_power2_divisions must be a power of two (1, 2, 4, ...), not " + v);
  return n <= 1 ? 0 : n;  // 1 rounds as 512 B does: stored as 0, so that equal settings compare equal
}

// roundup_power2_divisions's value: "N" (every interval), or "[MB:N,...,>:N]".
std::array<std::size_t, kRoundupIntervals> parse_roundup(const std::string& v) {
  std::array<std::size_t, kRoundupIntervals> divisions{};
  if (v.empty() || v.front() != '[') {
    divisions.fill(parse_divisions(v));
    return divisions;
  }
  if (v.back() != ']') throw AllocatorConfigError("allocator config: roundup_power2_divisions: '" + v + "' lacks its ']'");
  const std::string list = v.substr(1, v.size() - 2);
  bool first = true;
  std::size_t last = 0;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string entry = trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    start = comma == std::string::npos ? list.size() + 1 : comma + 1;
    const std::size_t colon = entry.find(':');
    if (colon == std::string::npos)
      throw AllocatorConfigError("allocator config: roundup_power2_divisions: '" + entry + "' is not MB:N (e.g. [256:1,>:4])");
    const std::string size = trim(entry.substr(0, colon));
    const std::size_t n = parse_divisions(trim(entry.substr(colon + 1)));
    if (size == ">") {
      for (std::size_t i = first ? 0 : last + 1; i < kRoundupIntervals; ++i) divisions[i] = n;
      continue;
    }
    const std::size_t mb = parse_count("roundup_power2_divisions' interval (MiB)", size);
    if (!is_power_of_two(mb))
      throw AllocatorConfigError("allocator config: roundup_power2_divisions: the interval " + size +
                                 " MiB is not a power of two");
    const std::size_t index = std::min(log2_floor(mb), kRoundupIntervals - 1);
    if (first)
      for (std::size_t i = 0; i < index; ++i) divisions[i] = n;
    divisions[index] = n;
    first = false;
    last = index;
  }
  return divisions;
}

// The items of "key:value,key:value", a comma inside [...] belonging to its value.
std::vector<std::string> config_items(std::string_view text) {
  std::vector<std::string> items;
  std::string item;
  int depth = 0;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth <= 0) {
      items.push_back(trim(item));
      item.clear();
    } else {
      item += c;
    }
  }
  items.push_back(trim(item));
  return items;
}
}  // namespace

std::size_t round_request(std::size_t n, const AllocatorConfig& config) {
  if (n < kMinBlockSize) return kMinBlockSize;
  // The interval of n: 2^(20 + i) <= n < 2^(21 + i), clamped to the 16 intervals.
  const std::size_t log = log2_floor(n);
  const std::size_t index = log < 20 ? 0 : std::min<std::size_t>(log - 20, kRoundupIntervals - 1);
  const std::size_t divisions = config.roundup_power2_divisions[index];
  if (divisions <= 1 || n <= kMinBlockSize * divisions) return round_size(n);
  if (is_power_of_two(n)) return n;
  const std::size_t floor = std::size_t{1} << log;
  const std::size_t step = floor >> log2_floor(divisions);
  if (step == 0) return floor << 1;
  const std::size_t rounded_down = n & ~(step - 1);
  return rounded_down == n ? n : rounded_down + step;
}

AllocatorConfig AllocatorConfig::parse(std::string_view text) {
  AllocatorConfig config;
  for (const std::string& item : config_items(text)) {
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
    } else if (key == "roundup_power2_divisions") {
      config.roundup_power2_divisions = parse_roundup(value);
    } else if (key == "garbage_collection_threshold") {
      double t = 0;
      const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), t);
      if (ec != std::errc() || ptr != value.data() + value.size() || !(t > 0.0 && t < 1.0))
        throw AllocatorConfigError("allocator config: garbage_collection_threshold must be a number between 0 and 1 "
                                   "(exclusive), not '" + value + "'");
      config.garbage_collection_threshold = t;
    } else {
      throw AllocatorConfigError("allocator config: unknown key '" + key +
                                 "' (known: backend, max_split_size_mb, expandable_segments, "
                                 "roundup_power2_divisions, garbage_collection_threshold)");
    }
  }
  // Raw mode is one device allocation per request; a segment that grows in place is the opposite.
  if (config.backend == Backend::raw && config.expandable_segments)
    throw AllocatorConfigError("allocator config: expandable_segments:True needs backend:caching "
                               "(raw mode asks the device for every request); drop one of the two");
  return config;
}

namespace {

// The settings as PYTORCH_CUDA_ALLOC_CONF spells them, each with whether it is the default. The
// backend and expandable_segments are always written by to_string; the others only when set.
struct SettingText {
  std::string text;
  bool is_default;
  bool always_written;
};

std::vector<SettingText> setting_texts(const AllocatorConfig& c) {
  std::vector<SettingText> out;
  out.push_back({"backend:" + std::string(kAllocatorBackends.name(c.backend)), c.backend == AllocatorConfig::Backend::caching, true});
  if (c.max_split_size != kNoMaxSplit) out.push_back({"max_split_size_mb:" + std::to_string(c.max_split_size / MiB), false, false});
  out.push_back({std::string("expandable_segments:") + (c.expandable_segments ? "True" : "False"), !c.expandable_segments, true});
  const auto& d = c.roundup_power2_divisions;
  if (std::any_of(d.begin(), d.end(), [](std::size_t n) { return n > 1; })) {
    std::string text = "roundup_power2_divisions:";
    if (std::all_of(d.begin(), d.end(), [&](std::size_t n) { return n == d[0]; })) {
      text += std::to_string(d[0]);
    } else {  // every interval by its start in MiB
      text += "[";
      for (std::size_t i = 0; i < kRoundupIntervals; ++i)
        text += (i ? "," : "") + std::to_string(std::size_t{1} << i) + ":" + std::to_string(std::max<std::size_t>(d[i], 1));
      text += "]";
    }
    out.push_back({text, false, false});
  }
  if (c.garbage_collection_threshold > 0) {
    char text[32];
    const auto [end, ec] = std::to_chars(text, text + sizeof text, c.garbage_collection_threshold);  // shortest exact
    out.push_back({"garbage_collection_threshold:" + std::string(text, ec == std::errc() ? end : text), false, false});
  }
  return out;
}

}  // namespace

std::string AllocatorConfig::to_string() const {
  std::string s;
  for (const SettingText& t : setting_texts(*this))
    if (t.always_written || !t.is_default) s += (s.empty() ? "" : ",") + t.text;
  return s;
}

std::string AllocatorConfig::label() const {
  std::string s;
  for (const SettingText& t : setting_texts(*this))
    if (!t.is_default) s += (s.empty() ? "" : ",") + t.text;
  return s.empty() ? "default" : s;
}

}  // namespace trainmem
