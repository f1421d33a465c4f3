#include "common/util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace trainmem {

namespace {
std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}
}  // namespace

std::size_t parse_byte_size(std::string_view text) {
  const std::string original(text);
  auto fail = [&]() -> ByteSizeError {
    return ByteSizeError("cannot read size '" + original +
                         "': write a number with an optional unit, e.g. 16GiB, 512MiB, 80GB, 4096");
  };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw fail();
  const std::string number(text.substr(0, i));
  std::string unit = lower(text.substr(i));
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());

  double multiplier = 0;
  if (unit.empty() || unit == "b") multiplier = 1;
  else if (unit == "k" || unit == "kib") multiplier = 1024.0;
  else if (unit == "m" || unit == "mib") multiplier = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") multiplier = 1e3;
  else if (unit == "mb") multiplier = 1e6;
  else if (unit == "gb") multiplier = 1e9;
  else if (unit == "tb") multiplier = 1e12;
  else throw fail();

  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) throw fail();
  const double bytes = value * multiplier;
  if (bytes >= static_cast<double>(std::numeric_limits<std::size_t>::max())) throw fail();
  if (bytes != std::floor(bytes))
    throw ByteSizeError("size '" + original + "' is not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  if (bytes < KiB) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  } else if (bytes < MiB) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(bytes) / KiB);
  } else if (bytes < GiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / MiB);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / GiB);
  }
  return buf;
}

}  // namespace trainmem
