#include "common/util/byte_size.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <limits>

namespace trainmem {

namespace {

// Every unit a size may be written in: the one list the parser reads and the help writes out.
// Units of the same size are neighbours (the long name first); each base's units are together.
struct ByteUnit {
  std::string_view name;
  std::uint64_t base;  // 1 (bytes), 1024 (binary) or 1000 (decimal)
  int power;
};
constexpr ByteUnit kUnits[] = {
    {"B", 1, 0},
    {"KiB", 1024, 1}, {"K", 1024, 1}, {"MiB", 1024, 2}, {"M", 1024, 2}, {"GiB", 1024, 3}, {"G", 1024, 3},
    {"TiB", 1024, 4}, {"T", 1024, 4}, {"PiB", 1024, 5}, {"P", 1024, 5}, {"EiB", 1024, 6}, {"E", 1024, 6},
    {"KB", 1000, 1},  {"MB", 1000, 2}, {"GB", 1000, 3},  {"TB", 1000, 4}, {"PB", 1000, 5},  {"EB", 1000, 6},
};

constexpr std::uint64_t bytes_of(const ByteUnit& unit) {
  std::uint64_t bytes = 1;
  for (int i = 0; i < unit.power; ++i) bytes *= unit.base;
  return bytes;
}

bool same_letters(std::string_view a, std::string_view b) {  // ignoring case
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

constexpr std::uint64_t kMaxSize = std::numeric_limits<std::uint64_t>::max();

}  // namespace

std::vector<std::string_view> byte_size_unit_names() {
  std::vector<std::string_view> names;
  for (const ByteUnit& unit : kUnits) names.push_back(unit.name);
  return names;
}

std::string byte_size_units() {
  std::string text;
  for (std::size_t i = 0; i < std::size(kUnits); ++i) {
    const ByteUnit& unit = kUnits[i];
    if (i > 0) text += bytes_of(kUnits[i - 1]) == bytes_of(unit) ? "/" : ", ";
    text += unit.name;
    const bool last_of_its_base = i + 1 == std::size(kUnits) || kUnits[i + 1].base != unit.base;
    if (last_of_its_base && unit.base != 1) text += " (powers of " + std::to_string(unit.base) + ")";
  }
  // The one difference that matters in practice, in bytes from the table above: G is GiB, GB is decimal.
  const auto bytes_in = [](std::string_view name) {
    for (const ByteUnit& unit : kUnits)
      if (unit.name == name) return std::to_string(24 * bytes_of(unit));
    return std::string();
  };
  return text + ", in any case: 24G = 24GiB = " + bytes_in("GiB") + " bytes, 24GB = 24gb = " + bytes_in("GB") + " bytes";
}

std::string exact_byte_size(std::uint64_t bytes) {
  const ByteUnit* best = &kUnits[0];  // bytes
  for (const ByteUnit& unit : kUnits)  // the long name comes first, so an alias never replaces it
    if (unit.base == 1024 && bytes != 0 && bytes % bytes_of(unit) == 0 && bytes_of(unit) > bytes_of(*best)) best = &unit;
  return std::to_string(bytes / bytes_of(*best)) + std::string(best->name);
}

std::size_t parse_byte_size(std::string_view text) {
  static_assert(sizeof(std::size_t) == sizeof(std::uint64_t), "sizes are 64-bit");
  const std::string original(text);
  const auto unreadable = [&] {
    return ByteSizeError("cannot read size '" + original +
                         "': write a number with an optional unit, e.g. 16GiB, 512MiB, 80GB, 4096 (units: " +
                         byte_size_units() + ")");
  };
  const auto too_large = [&] {
    return ByteSizeError("size '" + original + "' does not fit in 64 bits: the largest size is " +
                         std::to_string(kMaxSize) + " bytes (2^64 - 1, one byte less than 16EiB)");
  };

  // The number: whole digits, then optionally '.' and the fraction's digits.
  std::size_t end = 0;
  while (end < text.size() && is_digit(text[end])) ++end;
  const std::string_view whole = text.substr(0, end);
  std::string_view fraction;
  if (end < text.size() && text[end] == '.') {
    const std::size_t first = ++end;
    while (end < text.size() && is_digit(text[end])) ++end;
    fraction = text.substr(first, end - first);
  }
  if (whole.empty() && fraction.empty()) throw unreadable();

  // The unit, after optional spaces ("2 KiB"); none: bytes.
  std::string_view unit_text = text.substr(end);
  while (!unit_text.empty() && unit_text.front() == ' ') unit_text.remove_prefix(1);
  std::uint64_t multiplier = unit_text.empty() ? 1 : 0;
  for (const ByteUnit& unit : kUnits)
    if (same_letters(unit_text, unit.name)) multiplier = bytes_of(unit);
  if (multiplier == 0) throw unreadable();

  // The fraction's bytes, exactly: the digits of `fraction` times the multiplier, from the last
  // digit up. The product's last fraction.size() digits are parts of a byte (all must be 0); the
  // carry left is the whole bytes, less than the multiplier (each step is below 10 x multiplier,
  // at most 10 x 2^60, so nothing wraps).
  std::uint64_t carry = 0;
  bool part_of_a_byte = false;
  for (auto digit = fraction.rbegin(); digit != fraction.rend(); ++digit) {
    const std::uint64_t value = static_cast<std::uint64_t>(*digit - '0') * multiplier + carry;
    part_of_a_byte = part_of_a_byte || value % 10 != 0;
    carry = value / 10;
  }
  if (part_of_a_byte) throw ByteSizeError("size '" + original + "' is not a whole number of bytes");
  const std::uint64_t fraction_bytes = carry;

  std::uint64_t whole_units = 0;
  if (!whole.empty() && std::from_chars(whole.data(), whole.data() + whole.size(), whole_units).ec != std::errc())
    throw too_large();  // digits only, so the one error is a number past 2^64 - 1
  if (whole_units > (kMaxSize - fraction_bytes) / multiplier) throw too_large();
  return whole_units * multiplier + fraction_bytes;
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  if (bytes < KiB) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes < MiB) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / KiB);
  } else if (bytes < GiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / MiB);
  } else if (bytes < GiB * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / GiB);
  } else {
    // Past PyTorch's largest unit: TiB, PiB, EiB (a 70B model's activations at a long context, a
    // limit the flags state), not "4516419.50 GiB".
    const char* units[] = {"TiB", "PiB", "EiB"};
    double value = static_cast<double>(bytes) / GiB / 1024;
    std::size_t unit = 0;
    while (value >= 1024 && unit + 1 < std::size(units)) {
      value /= 1024;
      ++unit;
    }
    std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
  }
  return buf;
}

}  // namespace trainmem
